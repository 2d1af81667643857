"""The backend interface: typed compile specs, capability checks and their reasons, spec keys."""

import pytest
from offload_example_backend.compiler import ExampleCompiler
from onnx import TensorProto, helper

import offload
from offload.delegates import CompileSpec, CompileSpecError, OpCapability
from offload.errors import OffloadError
from offload.ir import DataType

F = TensorProto.FLOAT


def _op(node, inputs, outputs):
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])
    return offload.load(model.SerializeToString()).main.body.operations[0]


def _vi(name, elem=F, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, list(shape))


@pytest.mark.parametrize(
    "value, stored",
    [("fast", b"fast"), (3, b"3"), (0.5, b"0.5"), (True, b"1"), (False, b"0"), (b"\x00\x01", b"\x00\x01")],
)
def test_compile_spec_of_stores_typed_values_as_bytes(value, stored):
    assert CompileSpec.of("k", value).value == stored


def test_compile_spec_reads_back_typed_values():
    assert CompileSpec.of("n", 42).integer() == 42
    assert CompileSpec.of("x", 0.25).number() == 0.25
    assert CompileSpec.of("f", True).flag() is True
    assert CompileSpec("f", b"false").flag() is False
    assert CompileSpec.of("t", "abc").text() == "abc"


@pytest.mark.parametrize(
    "spec, read, message",
    [
        (CompileSpec.of("n", "many"), CompileSpec.integer, "'n' must be an integer, got 'many'"),
        (CompileSpec.of("x", "big"), CompileSpec.number, "'x' must be a number, got 'big'"),
        (CompileSpec.of("f", "yes"), CompileSpec.flag, "'f' must be 0/1/true/false, got 'yes'"),
    ],
)
def test_compile_spec_errors_name_the_key_and_the_value(spec, read, message):
    with pytest.raises(CompileSpecError, match=message):
        read(spec)
    assert issubclass(CompileSpecError, OffloadError)


def test_capability_accepts_what_it_lists():
    op = _op(helper.make_node("Relu", ["x"], ["y"]), [_vi("x")], [_vi("y")])
    assert OpCapability(frozenset({DataType.FLOAT}), max_rank=2).check(op)


def test_capability_rejects_a_dtype_naming_the_value():
    D = TensorProto.DOUBLE
    op = _op(helper.make_node("Relu", ["x"], ["y"]), [_vi("x", D)], [_vi("y", D)])
    support = OpCapability(frozenset({DataType.FLOAT})).check(op)
    assert not support and "dtype" in support.reason and "'x'" in support.reason


def test_capability_rejects_a_rank_over_the_limit():
    op = _op(helper.make_node("Relu", ["x"], ["y"]), [_vi("x", shape=(1, 2, 3))], [_vi("y", shape=(1, 2, 3))])
    support = OpCapability(frozenset({DataType.FLOAT}), max_rank=2).check(op)
    assert not support and support.reason == "rank 3 of 'x' exceeds 2"


def test_capability_checks_attributes_with_schema_defaults():
    cap = OpCapability(frozenset({DataType.FLOAT}), attributes={"axis": (-1,)})
    default = _op(helper.make_node("Softmax", ["x"], ["y"]), [_vi("x")], [_vi("y")])
    other = _op(helper.make_node("Softmax", ["x"], ["y"], axis=0), [_vi("x")], [_vi("y")])
    assert cap.check(default)  # axis not given: its default -1 is what counts
    support = cap.check(other)
    assert not support and support.reason == "attribute axis=0 is not supported (takes [-1])"


def test_supports_names_an_op_without_capability():
    op = _op(helper.make_node("Cos", ["x"], ["y"]), [_vi("x")], [_vi("y")])
    support = ExampleCompiler().supports(op)
    assert not support and support.reason == "example has no kernel for Cos"


def test_check_specs_names_the_known_keys():
    compiler = ExampleCompiler()
    compiler.check_specs([CompileSpec.of("trace", True)])
    with pytest.raises(
        CompileSpecError, match=r"backend 'example' has no compile spec 'speed' \(known: trace\)"
    ):
        compiler.check_specs([CompileSpec.of("speed", 3)])
