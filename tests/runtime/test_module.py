"""Running .pte files: results bit for bit equal to offload.evaluate and near onnxruntime's on the
same ONNX model, input checks, hostile files."""

import copy
import mmap
import os
import weakref

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import offload
from offload import runtime
from offload.emit import lower
from offload.errors import DTypeError, ModelFormatError, ShapeError, UnsupportedOpError
from offload.runtime import kernels
from offload.runtime.module import Module
from offload.schemas import pte
from offload.schemas.generated.executorch_flatbuffer.InstructionArguments import InstructionArguments as IA
from offload.schemas.generated.executorch_flatbuffer.KernelTypes import KernelTypes
from tests.reference import assert_close, onnxruntime_outputs, reduction_terms, sum_tolerance

vi = helper.make_tensor_value_info
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


_ONNX: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # program → its ONNX model's bytes


def _program(nodes, inputs, outputs, inits=(), opset=21):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])
    program = offload.load(model.SerializeToString())
    _ONNX[program] = model.SerializeToString()
    return program


def _same(a, b, where=""):
    """Equal bit for bit: same type of thing, dtype, shape and bytes (NaNs included)."""
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{k}]")
        return
    if a is None:
        assert b is None, where
        return
    a, b = np.asarray(a), np.asarray(b)
    assert (a.dtype, a.shape) == (b.dtype, b.shape), where
    if a.dtype == object:
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes(), where


def _check(program, *feeds, onnx_model=None, terms=1, reference=None):
    """Save, load and run the program on each feed; every output must equal evaluate's, and be
    within ``sum_tolerance(float32, terms)`` of onnxruntime's on the program's ONNX model
    (``terms``: the longest chain of rounded sums from an input to an output), or of
    ``reference(inputs)`` where given."""
    module = runtime.load(offload.save(program))
    onnx_model = onnx_model or _ONNX[program]
    reference = reference or (lambda inputs: onnxruntime_outputs(onnx_model, inputs))
    for inputs in feeds:
        want = offload.evaluate(program, inputs)
        got = module.run(inputs)
        assert list(got) == list(want)
        for name in want:
            _same(want[name], got[name], name)
        _near(got, reference(inputs), sum_tolerance(np.float32, terms))
    return module


def _near(got, independent, rtol):
    assert list(got) == list(independent)
    for name, want in independent.items():
        if isinstance(want, list):  # a sequence
            assert len(got[name]) == len(want), name
            for k, (a, b) in enumerate(zip(got[name], want)):
                assert_close(a, b, rtol=rtol, err_msg=f"{name}[{k}]")
        elif np.asarray(want).dtype == object:
            np.testing.assert_array_equal(got[name], want, err_msg=name)
        else:
            assert_close(got[name], want, rtol=rtol, err_msg=name)


def test_example_cnn_matches_evaluate(tmp_path, example_model):
    program = offload.load(example_model)
    rng = np.random.default_rng(0)
    feeds = ({"image": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(2))
    _check(program, *feeds, onnx_model=example_model, terms=reduction_terms(example_model))


def test_conv_and_gemm_match_evaluate():
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    fc = numpy_helper.from_array(rng.standard_normal((5, 64)).astype(np.float32), "fc")
    program = _program(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("Flatten", ["r"], ["f"]),
            helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1, alpha=0.5),
        ],
        [vi("x", T.FLOAT, [2, 3, 8, 8])],
        [vi("y", T.FLOAT, [2, 5])],
        [w, b, fc],
    )
    # the longest sum: 27 products in the conv, then 64 in the Gemm
    _check(program, {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}, terms=27 + 64)


def test_if_takes_either_branch():
    then_b = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", T.FLOAT, [3])])
    else_b = helper.make_graph([helper.make_node("Sqrt", ["x"], ["e"])], "else", [], [vi("e", T.FLOAT, [3])])
    program = _program(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
        [vi("c", T.BOOL, []), vi("x", T.FLOAT, [3])],
        [vi("y", T.FLOAT, [3])],
    )
    x = np.array([1.0, 4.0, 2.0], np.float32)
    _check(program, {"c": np.array(True), "x": x}, {"c": np.array(False), "x": x})


def _loop_program():
    """Carried (a, b) swap places each step (a ← b, b ← a + i), and a's value is a scan output."""
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
            helper.make_node("Add", ["a", "fi"], ["a_next"]),
            helper.make_node("Less", ["fi", "limit"], ["go"]),
        ],
        "body",
        [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("a", T.FLOAT, [2]), vi("b", T.FLOAT, [2])],
        [vi("go", T.BOOL, []), vi("b", T.FLOAT, [2]), vi("a_next", T.FLOAT, [2]), vi("a", T.FLOAT, [2])],
    )
    limit = numpy_helper.from_array(np.array(3.0, np.float32), "limit")
    return _program(
        [helper.make_node("Loop", ["M", "cond", "a0", "b0"], ["ra", "rb", "scan"], body=body)],
        [vi("M", T.INT64, []), vi("cond", T.BOOL, []), vi("a0", T.FLOAT, [2]), vi("b0", T.FLOAT, [2])],
        [vi("ra", T.FLOAT, [2]), vi("rb", T.FLOAT, [2]), vi("scan", T.FLOAT, None)],
        [limit],
    )


