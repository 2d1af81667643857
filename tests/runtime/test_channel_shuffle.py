"""ShuffleNet's channel shuffle (Concat, Reshape, Transpose, Reshape) as one prepared step of the
CPU executor (runtime/fusions.py, ``_fuse_channel_shuffles``; runtime/kernels/shuffle.py): against
onnxruntime and offload.evaluate (the four ops apart), bit for bit (only data moves), bound and
unbound, on two threads; and the runs of four that must not be fused."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels.shuffle import ChannelShuffle
from offload.runtime.steps import _BoundRun, _FusedAway, _KernelChain, _PreparedStep, _ShuffleSlices

from .harness import concurrently
from .onnx_graphs import model_bytes

TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(
    channels,
    groups: int,
    n: int = 1,
    h: int = 5,
    w: int = 7,
    dtype=np.float32,
    first: str = "Neg",
    also_output: str | None = None,
    perm=(0, 2, 1, 3, 4),
    readers: str = "slices",
    bounds: tuple | None = None,
) -> bytes:
    """x0, x1, ... -> first -> Concat -> Reshape (N, g, C/g, H, W) -> Transpose -> Reshape (N, C,
    H, W) = shuffled, read by ``readers``: "slices", two Slices of ``bounds`` ((start, end) each,
    the halves by default) -> Relu of the second; "relu", a Relu; "slice-and-relu", a Slice and a
    Relu. ``first`` Neg (arena views: a fused prepared step is bound) or Reshape (a kernel's
    results: unbound); ``also_output``: an intermediate that is a result of the graph too."""
    t = TYPES[dtype]
    c = sum(channels)
    inputs, inits, nodes, joined = [], [], [], []
    for i, ch in enumerate(channels):
        inputs.append((f"x{i}", t, [n, ch, h, w]))
        if first == "Reshape":
            inits.append((f"s{i}", np.array([n, ch, h, w], np.int64)))
            nodes.append(helper.make_node("Reshape", [f"x{i}", f"s{i}"], [f"r{i}"]))
        else:
            nodes.append(helper.make_node("Neg", [f"x{i}"], [f"r{i}"]))
        joined.append(f"r{i}")
    (lo0, hi0), (lo1, hi1) = bounds or ((0, c // 2), (c // 2, c))
    inits += [
        ("grouped", np.array([n, groups, c // groups, h, w], np.int64)),
        ("merged", np.array([n, c, h, w], np.int64)),
        ("lo0", np.array([lo0], np.int64)),
        ("hi0", np.array([hi0], np.int64)),
        ("lo1", np.array([lo1], np.int64)),
        ("hi1", np.array([hi1], np.int64)),
        ("axes", np.array([1], np.int64)),
    ]
    nodes += [
        helper.make_node("Concat", joined, ["cat"], axis=1),
        helper.make_node("Reshape", ["cat", "grouped"], ["split"]),
        helper.make_node("Transpose", ["split"], ["turned"], perm=list(perm)),
        helper.make_node("Reshape", ["turned", "merged"], ["shuffled"]),
    ]
    if readers == "relu":
        nodes.append(helper.make_node("Relu", ["shuffled"], ["a"]))
        outputs = [("a", t, None)]
    else:
        nodes.append(helper.make_node("Slice", ["shuffled", "lo0", "hi0", "axes"], ["a"]))
        if readers == "slices":
            nodes.append(helper.make_node("Slice", ["shuffled", "lo1", "hi1", "axes"], ["b0"]))
        else:
            nodes.append(helper.make_node("Relu", ["shuffled"], ["b0"]))
        nodes.append(helper.make_node("Relu", ["b0"], ["b"]))
        outputs = [("a", t, None), ("b", t, None)]
    outputs += [(also_output, t, None)] if also_output else []
    return model_bytes(nodes, inputs, outputs, inits, opset=17)


def _feeds(channels, n=1, h=5, w=7, dtype=np.float32, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    return {f"x{i}": rng.standard_normal((n, ch, h, w)).astype(dtype) for i, ch in enumerate(channels)}


def _shuffles(method) -> list:
    """The fused shuffles: prepared calls, and steps that write the Slices of the shuffle."""
    return [
        s
        for s in method._steps
        if isinstance(s, _ShuffleSlices)
        or (isinstance(s, _PreparedStep) and isinstance(s.call, ChannelShuffle))
    ]


def _check(data: bytes, feeds: dict, method) -> None:
    expected = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    evaluated = offload.evaluate(offload.load(data), feeds)
    names = [o.name for o in ort.InferenceSession(data, providers=["CPUExecutionProvider"]).get_outputs()]
    for _ in range(2):  # the second run reuses the calls bound at the first
        got = method.run(feeds)
        for name, want in zip(names, expected):
            np.testing.assert_array_equal(got[name], want)
            np.testing.assert_array_equal(got[name], evaluated[name])


# (channels of the Concat's inputs, groups, batch, height, width)
CASES = [
    ((8, 8), 2, 1, 5, 7),  # ShuffleNet's: two branches of C / 2, g = 2
    ((24, 24), 2, 1, 28, 28),
    ((6, 12), 2, 1, 3, 5),  # the second input straddles the groups
    ((4, 5, 3), 3, 2, 7, 9),  # three inputs, three groups, a batch of 2
    ((10,), 5, 1, 1, 1),  # one input, 1 x 1 maps
]


@pytest.mark.parametrize("readers", ["slices", "relu", "slice-and-relu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"{'+'.join(map(str, c[0]))}-g{c[1]}-n{c[2]}-{c[3]}x{c[4]}"
)
def test_shuffle_is_one_step_and_matches_onnxruntime(case, dtype, readers):
    channels, groups, n, h, w = case
    data = _model(channels, groups, n, h, w, dtype, readers=readers)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    (step,) = _shuffles(method)
    assert isinstance(step.kernel, _KernelChain)
    pc = method._steps.index(step)
    fused = 5 if readers == "slices" else 3  # the Slices' steps too, where they are all that reads
    assert isinstance(step, _ShuffleSlices) == (readers == "slices")
    assert all(isinstance(s, _FusedAway) for s in method._steps[pc + 1 : pc + 1 + fused])
    assert not isinstance(method._steps[pc + 1 + fused], _FusedAway)
    if readers != "slices":  # a prepared call: bound
        assert any(isinstance(s, _BoundRun) and step in s.steps for s in method._fast_steps)
    _check(data, _feeds(channels, n, h, w, dtype), method)


@pytest.mark.parametrize("bounds", [((-18, 7), (7, 2**62)), ((3, 11), (0, 18)), ((5, 6), (17, 18))])
def test_slices_of_any_channel_range(bounds):
    """Negative and clamped bounds, ranges that start inside a group's run, one channel."""
    channels = (6, 12)
    data = _model(channels, 2, 2, 3, 5, bounds=bounds)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    (step,) = _shuffles(method)
    assert isinstance(step, _ShuffleSlices)
    _check(data, _feeds(channels, 2, 3, 5), method)


