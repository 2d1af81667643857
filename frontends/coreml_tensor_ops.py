"""MIL op rules: shapes and tensor movement (reshape, transpose, concat, slices, gathers, pads,
resizes …), with MIL's semantics written in ONNX ops."""

from __future__ import annotations

from offload.ir import DataType

from .coreml_node import Node, rule


@rule("reshape")
def reshape(node: Node) -> list:
    """To the declared shape when it is static; otherwise MIL's shape, whose 0 copies a dim (iOS17)."""
    out = node.out().shape
    if out is not None and all(isinstance(d, int) for d in out):
        return node.op("Reshape", [node.x("x"), node.int64s(out)])
    shape = node.x("shape")
    return node.op("Reshape", [node.x("x"), node.cast(shape, DataType.INT64)])


@rule("transpose")
def transpose(node: Node) -> list:
    return node.op("Transpose", [node.x("x")], {"perm": node.ints("perm")})


@rule("concat")
def concat(node: Node) -> list:
    if node.scalar("interleave", False):
        raise node.unsupported("interleave=True")
    return node.op("Concat", node.values("values"), {"axis": int(node.scalar("axis"))})


@rule("squeeze")
def squeeze(node: Node) -> list:
    axes = node.ints("axes", None)
    inputs = [node.x("x")] + ([] if axes is None else [node.int64s(axes)])
    return node.op("Squeeze", inputs)


@rule("expand_dims")
def expand_dims(node: Node) -> list:
    return node.op("Unsqueeze", [node.x("x"), node.int64s(node.ints("axes"))])


@rule("flatten2d")
def flatten2d(node: Node) -> list:
    return node.op("Flatten", [node.x("x")], {"axis": int(node.scalar("axis", 1))})


@rule("shape")
def shape(node: Node) -> list:
    return [node.cast(node.one("Shape", [node.x("x")]), node.out().dtype)]
