"""cleanup::loop_invariant_elimination."""

import numpy as np
from onnx import TensorProto, helper

from .helpers import F32, check, model, node, op_types, rand

P = ["cleanup::loop_invariant_elimination"]
I64, BOOL = TensorProto.INT64, TensorProto.BOOL


def _loop(pass_through=True, b_is_output=True, scan_b=False):
    """Loop carrying a and b: a += b each step; b returned as it came (or doubled)."""
    body_nodes = [node("Add", ["a_in", "b_in"], ["s"]), node("Identity", ["cond_in"], ["cond_out"])]
    if pass_through:
        b_out = "b_in"
    else:
        body_nodes.append(node("Add", ["b_in", "b_in"], ["b2"]))
        b_out = "b2"
    outs = [
        helper.make_tensor_value_info("cond_out", BOOL, []),
        helper.make_tensor_value_info("s", F32, [2, 3]),
        helper.make_tensor_value_info(b_out, F32, [2, 3]),
    ]
    if scan_b:
        body_nodes.append(node("Neg", ["b_in"], ["nb"]))
        outs.append(helper.make_tensor_value_info("nb", F32, [2, 3]))
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", BOOL, []),
            helper.make_tensor_value_info("a_in", F32, [2, 3]),
            helper.make_tensor_value_info("b_in", F32, [2, 3]),
        ],
        outs,
    )
    loop_outs = ["a_final", "b_final"] + (["nbs"] if scan_b else [])
    nodes = [node("Loop", ["n", "", "a", "b"], loop_outs, body=body)]
    outputs = {"a_final": (F32, None)}
    if b_is_output:
        outputs["b_final"] = (F32, None)
    else:
        nodes.append(node("Mul", ["b_final", "a_final"], ["y"]))
        outputs["y"] = (F32, None)
    if scan_b:
        outputs["nbs"] = (F32, None)
    return model(nodes, {"n": (I64, []), "a": (F32, [2, 3]), "b": (F32, [2, 3])}, outputs)


def _feeds(n=3):
    return {"n": np.array(n, np.int64), "a": rand(2, 3, seed=1), "b": rand(2, 3, seed=2)}


def _loop_op(program):
    return next(op for op in program.main.body.operations if op.op_type == "Loop")


def test_pass_through_value_leaves_the_loop():
    for n in (3, 0):
        out = check(_loop(b_is_output=False), P, _feeds(n), rtol=0, atol=0)
        loop = _loop_op(out)
        assert len(loop.inputs) == 3 and len(loop.outputs) == 1
        assert len(loop.attributes["body"].inputs) == 3
        assert op_types(out) == {"Loop": 1, "Add": 1, "Mul": 1, "Identity": 1}


def test_graph_output_keeps_its_name_through_an_identity():
    out = check(_loop(scan_b=True), P, _feeds(), rtol=0, atol=0)
    assert len(_loop_op(out).inputs) == 3
    assert [v.name for v in out.main.outputs] == ["a_final", "b_final", "nbs"]
    assert op_types(out)["Identity"] == 2  # the body's cond pass-through and the new one


def test_value_the_body_changes_stays_carried():
    out = check(_loop(pass_through=False), P, _feeds(), rtol=0, atol=0)
    assert len(_loop_op(out).inputs) == 4
