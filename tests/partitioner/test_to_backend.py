"""offload.to_backend: the lowered program's shape, its specs, and that it computes the same as the
program it lowers and as an independent reference (numpy in float64, or onnxruntime on the ONNX
model)."""

import os

import numpy as np
import pytest

import offload
from offload.delegates.backend import CompileSpec, CompileSpecError
from offload.ir import dump, verify
from offload.partitioner import Partitioner
from tests.reference import assert_close, onnxruntime_outputs, reduction_terms, sum_tolerance

from .helpers import FakeBackend, build
from .test_partition import _if_program

SUP = {"Relu", "Add", "Mul"}
X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
X64 = X.astype(np.float64)


def _exact(got, want64):
    """Equal to a float64 result that float32 holds exactly (the values of X are halves)."""
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want64.astype(np.float32))


def _delegates(program):
    return [op for op in program.main.body.operations if op.qualified_type == "offload::Delegate"]


def test_chain_becomes_one_delegate_and_input_is_unchanged():
    nodes = [("a", "Relu", ["x"]), ("b", "Mul", ["a", "w"]), ("n", "Neg", ["b"]), ("c", "Add", ["n", "w"])]
    p = build(nodes, ["c"], constants={"w": np.full((2, 3), 2.0)})
    before = dump(p)
    backend = FakeBackend("fake", SUP)
    lowered = offload.to_backend(
        p, Partitioner([backend]), compile_specs={"fake": {"level": 3}}, passes="none"
    )
    assert dump(p) == before
    verify(p)
    d0, d1 = _delegates(lowered)
    assert d0.attributes["backend"] == "fake" and d0.attributes["processed"] == b"fake:Relu,Mul"
    assert d0.attributes["compile_specs"] == [CompileSpec("level", b"3")]
    fallback = d0.attributes["fallback"]
    assert [op.op_type for op in fallback.operations] == ["Relu", "Mul"]
    # "w" is read by both partitions: the first gets a renamed view, the second takes "w" itself.
    assert list(fallback.constants) == ["w.d"] and len(fallback.inputs) == 1
    assert list(d1.attributes["fallback"].constants) == ["w"] and not lowered.main.body.constants
    assert [v.name for v in lowered.main.outputs] == ["c"]
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate", "Neg", "Delegate"]
    subprogram, specs = backend.calls[0]
    assert specs == [CompileSpec("level", b"3")]
    verify(subprogram)
    assert list(subprogram.functions) == ["forward"]
    got = offload.evaluate(lowered, {"x": X})["c"]
    np.testing.assert_array_equal(got, offload.evaluate(p, {"x": X})["c"])
    _exact(got, -(np.maximum(X64, 0) * 2.0) + 2.0)


def test_weight_used_only_inside_moves_with_its_name():
    p = build([("a", "Mul", ["x", "w"]), ("n", "Neg", ["a"])], ["n"], constants={"w": np.ones((2, 3))})
    lowered = offload.to_backend(p, Partitioner([FakeBackend("fake", SUP)]), passes="none")
    (d,) = _delegates(lowered)
    assert list(d.attributes["fallback"].constants) == ["w"]
    assert "w" not in lowered.main.body.constants


def test_weight_shared_with_cpu_is_copied_under_a_fresh_name():
    p = build([("a", "Mul", ["x", "w"]), ("n", "Sub", ["a", "w"])], ["n"], constants={"w": np.ones((2, 3))})
    lowered = offload.to_backend(p, Partitioner([FakeBackend("fake", SUP)]), passes="none")
    (d,) = _delegates(lowered)
    (name,) = d.attributes["fallback"].constants
    assert name != "w" and "w" in lowered.main.body.constants


def test_outputs_used_outside_and_function_results():
    nodes = [("a", "Relu", ["x"]), ("b", "Relu", ["a"]), ("n", "Neg", ["a"])]
    p = build(nodes, ["b", "n"])
    lowered = offload.to_backend(p, Partitioner([FakeBackend("fake", SUP)]), passes="none")
    (d,) = _delegates(lowered)
    assert [v.name for v in d.outputs] == ["a", "b"]
    got, want = offload.evaluate(lowered, {"x": X}), offload.evaluate(p, {"x": X})
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    _exact(got["b"], np.maximum(X64, 0))
    _exact(got["n"], -np.maximum(X64, 0))


def test_merged_partition_is_placed_after_its_inputs():
    # a and b merge across n, but b reads n: the delegate must come after n.
    nodes = [("a", "Relu", ["x"]), ("n", "Neg", ["x"]), ("b", "Relu", ["n"]), ("c", "Sub", ["a", "b"])]
    p = build(nodes, ["c"])
    lowered = offload.to_backend(p, Partitioner([FakeBackend("fake", SUP)]), passes="none")
    assert len(_delegates(lowered)) == 1
    got = offload.evaluate(lowered, {"x": X})["c"]
    np.testing.assert_array_equal(got, offload.evaluate(p, {"x": X})["c"])
    _exact(got, np.maximum(X64, 0) - np.maximum(-X64, 0))


