"""ir.rewrite: names, building and placing ops, replacing values (results too), order, dead ops."""

import numpy as np
import pytest

from offload.errors import VerificationError
from offload.ir import (
    Block,
    DataType,
    Function,
    Namer,
    Operation,
    Program,
    TensorType,
    Value,
    build,
    insert_after,
    insert_before,
    remove_dead_ops,
    replace_all_uses,
    substitute,
    toposort,
    verify,
)
from offload.runtime import evaluate

F = TensorType(DataType.FLOAT, (2, 3))
B = TensorType(DataType.BOOL, ())


def _op(body, op_type, inputs, name, attrs=None):
    op = body.append(Operation(op_type, inputs, attrs, output_names=[name]))
    op.outputs[0].type = F
    return op


def _chain():
    """x -> Relu(r) -> Neg(n) -> y = Add(n, c)."""
    x = Value("x", F)
    body = Block("main", inputs=[x])
    c = body.add_constant("c", np.ones((2, 3), np.float32))
    r = _op(body, "Relu", [x], "r")
    n = _op(body, "Neg", [r.outputs[0]], "n")
    y = _op(body, "Add", [n.outputs[0], c], "y")
    body.outputs = [y.outputs[0]]
    return Program({"main": Function("main", body, {"": 21})}), body


def _if_program():
    """cond, x -> If: then returns Neg(x) computed inside; else returns the outer value r as is."""
    x, cond = Value("x", F), Value("cond", B)
    body = Block("main", inputs=[x, cond])
    r = _op(body, "Relu", [x], "r")
    then = Block("then")
    _op(then, "Neg", [r.outputs[0]], "t")
    then.outputs = [then.operations[0].outputs[0]]
    other = Block("else")
    other.outputs = [r.outputs[0]]
    if_op = body.append(
        Operation("If", [cond], {"then_branch": then, "else_branch": other}, output_names=["y"])
    )
    if_op.outputs[0].type = F
    body.outputs = [if_op.outputs[0]]
    return Program({"main": Function("main", body, {"": 21})}), body, r, if_op


X = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)


def test_namer_avoids_every_name_nested_ones_too():
    program, *_ = _if_program()
    namer = Namer(program)
    assert {"x", "cond", "r", "t", "y"} <= namer.taken
    assert namer.fresh("t") == "t.1"
    assert namer.fresh("t") == "t.2"
    assert namer.fresh("new") == "new"
    assert "new" in namer


def test_build_places_a_typed_op_before_another():
    program, body = _chain()
    add = body.operations[2]
    namer = Namer(program)
    mul = build(body, "Mul", [add.inputs[0], add.inputs[1]], namer=namer, before=add)
    assert body.operations.index(mul) == 2
    assert mul.outputs[0].type == F and mul.outputs[0].name == "mul"
    add.set_input(0, mul.outputs[0])
    verify(program)
    out = evaluate(program, {"x": X})["y"]
    np.testing.assert_allclose(out, -np.maximum(X, 0) * 1 + 1)


def test_build_infers_shapes_from_the_inputs():
    program, body = _chain()
    namer = Namer(program)
    axes = body.add_constant(namer.fresh("axes"), np.array([0], np.int64))
    red = build(body, "ReduceSum", [body.inputs[0], axes], {"keepdims": 0}, namer=namer)
    assert red.outputs[0].type == TensorType(DataType.FLOAT, (3,))
    assert body.operations[-1] is red


def test_build_refuses_an_anchor_of_another_block():
    program, body, _, if_op = _if_program()
    inner = if_op.attributes["then_branch"].operations[0]
    with pytest.raises(ValueError, match="not in block"):
        build(body, "Relu", [body.inputs[0]], namer=Namer(program), before=inner)


def test_insert_before_and_after():
    _program, body = _chain()
    r, n, y = body.operations
    extra = Operation("Identity", [r.outputs[0]], output_names=["i"])
    insert_after(r, extra)
    assert body.operations == [r, extra, n, y] and extra.block is body
    extra2 = Operation("Identity", [r.outputs[0]], output_names=["j"])
    insert_before(r, extra2)
    assert body.operations[0] is extra2


