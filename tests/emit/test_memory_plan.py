"""The memory plan: lifetimes, best-fit placement, and no two live tensors sharing bytes."""

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import offload
from offload import runtime
from offload.emit import memory_plan as mp
from offload.emit import summarize
from offload.emit.plan import RESHAPES, SHRINKS_OVER, WRITES_OVER
from offload.schemas import pte

vi = helper.make_tensor_value_info
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def test_lifetime_runs_from_first_write_to_last_read():
    # 0: a = f(x); 1: b = g(a); 2: c = h(b, a)
    spans = mp.lifetimes([([9], [1]), ([1], [2]), ([2, 1], [3])], loops=[], live_out=[3])
    assert spans == {1: (0, 2), 2: (1, 2), 3: (2, 3)}


def test_a_value_read_in_a_loop_lives_for_the_whole_loop():
    # 0: a = ...; 1..3 loop body reads a and writes/reads t; 3 jumps back to 1; 4 reads nothing.
    accesses = [([], [1]), ([1], [2]), ([2], [3]), ([3], []), ([], [])]
    spans = mp.lifetimes(accesses, loops=[(1, 3)])
    assert spans[1] == (0, 3)  # written before the loop, read inside: live until the back jump
    assert spans[2] == (1, 2)  # local to one iteration
    assert spans[3] == (2, 3)


def test_a_value_read_before_written_in_a_loop_lives_across_the_back_edge():
    accesses = [([], []), ([5], [6]), ([6], [5]), ([], [])]  # 5 is read at 1, written at 2
    assert mp.lifetimes(accesses, loops=[(1, 3)])[5] == (1, 3)


def test_best_fit_reuses_the_smallest_gap_that_holds_a_tensor():
    sizes = {1: 100, 2: 40, 3: 64, 4: 30}
    spans = {1: (0, 1), 2: (0, 4), 3: (2, 4), 4: (2, 4)}
    offsets, arena = mp.place(sizes, spans)
    # 1 and 3 never live together: 3 reuses 1's bytes; 4 fits in what is left of them.
    assert offsets[3] == offsets[1] == 0
    assert offsets[4] == 64 and offsets[2] == 112
    assert arena == 160
    assert all(o % 16 == 0 for o in offsets.values())


def test_an_output_takes_the_place_of_an_input_read_for_the_last_time():
    # 0: a = f(x); 1: b = relu(a); 2: c = g(b)
    accesses = [([9], [1]), ([1], [2]), ([2], [3])]
    p = mp.plan({1: 64, 2: 64, 3: 64}, accesses, loops=[], live_out=[3], overwrites=[(1, 2, 1)])
    assert p.offsets[1] == p.offsets[2] and p.offsets[3] != p.offsets[2]
    assert p.arena_size == 128


def test_no_overwrite_of_an_input_read_later_or_by_a_larger_output():
    # 0: a = f(x); 1: b = relu(a); 2: c = g(b, a): a is still read at 2
    accesses = [([9], [1]), ([1], [2]), ([2, 1], [3])]
    p = mp.plan({1: 64, 2: 64, 3: 64}, accesses, loops=[], live_out=[3], overwrites=[(1, 2, 1)])
    assert p.offsets[1] != p.offsets[2]
    accesses = [([9], [1]), ([1], [2]), ([2], [3])]
    p = mp.plan({1: 32, 2: 64, 3: 64}, accesses, loops=[], live_out=[3], overwrites=[(1, 2, 1)])
    assert p.offsets[1] != p.offsets[2]


def test_a_smaller_output_starts_where_its_input_did_and_frees_the_rest():
    # 0: a = conv(x) [256]; 1: p = pool(a) [64], written over a; 2: c = g(p) [128]; 3: d = h(c)
    # After 1 only p's 64 bytes of a's place are taken: c fits in the rest of it.
    accesses = [([9], [1]), ([1], [2]), ([2], [3]), ([3], [4])]
    sizes = {1: 256, 2: 64, 3: 128, 4: 16}
    p = mp.plan(sizes, accesses, loops=[], live_out=[4], overwrites=[(1, 2, 1)])
    assert p.offsets[2] == p.offsets[1] == 0
    assert p.offsets[3] == 64 and p.arena_size == 256
    # without the overwrite: a and p live together at 1, p and c at 2
    q = mp.plan(sizes, accesses, loops=[], live_out=[4])
    assert q.arena_size == 320