@pytest.mark.parametrize("trips,cond", [(0, True), (1, True), (3, True), (9, True), (5, False)])
def test_loop_with_scan_outputs_matches_evaluate(trips, cond):
    program = _loop_program()
    feed = {
        "M": np.array(trips, np.int64),
        "cond": np.array(cond),
        "a0": np.array([1, 2], np.float32),
        "b0": np.array([10, 20], np.float32),
    }
    module = _check(program, feed)
    if trips == 0 or not cond:
        got = module.run(feed)
        assert got["scan"].shape == (0, 2) and got["scan"].dtype == np.float32


def test_scan_with_a_captured_value_matches_evaluate():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Mul", ["s2", "k"], ["y"])],
        "body",
        [vi("s", T.FLOAT, [2]), vi("x", T.FLOAT, [2])],
        [vi("s2", T.FLOAT, [2]), vi("y", T.FLOAT, [2])],
    )
    program = _program(
        [
            helper.make_node(
                "Scan", ["s0", "xs"], ["sf", "ys"], body=body, num_scan_inputs=1, scan_output_axes=[1]
            )
        ],
        [vi("s0", T.FLOAT, [2]), vi("xs", T.FLOAT, [4, 2]), vi("k", T.FLOAT, [2])],
        [vi("sf", T.FLOAT, [2]), vi("ys", T.FLOAT, [2, 4])],
    )
    rng = np.random.default_rng(2)
    feed = {
        "s0": np.zeros(2, np.float32),
        "xs": rng.standard_normal((4, 2)).astype(np.float32),
        "k": np.array([2, 3], np.float32),
    }
    module = _check(program, feed)
    assert module.method_names == ["forward"] and module.plan_names == ["forward", "forward/#0/body"]


def test_sequences_match_evaluate():
    body = helper.make_graph(
        [helper.make_node("Neg", ["t"], ["n"])], "map", [vi("t", T.FLOAT, None)], [vi("n", T.FLOAT, None)]
    )
    program = _program(
        [
            helper.make_node("SplitToSequence", ["x"], ["seq"], axis=0, keepdims=0),
            helper.make_node("SequenceInsert", ["seq", "x0"], ["seq2"]),
            helper.make_node("SequenceMap", ["seq2"], ["neg"], body=body),
            helper.make_node("SequenceLength", ["neg"], ["n"]),
            helper.make_node("SequenceAt", ["neg", "one"], ["second"]),
            helper.make_node("ConcatFromSequence", ["neg"], ["cat"], axis=0, new_axis=1),
        ],
        [vi("x", T.FLOAT, [3, 2]), vi("x0", T.FLOAT, [2])],
        [
            helper.make_tensor_sequence_value_info("neg", T.FLOAT, None),
            vi("n", T.INT64, []),
            vi("second", T.FLOAT, [2]),
            vi("cat", T.FLOAT, [4, 2]),
        ],
        [numpy_helper.from_array(np.array(1, np.int64), "one")],
    )
    _check(program, {"x": np.arange(6, dtype=np.float32).reshape(3, 2), "x0": np.array([7, 8], np.float32)})


def test_strings_match_evaluate():
    words = numpy_helper.from_array(np.array(["Ab", "cD", "héllo"], dtype=object), "words")
    program = _program(
        [
            helper.make_node("StringConcat", ["words", "s"], ["joined"]),
            helper.make_node("StringNormalizer", ["joined"], ["lower"], case_change_action="LOWER"),
        ],
        [vi("s", T.STRING, [3])],
        [vi("lower", T.STRING, [3]), vi("words", T.STRING, [3])],
        [words],
    )

    # onnxruntime's StringNormalizer needs an installed en_US locale: Python's str is the reference
    def reference(inputs):
        joined = [a + b for a, b in zip(["Ab", "cD", "héllo"], inputs["s"])]
        return {"lower": np.array([j.lower() for j in joined], dtype=object), "words": words_array}

    words_array = np.array(["Ab", "cD", "héllo"], dtype=object)
    _check(program, {"s": np.array(["X", "", "!"], dtype=object)}, reference=reference)


