"""The IR core: use-lists, the registry, the verifier and the text dump."""

import numpy as np
import pytest

from offload.errors import VerificationError
from offload.ir import Block, DataType, Function, Operation, Program, TensorType, Value, dump, lookup, verify


def _program():
    """x -> Relu -> Add(relu, c) -> y, with c a constant."""
    x = Value("x", TensorType(DataType.FLOAT, ("N", 4)))
    body = Block("main", inputs=[x])
    c = body.add_constant("c", np.ones(4, np.float32))
    relu = body.append(Operation("Relu", [x], output_names=["r"]))
    add = body.append(Operation("Add", [relu.outputs[0], c], output_names=["y"]))
    body.outputs = [add.outputs[0]]
    return Program({"forward": Function("forward", body, {"": 21})}), relu, add


def test_values_know_producer_and_users():
    program, relu, add = _program()
    r = relu.outputs[0]
    assert r.producer is relu and r.index == 0
    assert r.uses == [(add, 0)]
    x = program.main.inputs[0]
    assert x.users == [relu]


def test_replace_all_uses_with_rewires_users():
    program, relu, add = _program()
    x = program.main.inputs[0]
    relu.outputs[0].replace_all_uses_with(x)
    assert add.inputs[0] is x
    assert relu.outputs[0].uses == []
    assert {id(o) for o in x.users} == {id(relu), id(add)}
    program.main.body.remove(relu)
    verify(program)


def test_remove_refuses_an_op_still_in_use():
    program, relu, _ = _program()
    with pytest.raises(ValueError, match="still has users"):
        program.main.body.remove(relu)


def test_registry_has_latest_schemas_with_defaults():
    conv = lookup("", "Conv")
    assert [str(p) for p in conv.inputs] == ["X", "W", "B?"]
    assert conv.attributes["group"].default == 1
    assert conv.attributes["auto_pad"].default == "NOTSET"
    assert lookup("", "Concat").attributes["axis"].required
    assert lookup("", "Max").inputs[0].variadic
    assert lookup("ai.onnx", "Relu") is lookup("", "Relu")
    assert lookup("", "NoSuchOp") is None
    assert conv.with_defaults({"group": 2})["group"] == 2


def test_verifier_accepts_a_good_program():
    program, _, _ = _program()
    verify(program)


def test_verifier_names_use_before_definition():
    program, _, _ = _program()
    body = program.main.body
    body.operations.reverse()
    with pytest.raises(
        VerificationError, match=r"op 'Add' \(Add\): input 0 '%r' is used before it is defined"
    ):
        verify(program)


def test_verifier_names_duplicate_values():
    program, _, add = _program()
    add.outputs[0].name = "r"
    with pytest.raises(VerificationError, match="'r' is defined twice"):
        verify(program)


def test_verifier_checks_required_inputs_and_attributes():
    program, _, add = _program()
    body = program.main.body
    bad = body.append(Operation("Concat", [add.outputs[0]], output_names=["z"]))
    with pytest.raises(VerificationError, match="attribute 'axis' is required"):
        verify(program)
    bad.attributes["axis"] = 0
    verify(program)
    body.append(Operation("Add", [add.outputs[0], None], output_names=["w"]))
    with pytest.raises(VerificationError, match=r"input 1 \(B\) is required"):
        verify(program)


def test_verifier_lets_nested_blocks_read_outer_values():
    program, relu, _ = _program()
    body = program.main.body
    then = Block("then", outputs=[])
    inner = then.append(Operation("Neg", [relu.outputs[0]], output_names=["n"]))
    then.outputs = [inner.outputs[0]]
    other = Block("else", outputs=[relu.outputs[0]])
    cond = body.add_constant("cond", np.array(True))
    body.append(Operation("If", [cond], {"then_branch": then, "else_branch": other}, output_names=["o"]))
    verify(program)
    # A value defined inside the branch is not visible after it.
    body.append(Operation("Relu", [inner.outputs[0]], output_names=["leak"]))
    with pytest.raises(VerificationError, match="'%n' is used before"):
        verify(program)


def test_dump_is_readable():
    program, _, _ = _program()
    text = dump(program)
    assert "func forward [ai.onnx=21]" in text
    assert "%r: ? = Relu(X=%x)" in text
    assert "%y: ? = Add(A=%r, B=%c)" in text
    assert "%c: (4,fp32) = const" in text
    assert "block main(%x: (N,4,fp32))" in text


def test_tensor_type_text_and_dtypes():
    assert str(TensorType(DataType.FLOAT16, (1, "S", None))) == "(1,S,?,fp16)"
    assert str(TensorType(DataType.INT64, None)) == "(*,i64)"
    assert DataType.BFLOAT16.numpy.name == "bfloat16"
    assert DataType.from_numpy(np.int8) == DataType.INT8


def _stateful(to: DataType | None) -> Program:
    """state s (int8, quantized) -> Identity (or Cast ``to``) -> the last output, unannotated."""
    from offload.ir.types import QuantParams

    quant = QuantParams(np.array([0.5], np.float32), np.array([-128]))
    s = Value("s", TensorType(DataType.INT8, (1, 4), quant=quant))
    body = Block(inputs=[s])
    attrs = {} if to is None else {"to": int(to.value)}
    op = body.append(Operation("Identity" if to is None else "Cast", [s], attrs, output_names=["s_next"]))
    op.outputs[0].type = TensorType(to or DataType.INT8, (1, 4))
    body.outputs = [op.outputs[0]]
    return Program({"forward": Function("forward", body, {"": 21}, states=["s"])})


def test_verifier_holds_a_state_to_its_dtype_and_shape_not_its_quantization():
    verify(_stateful(None))  # the same integers, without the import's annotation
    with pytest.raises(VerificationError, match="state 's' has no output of its type"):
        verify(_stateful(DataType.UINT8))