def test_a_smaller_output_keeps_its_own_place_where_sharing_would_cost_more():
    # 0: a = f(x) [64]; 1: p = pool(a) [16], may write over a; 2: t = g(p) [32], unread;
    # 3: b = h(p, p) [64]; 4: c = k(b) [32]. p held at a's start pushes b above it (112 bytes);
    # on its own p goes above b and the arena is the live bound (b and c at 4: 64 + 32 = 96).
    accesses = [([9], [1]), ([1], [2]), ([2], [3]), ([2, 2], [4]), ([4], [5])]
    sizes = {1: 64, 2: 16, 3: 32, 4: 64, 5: 32}
    spans = mp.lifetimes(accesses, [], [5])
    assert mp._place_shared(sizes, spans, [(1, 2, 1)], mp.ALIGNMENT)[1] == 112
    p = mp.plan(sizes, accesses, loops=[], live_out=[5], overwrites=[(1, 2, 1)])
    assert p.arena_size == 96 and p.offsets[2] != p.offsets[1]


def test_no_overwrite_inside_a_loop_whose_input_crosses_the_back_edge():
    # 0: a = ...; 1: b = relu(a) in a loop 1..2 that jumps back from 2: a lives for the loop
    accesses = [([], [1]), ([1], [2]), ([2], [])]
    p = mp.plan({1: 64, 2: 64}, accesses, loops=[(1, 2)], overwrites=[(1, 2, 1)])
    assert p.offsets[1] != p.offsets[2]


def _interference(method) -> set[frozenset]:
    """Pairs of values that must not share bytes, by classic liveness over the chain's control flow:
    a value written at an instruction interferes with everything live after it and with what the
    instruction reads, except an elementwise op's input of the output's type that is dead after
    it (``WRITES_OVER``: the op may write over it)."""
    steps = method.instructions
    n = len(steps)
    live_in = [set() for _ in range(n)] + [{int(i) for i in method.plan.outputs}]  # [n]: after the chain

    def live_out(pc: int) -> set:
        successors = {pc + 1} | ({steps[pc].jump} if steps[pc].jump is not None else set())
        return set().union(*(live_in[s] for s in successors))

    changed = True
    while changed:
        changed = False
        for pc in reversed(range(n)):
            new = set(steps[pc].reads) | (live_out(pc) - set(steps[pc].writes))
            if new != live_in[pc]:
                live_in[pc], changed = new, True
    planned = method.planned
    pairs = set()
    for pc, st in enumerate(steps):
        after = live_out(pc)
        positions = (0,) if st.name in SHRINKS_OVER else WRITES_OVER.get(st.name, ())
        over = {
            st.reads[k]
            for k in positions
            if k < len(st.reads) and len(st.writes) == 1 and st.reads[k] not in after
        }
        for w in st.writes:
            for v in after | set(st.reads) | set(st.writes):
                if v == w or (
                    v in over and v in planned and w in planned and _same(planned[v], planned[w], st.name)
                ):
                    continue
                pairs.add(frozenset((v, w)))
    return pairs


def _same(a: np.ndarray, b: np.ndarray, op: str) -> bool:
    """Whether op's output b may take its input a's place: both of one dtype; of one shape, of
    one size for a reshape, a smaller output starting where the input does for a pool."""
    if a.dtype != b.dtype:
        return False
    if op in SHRINKS_OVER:
        return b.size < a.size and b.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    return a.size == b.size if op in RESHAPES else a.shape == b.shape