def test_optionals_match_evaluate():
    program = _program(
        [
            helper.make_node("Optional", ["x"], ["opt"]),
            helper.make_node("OptionalHasElement", ["opt"], ["has"]),
            helper.make_node("OptionalGetElement", ["opt"], ["got"]),
        ],
        [vi("x", T.FLOAT, [2])],
        [vi("has", T.BOOL, []), vi("got", T.FLOAT, [2])],
    )
    _check(program, {"x": np.array([1, 2], np.float32)})


def test_seeded_random_repeats_evaluate_and_goes_on():
    program = _program(
        [helper.make_node("RandomNormal", [], ["y"], shape=[4], seed=5.0)], [], [vi("y", T.FLOAT, [4])]
    )
    module = runtime.load(offload.save(program))
    first, second = module.run({})["y"], module.run({})["y"]
    _same(offload.evaluate(program, {})["y"], first)  # evaluate's generator starts from the seed too
    assert not np.array_equal(first, second)  # one generator per node, going on from run to run
    _same(runtime.load(offload.save(program)).run({})["y"], first)


def test_outputs_are_not_overwritten_by_later_runs():
    program = _program(
        [helper.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, [3])], [vi("y", T.FLOAT, [3])]
    )
    module = runtime.load(offload.save(program))
    a = module.run({"x": np.array([1, -1, 2], np.float32)})["y"]
    module.run({"x": np.array([5, 5, 5], np.float32)})
    np.testing.assert_array_equal(a, [1, 0, 2])


def test_a_file_is_mapped_and_constants_are_read_only_views_into_it(tmp_path, example_model):
    path = tmp_path / "cnn.pte"
    offload.save(offload.load(example_model), path)
    module = runtime.load(path)
    constants = module.method("forward").constants
    assert len(constants) == 10
    for array in constants.values():
        assert not array.flags.writeable
        owner = array
        while isinstance(owner, np.ndarray):
            owner = owner.base
        assert isinstance(owner, memoryview) and isinstance(owner.obj, mmap.mmap)  # no copy


def test_method_describes_its_inputs_and_outputs(example_model):
    module = runtime.load(offload.save(offload.load(example_model)))
    m = module.method("forward")
    assert module.method_names == ["forward"]
    assert (m.input_names, m.output_names) == (["image"], ["probs"])
    assert m.input_dtypes == [np.float32] and m.input_shapes == [(1, 3, 32, 32)]
    assert m.output_dtypes == [np.float32] and m.output_shapes == [(1, 10)]
    assert m.arena_bytes < m.planned_bytes


def test_inputs_are_checked_against_the_declared_types(example_model):
    module = runtime.load(offload.save(offload.load(example_model)))
    with pytest.raises(DTypeError, match="input 'image' has dtype float64"):
        module.run({"image": np.zeros((1, 3, 32, 32))})
    with pytest.raises(ShapeError, match="rank 4"):
        module.run({"image": np.zeros((3, 32, 32), np.float32)})
    with pytest.raises(ShapeError, match="is missing"):
        module.run({})
    with pytest.raises(ShapeError, match="unknown input"):
        module.run({"image": np.zeros((1, 3, 32, 32), np.float32), "extra": 1})


def test_kernels_are_offered_their_planned_output_views(monkeypatch):
    seen = []
    softsign = kernels.find("", "Softsign")  # an op without a prepared call (those skip ctx)

    def spy(ctx, x):
        seen.append(ctx.out(0))
        return softsign(ctx, x)

    monkeypatch.setitem(kernels.KERNELS, ("", "Softsign"), spy)
    program = _program(
        [helper.make_node("Softsign", ["x"], ["y"])], [vi("x", T.FLOAT, [3])], [vi("y", T.FLOAT, [3])]
    )
    method = runtime.load(offload.save(program)).method("forward")
    method.run({"x": np.ones(3, np.float32)})
    (view,) = seen
    assert view.shape == (3,) and any(view is v for v in method.planned.values())


def test_an_op_without_kernel_is_reported_when_run(monkeypatch):
    program = _program(
        [helper.make_node("ImageDecoder", ["b"], ["img"])],
        [vi("b", T.UINT8, [10])],
        [vi("img", T.UINT8, None)],
    )
    kernels.find("", "ImageDecoder")  # every kernel module loaded, then this one kernel taken away
    monkeypatch.delitem(kernels.KERNELS, ("", "ImageDecoder"))
    module = runtime.load(offload.save(program))
    with pytest.raises(UnsupportedOpError, match="onnx::ImageDecoder"):
        module.run({"b": np.zeros(10, np.uint8)})