def test_if_program_lowered_both_ways():
    args = {"x": X, "cond": np.array(True)}
    p = _if_program(SUP)
    for ops in (SUP, SUP | {"If"}):
        lowered = offload.to_backend(p, Partitioner([FakeBackend("fake", ops)]), passes="none")
        got = offload.evaluate(lowered, args)["y"]
        np.testing.assert_array_equal(got, offload.evaluate(p, args)["y"])
        _exact(got, np.maximum(X64, 0))  # Relu, then Relu in the branch taken


def test_unknown_compile_spec_and_unknown_backend_in_specs():
    p = build([("a", "Relu", ["x"])], ["a"])
    with pytest.raises(CompileSpecError, match="no compile spec 'speed'"):
        offload.to_backend(p, Partitioner([FakeBackend("fake", SUP)]), {"fake": [CompileSpec.of("speed", 1)]})
    with pytest.raises(CompileSpecError, match="backend 'other'"):
        offload.to_backend(p, Partitioner([FakeBackend("fake", SUP)]), {"other": {}})


def test_nothing_supported_gives_an_equal_copy():
    p = build([("n", "Neg", ["x"])], ["n"])
    lowered = offload.to_backend(p, Partitioner([FakeBackend("fake", SUP)]), passes="none")
    assert lowered is not p and dump(lowered) == dump(p)


def _same_numerics(path, backend_ops, min_ops=1, independent=None):
    """The program of the ONNX model ``path`` (a path or bytes), lowered to a fake backend that
    takes ``backend_ops``: bit for bit the program's results, and near onnxruntime's (those
    named in ``independent``, by default all)."""
    program = offload.load(path)
    rng = np.random.default_rng(0)
    inputs = {}
    for v in program.main.inputs:
        shape = [d if isinstance(d, int) else 1 for d in v.type.shape]
        inputs[v.name] = rng.standard_normal(shape).astype(v.type.dtype.numpy)
    backend = FakeBackend("fake", backend_ops)
    lowered = offload.to_backend(program, Partitioner([backend], min_ops=min_ops), passes="none")
    assert _delegates(lowered)
    want, got = offload.evaluate(program, inputs), offload.evaluate(lowered, inputs)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype
        np.testing.assert_array_equal(got[k], want[k])
    rtol = sum_tolerance(np.float32, reduction_terms(path))
    for k, want in onnxruntime_outputs(path, inputs).items():
        if independent is None or k in independent:
            assert_close(got[k], want, rtol=rtol, err_msg=k)
    return lowered


@pytest.mark.parametrize(
    "ops", [{"Conv", "Relu"}, {"Conv", "BatchNormalization", "Relu", "MaxPool"}, {"Gemm", "Flatten"}]
)
def test_example_cnn_numerics(example_model, ops):
    _same_numerics(example_model, ops)


@pytest.mark.parametrize(
    "ops", [{"Conv", "Relu", "Concat"}, {"Conv"}, {"Relu", "MaxPool", "Dropout", "Softmax"}]
)
def test_light_squeezenet_numerics(ops):
    import onnx

    # The "light" model fills its weights with constants: its logits are about 6.8e9 and agree to
    # an ulp (512), so any rounding difference changes the softmax after them wholly. The logits
    # (r65) are held to onnxruntime, the softmax to the unlowered program.
    path = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_squeezenet.onnx")
    model = onnx.load(path)
    model.graph.output.append(onnx.helper.make_tensor_value_info("r65", onnx.TensorProto.FLOAT, None))
    _same_numerics(model.SerializeToString(), ops, independent={"r65"})


def test_backend_by_registered_name(example_model):
    from offload.delegates import registry

    # the test extra's setup installs it (pip install -e examples/plugin_backend)
    assert registry.find("example") is not None, "the example plugin backend is not installed"
    program = offload.load(example_model)
    lowered = offload.to_backend(program, "example", passes="none")
    assert all(d.attributes["backend"] == "example" for d in _delegates(lowered))
    (image,) = program.main.inputs  # the feed follows the model's declared input, whatever it is
    x = np.random.default_rng(1).standard_normal(image.type.shape).astype(image.type.dtype.numpy)
    want, got = offload.evaluate(program, {image.name: x}), offload.evaluate(lowered, {image.name: x})
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    rtol = sum_tolerance(np.float32, reduction_terms(example_model))
    for k, independent in onnxruntime_outputs(example_model, {image.name: x}).items():
        assert_close(got[k], independent, rtol=rtol, err_msg=k)


def test_unknown_backend_name_raises():
    from offload.errors import BackendUnavailableError

    with pytest.raises(BackendUnavailableError):
        offload.to_backend(build([("a", "Relu", ["x"])], ["a"]), "no-such-backend")