def test_replace_all_uses_reaches_nested_reads_and_every_block_result():
    program, body, r, if_op = _if_program()
    then, other = if_op.attributes["then_branch"], if_op.attributes["else_branch"]
    x = body.inputs[0]
    neg = build(body, "Neg", [x], namer=Namer(program), after=r)
    replace_all_uses(r.outputs[0], neg.outputs[0])
    assert then.operations[0].inputs[0] is neg.outputs[0]  # a capture, through the use-list
    assert other.outputs == [neg.outputs[0]]  # a branch result, which no use-list holds
    assert r.outputs[0].uses == []
    remove_dead_ops(body)
    assert r not in body.operations
    verify(program)
    for c in (True, False):
        got = evaluate(program, {"x": X, "cond": np.array(c)})["y"]
        np.testing.assert_allclose(got, X if c else -X)


def test_substitute_keeps_the_function_output_name():
    program, body = _chain()
    _r, n, y = body.operations
    # y = n + c is replaced by n: n takes the name "y", the old y gets n's.
    assert substitute(y.outputs[0], n.outputs[0])
    assert body.outputs[0] is n.outputs[0] and n.outputs[0].name == "y"
    remove_dead_ops(body)
    verify(program)
    np.testing.assert_allclose(evaluate(program, {"x": X})["y"], -np.maximum(X, 0))


def test_substitute_refuses_to_rename_an_input_or_a_constant():
    _program, body = _chain()
    y = body.operations[2].outputs[0]
    assert not substitute(y, body.inputs[0])
    assert not substitute(y, body.constants["c"])
    assert body.outputs[0] is y and y.name == "y" and body.inputs[0].name == "x"


def test_substitute_refuses_two_outputs_of_one_name():
    _program, body = _chain()
    _r, n, _ = body.operations
    y = body.outputs[0]
    body.outputs.append(n.outputs[0])
    assert not substitute(y, n.outputs[0])  # n is an output under its own name already
    assert [v.name for v in body.outputs] == ["y", "n"]


def test_substitute_inside_a_branch_needs_no_renaming():
    _program, _body, r, if_op = _if_program()
    then = if_op.attributes["then_branch"]
    t = then.operations[0].outputs[0]
    assert substitute(t, r.outputs[0])
    assert then.outputs == [r.outputs[0]] and r.outputs[0].name == "r"


def test_toposort_restores_order_and_counts_nested_reads():
    program, body, r, if_op = _if_program()
    body.operations.reverse()
    with pytest.raises(VerificationError):
        verify(program)
    toposort(body)
    assert body.operations == [r, if_op]  # If reads r only through its branches
    verify(program)


def test_toposort_keeps_an_ordered_block_as_it_is():
    _program, body = _chain()
    before = list(body.operations)
    toposort(body)
    assert body.operations == before


def test_toposort_reports_a_cycle():
    _program, body = _chain()
    r, n, _ = body.operations
    r.set_input(0, n.outputs[0])
    with pytest.raises(VerificationError, match="cycle"):
        toposort(body)


def test_remove_dead_ops_removes_chains_and_constants_and_keeps_results():
    program, body = _chain()
    r, n, y = body.operations
    c = body.constants["c"]
    d = body.add_constant("d", np.zeros(3, np.float32))
    dead1 = _op(body, "Sigmoid", [r.outputs[0]], "s")
    _op(body, "Add", [dead1.outputs[0], d], "s2")
    assert remove_dead_ops(body) == 3  # two ops and the constant d
    assert body.operations == [r, n, y] and list(body.constants) == ["c"] and body.constants["c"] is c
    verify(program)


def test_remove_dead_ops_keeps_unknown_ops():
    _program, body = _chain()
    unknown = body.append(Operation("Mystery", [body.inputs[0]], domain="acme", output_names=["m"]))
    remove_dead_ops(body)
    assert unknown in body.operations


def test_remove_dead_ops_keeps_what_a_branch_reads_or_returns_and_drops_unused_branches():
    program, body, r, if_op = _if_program()
    remove_dead_ops(body)
    assert body.operations == [r, if_op]  # r is returned by the else branch only
    body.outputs = [r.outputs[0]]
    remove_dead_ops(body)
    assert body.operations == [r]  # the If is unused now: its branches' reads went with it
    assert r.outputs[0].uses == []
    verify(program)


def test_remove_dead_ops_inside_a_branch():
    _program, body, r, if_op = _if_program()
    then = if_op.attributes["then_branch"]
    _op(then, "Sigmoid", [r.outputs[0]], "unused")
    remove_dead_ops(body)
    assert [op.op_type for op in then.operations] == ["Neg"]
    assert len(r.outputs[0].uses) == 1