def test_unbound_shuffle_of_kernel_results():
    channels = (6, 6)
    data = _model(channels, 2, 2, first="Reshape")
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert len(_shuffles(method)) == 1
    for seed in range(2):  # new inputs: the calls made for the last arrays are made again
        _check(data, _feeds(channels, 2, seed=seed), method)


@pytest.mark.parametrize("name", ["cat", "split", "turned", "shuffled"])
def test_an_intermediate_that_is_a_result_is_not_fused(name):
    channels = (4, 4)
    data = _model(channels, 2, also_output=name)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    if name == "shuffled":  # the shuffle's own result: fused, but written, and the Slices apart
        (step,) = _shuffles(method)
        assert isinstance(step, _PreparedStep)
    else:
        assert not _shuffles(method)
    _check(data, _feeds(channels), method)


def test_another_transpose_is_not_fused():
    channels = (4, 4)
    data = _model(channels, 2, perm=(0, 1, 2, 4, 3))
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert not _shuffles(method)
    _check(data, _feeds(channels), method)


def test_two_threads_run_the_fused_shuffle():
    channels = (24, 24)
    data = _model(channels, 2, 1, 14, 14)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert len(_shuffles(method)) == 1
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feeds = [_feeds(channels, 1, 14, 14, seed=s) for s in range(2)]
    expected = [session.run(None, f) for f in feeds]

    def work(k):
        for _ in range(20):
            got = method.run(feeds[k])
            np.testing.assert_array_equal(got["a"], expected[k][0])
            np.testing.assert_array_equal(got["b"], expected[k][1])

    concurrently(work)


def test_shuffle_into_memory_that_holds_an_input():
    """The planned result may reuse an input's memory: the call concatenates first."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 1, 4, 3, 2)).astype(np.float32)
    expected = np.concatenate([a, b], 1).reshape(1, 2, 4, 3, 2).transpose(0, 2, 1, 3, 4).reshape(1, 8, 3, 2)
    arena = np.zeros(2 * a.size, np.float32)
    out = arena.reshape(1, 8, 3, 2)
    x0 = arena[: a.size].reshape(a.shape)  # the first input in the first half of the result
    x1 = b.copy()
    call = ChannelShuffle((4, 4), (1, 3, 2), np.float32, 2)
    for run in (lambda: call(out, x0, x1), call.bind(out, x0, x1)):
        np.copyto(x0, a)
        run()
        np.testing.assert_array_equal(out, expected)


def test_slices_into_memory_that_holds_an_input():
    """A Slice's planned result may reuse an input's memory too: the call concatenates first."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 2, 6, 3, 3)).astype(np.float32)
    shuffled = np.concatenate([a, b], 1).reshape(2, 2, 6, 3, 3).transpose(0, 2, 1, 3, 4).reshape(2, 12, 3, 3)
    arena = np.zeros(a.size + 2 * 5 * 9, np.float32)
    first = arena[: 2 * 7 * 9].reshape(2, 7, 3, 3)  # channels 0..6 of the result, over input a
    second = np.zeros((2, 5, 3, 3), np.float32)
    x0 = arena[: a.size].reshape(a.shape)
    call = ChannelShuffle((6, 6), (2, 3, 3), np.float32, 2, ((0, 7), (7, 12)))
    for _ in range(2):
        np.copyto(x0, a)
        call.write((first, second), (x0, b))
        np.testing.assert_array_equal(first, shuffled[:, :7])
        np.testing.assert_array_equal(second, shuffled[:, 7:])