def _assert_no_live_overlap(module) -> int:
    """Checks every plan of the module; returns how many interfering planned pairs it compared."""
    checked = 0
    for name in module.plan_names:
        method = module.method(name)
        ranges = {}
        for i, view in method.planned.items():
            start = view.__array_interface__["data"][0]
            if view.nbytes:
                ranges[i] = (start, start + view.nbytes)
        for pair in _interference(method):
            a, b = sorted(pair)
            if a in ranges and b in ranges:
                (s1, e1), (s2, e2) = ranges[a], ranges[b]
                assert e1 <= s2 or e2 <= s1, (
                    f"plan '{name}': values {a} and {b} are live together but share bytes"
                )
                checked += 1
    return checked


@pytest.fixture(scope="module")
def example_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("example") / "tiny_cnn.onnx")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "build_example.py"), path], check=True)
    return path


def _loop_model():
    body = helper.make_graph(
        [
            helper.make_node("Add", ["a", "one"], ["a2"]),
            helper.make_node("Mul", ["a2", "a2"], ["sq"]),
            helper.make_node("Identity", ["c"], ["c2"]),
        ],
        "body",
        [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("a", T.FLOAT, [64])],
        [vi("c2", T.BOOL, []), vi("a2", T.FLOAT, [64]), vi("sq", T.FLOAT, [64])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["x1"]),
            helper.make_node("Loop", ["M", "", "x1"], ["ra", "rs"], body=body),
            helper.make_node("Neg", ["ra"], ["y"]),
        ],
        "g",
        [vi("M", T.INT64, []), vi("x", T.FLOAT, [64])],
        [vi("y", T.FLOAT, [64]), vi("rs", T.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.ones(64, np.float32), "one")],
    )
    return helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)]
    ).SerializeToString()


def _if_in_scan_model():
    then_b = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", T.FLOAT, [8])])
    else_b = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e", T.FLOAT, [8])])
    body = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["s"], ["sum"], keepdims=0),
            helper.make_node("Greater", ["sum", "zero"], ["c"]),
            helper.make_node("If", ["c"], ["r"], then_branch=then_b, else_branch=else_b),
            helper.make_node("Add", ["s", "r"], ["s2"]),
        ],
        "body",
        [vi("s", T.FLOAT, [8]), vi("x", T.FLOAT, [8])],
        [vi("s2", T.FLOAT, [8]), vi("r", T.FLOAT, [8])],
    )
    graph = helper.make_graph(
        [helper.make_node("Scan", ["s0", "xs"], ["sf", "ys"], body=body, num_scan_inputs=1)],
        "g",
        [vi("s0", T.FLOAT, [8]), vi("xs", T.FLOAT, [4, 8])],
        [vi("sf", T.FLOAT, [8]), vi("ys", T.FLOAT, [4, 8])],
        initializer=[numpy_helper.from_array(np.array(0, np.float32), "zero")],
    )
    return helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)]
    ).SerializeToString()


MODELS = {
    "example": lambda p: p,
    "resnet50": lambda p: os.path.join(LIGHT, "light_resnet50.onnx"),
    "inception_v1": lambda p: os.path.join(LIGHT, "light_inception_v1.onnx"),
    "loop": lambda p: _loop_model(),
    "if_in_scan": lambda p: _if_in_scan_model(),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_tensors_live_at_the_same_time_never_share_bytes(name, example_path):
    program = offload.load(MODELS[name](example_path))
    module = runtime.load(offload.save(program))
    assert _assert_no_live_overlap(module) > 0


def test_arena_is_smaller_than_the_sum_of_intermediates(example_path):
    data = offload.save(offload.load(example_path))
    (forward,) = summarize(pte.parse(data).program)
    assert forward.plan == "forward" and forward.planned_tensors == 10
    assert forward.arena_bytes < forward.planned_bytes
    method = runtime.load(data).method("forward")
    assert (method.arena_bytes, method.planned_bytes) == (forward.arena_bytes, forward.planned_bytes)
    assert method.plan.nonConstBufferSizes.tolist() == [0, forward.arena_bytes]