def test_strict_mode_rejects_a_result_that_does_not_fit_its_declaration():
    program = _program(
        [helper.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, [4])], [vi("y", T.FLOAT, [4])]
    )
    program_t, segments = lower(program)
    plan = program_t.executionPlan[0]
    y = plan.values[int(plan.outputs[0])].val
    y.sizes, y.dimOrder = [2, 2], [0, 1]  # still inside the arena, but not the shape Relu gives
    feed = {"x": np.array([1, -1, 2, -2], np.float32)}
    loose = _module(program_t, segments)
    np.testing.assert_array_equal(loose.run(feed)["y"], [1, 0, 2, 0])
    with pytest.raises(ShapeError, match=r"shape \(4,\) for a tensor declared \(2, 2\)"):
        _module(program_t, segments, strict=True).run(feed)


# ---- hostile files: checked at load time, errors name the plan and the instruction --------------


def _module(program_t, segments, strict=False) -> Module:
    """A Module over an in-memory program (skipping the flatbuffer layer and its verifier)."""
    return Module(pte.PteFile(program_t, None, [memoryview(s) for s in segments]), "<test>", strict)


def _lowered(example_model):
    return lower(offload.load(example_model))


def _first_planned(plan):
    return next(
        e.val for e in plan.values if e.valType == KernelTypes.Tensor and e.val.allocationInfo is not None
    )


def _first_kernel(plan):
    return next(i for i in plan.chains[0].instructions if i.instrArgsType == IA.KernelCall).instrArgs


@pytest.mark.parametrize(
    "break_it,message",
    [
        (
            lambda p: setattr(p.operators[0], "name", "Conv"),
            r"instruction 0 .*operator 'Conv' is not an operator",
        ),
        (lambda p: setattr(p.operators[0], "name", "onnx::NoSuchOp"), r"instruction 0 .*'onnx::NoSuchOp'"),
        (lambda p: setattr(_first_kernel(p), "opIndex", 99), r"instruction 0 .*operator index 99"),
        (lambda p: _first_kernel(p).args.append(0), r"instruction 0 .*11 arguments"),
        (lambda p: _first_kernel(p).args.__setitem__(0, 10_000), r"instruction 0 .*names value 10000"),
        (
            lambda p: setattr(p.chains[0].instructions[3], "instrArgsType", 0),
            r"instruction 3 .*unknown instruction",
        ),
        (lambda p: setattr(p.values[2].val, "sizes", [10_000, 3, 3, 3]), r"plan 'forward': value 2 .*bytes"),
        (
            lambda p: setattr(_first_planned(p).allocationInfo, "memoryOffsetLow", 1 << 30),
            r"value 13 .*outside arena",
        ),
        (  # a petabyte of arenas: refused from the sizes, before any is allocated
            lambda p: p.nonConstBufferSizes.append(1 << 50),
            r"plan 'forward': its arenas \(non_const_buffer_sizes\) take \d+ bytes, over the \d+-byte "
            r"arena budget \(.*; set OFFLOAD_MAX_ARENA_BYTES to change it\)",
        ),
        (  # deeper than Python's JSON parser goes: a RecursionError inside it
            lambda p: setattr(p.containerMetaType, "encodedInpStr", "[" * 100_000 + "]" * 100_000),
            r"plan 'forward': the input names are not JSON",
        ),
        (
            lambda p: setattr(p.containerMetaType, "encodedOutStr", "[" * 100_000 + "]" * 100_000),
            r"plan 'forward': the output names are not JSON",
        ),
        (
            lambda p: setattr(p.containerMetaType, "encodedOutStr", "[" + "1" * 5000 + "]"),
            r"the output names are not JSON: Exceeds the limit",
        ),
    ],
)
def test_a_broken_plan_is_a_model_format_error(break_it, message, example_model):
    program_t, segments = _lowered(example_model)
    broken = copy.deepcopy(program_t)
    break_it(broken.executionPlan[0])
    with pytest.raises(ModelFormatError, match=message):
        _module(broken, segments)
    _module(program_t, segments)  # the unbroken program loads


def test_bytes_that_are_not_a_pte_file_are_refused():
    with pytest.raises(ModelFormatError, match=r"not a \.pte file"):
        runtime.load(b"\0" * 64)


@pytest.mark.parametrize("name", ["example", "light_resnet50", "light_densenet121", "light_squeezenet"])
def test_static_models_write_every_intermediate_in_place(name, example_model):
    """Kernels write planned results straight into the arena: a run allocates none of them."""
    if name == "example":
        path = example_model
    else:
        path = os.path.join(
            os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"{name}.onnx"
        )
    program = offload.load(path)
    method = offload.runtime.load(offload.save(program)).method("forward")
    port = method.inputs[0]
    feeds = {port.name: np.random.default_rng(0).random(port.shape).astype(np.float32)}
    got = method.run(feeds)
    assert len(method.planned) > 5
    assert method.allocated_results == 0
    for (k, a), b in zip(got.items(), offload.evaluate(program, feeds).values()):
        np.testing.assert_array_equal(a, b, err_msg=k)
