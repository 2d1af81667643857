"""The type of an If's outputs when the model declares none: what its two branches' results share
(ONNX's If inference), checked against onnx's own shape inference and onnxruntime's results."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, shape_inference

import offload


def _branch(name, op, axes=None):
    """A branch applying ``op`` to the outer x (axes as a constant input), its result undeclared."""
    nodes, inputs = [], ["x"]
    if axes is not None:
        nodes.append(
            helper.make_node(
                "Constant",
                [],
                [f"{name}_axes"],
                value=helper.make_tensor(f"{name}_v", TensorProto.INT64, [len(axes)], axes),
            )
        )
        inputs.append(f"{name}_axes")
    nodes.append(helper.make_node(op, inputs, [f"{name}_y"]))
    return helper.make_graph(
        nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)]
    )


def _model(then_branch, else_branch):
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _onnx_rank(model) -> int | None:
    """The rank onnx's shape inference gives y (None: unknown)."""
    y = shape_inference.infer_shapes(model).graph.output[0].type.tensor_type
    return len(y.shape.dim) if y.HasField("shape") else None


CASES = [
    # then, else, the rank both say y has
    ((_branch("t", "Relu"), _branch("e", "Sigmoid")), 3),  # [N, 3, 1] either way
    ((_branch("t", "Identity"), _branch("e", "Squeeze", [2])), None),  # rank 3 or 2: unknown
]


@pytest.mark.parametrize("branches,rank", CASES)
def test_if_output_takes_what_its_branches_share(branches, rank):
    model = _model(*branches)
    assert _onnx_rank(model) == rank
    y = offload.load(model.SerializeToString()).main.body.outputs[0]
    assert y.type.dtype == offload.ir.DataType.FLOAT
    assert y.type.rank == rank
    if rank is not None:
        assert y.type.shape == ("N", 3, 1)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.ones((2, 3, 1), np.float32)
    for c in (True, False):
        (got,) = session.run(None, {"c": np.array(c), "x": x})
        assert rank is None or got.ndim == rank


def test_if_output_dims_that_differ_become_unknown():
    # [N, 3] from a Squeeze of axis 2, [N, 1] from a ReduceSum over axis 1 (keepdims=0): one rank,
    # the 3 and the 1 differ
    then_b = _branch("t", "Squeeze", [2])
    else_b = _branch("e", "ReduceSum", [1])
    for node in else_b.node:
        if node.op_type == "ReduceSum":
            node.attribute.append(helper.make_attribute("keepdims", 0))
    model = _model(then_b, else_b)
    inferred = shape_inference.infer_shapes(model).graph.output[0].type.tensor_type.shape.dim
    onnx_dims = [d.dim_param or (d.dim_value if d.HasField("dim_value") else None) for d in inferred]
    y = offload.load(model.SerializeToString()).main.body.outputs[0]
    assert y.type.rank == len(onnx_dims) == 2
    assert y.type.shape[0] == "N" and y.type.shape[1] is None
