"""Builds the bundled example model, a small image classifier, as examples/tiny_cnn.onnx.

The weights are random with a fixed seed; the model exists to exercise offload end to end
(convolutions, batch norm, pooling, a classifier head) without downloading anything.
It is written with offload's own ONNX protobuf classes, so the onnx package is not needed.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from offload.frontends.onnx import numpy_to_tensor
from offload.schemas.generated import onnx_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))


def _node(op: str, inputs: list[str], outputs: list[str], **attrs) -> pb.NodeProto:
    n = pb.NodeProto(op_type=op, input=inputs, output=outputs, name=outputs[0])
    for k, v in attrs.items():
        a = n.attribute.add(name=k)
        if isinstance(v, int):
            a.type, a.i = pb.AttributeProto.INT, v
        elif isinstance(v, float):
            a.type, a.f = pb.AttributeProto.FLOAT, v
        else:
            a.type = pb.AttributeProto.INTS
            a.ints.extend(v)
    return n


def _value(name: str, shape: list[int]) -> pb.ValueInfoProto:
    v = pb.ValueInfoProto(name=name)
    v.type.tensor_type.elem_type = pb.TensorProto.FLOAT
    for d in shape:
        v.type.tensor_type.shape.dim.add(dim_value=d)
    return v


def build(path: str) -> None:
    rng = np.random.default_rng(0)

    def weight(name, *shape, scale=0.2):
        return numpy_to_tensor((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        weight("conv1.w", 16, 3, 3, 3),
        weight("conv1.b", 16),
        numpy_to_tensor(np.abs(rng.standard_normal(16)).astype(np.float32) + 0.5, "bn1.scale"),
        weight("bn1.bias", 16),
        weight("bn1.mean", 16),
        numpy_to_tensor(np.abs(rng.standard_normal(16)).astype(np.float32) + 0.5, "bn1.var"),
        weight("conv2.w", 32, 16, 3, 3, scale=0.1),
        weight("conv2.b", 32),
        weight("fc.w", 10, 32),
        weight("fc.b", 10),
    ]
    nodes = [
        _node("Conv", ["image", "conv1.w", "conv1.b"], ["c1"], pads=[1, 1, 1, 1]),
        _node(
            "BatchNormalization", ["c1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"], ["b1"], epsilon=1e-5
        ),
        _node("Relu", ["b1"], ["r1"]),
        _node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        _node("Conv", ["p1", "conv2.w", "conv2.b"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        _node("Relu", ["c2"], ["r2"]),
        _node("GlobalAveragePool", ["r2"], ["g"]),
        _node("Flatten", ["g"], ["f"], axis=1),
        _node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1),
        _node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = pb.GraphProto(
        name="tiny_cnn",
        node=nodes,
        initializer=inits,
        input=[_value("image", [1, 3, 32, 32])],
        output=[_value("probs", [1, 10])],
    )
    model = pb.ModelProto(ir_version=10, graph=graph, producer_name="offload-examples")
    model.opset_import.add(domain="", version=21)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    print(f"wrote {path}")


if __name__ == "__main__":
    build(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "tiny_cnn.onnx"))
