"""Inference rules of control flow (If, Loop, Scan) and the typing of their bodies."""

from __future__ import annotations

from .core import Block, Operation
from .infer_dims import _axis, _join_types, _shape, _tensor, _type
from .registry import inference
from .types import DataType, TensorType


@inference("If")
def _if(op, attrs):
    then_b, else_b = attrs.get("then_branch"), attrs.get("else_branch")
    if not isinstance(then_b, Block) or not isinstance(else_b, Block):
        return [None] * len(op.outputs)
    return [_join_types(a.type, b.type) for a, b in zip(then_b.outputs, else_b.outputs)]


@inference("Loop")
def _loop(op, attrs):
    body = attrs.get("body")
    n_carried = max(len(op.inputs) - 2, 0)
    if not isinstance(body, Block):
        return [None] * len(op.outputs)
    finals = [
        _join_types(_type(op, 2 + i), body.outputs[1 + i].type if 1 + i < len(body.outputs) else None)
        for i in range(n_carried)
    ]
    scans = []
    for v in body.outputs[1 + n_carried :]:
        t = v.type
        scans.append(
            TensorType(t.dtype, (None, *t.shape) if t.shape is not None else None)
            if isinstance(t, TensorType)
            else None
        )
    return finals + scans


@inference("Scan")
def _scan(op, attrs):
    body = attrs.get("body")
    n_scan_in = attrs.get("num_scan_inputs") or 0
    n_state = len(op.inputs) - n_scan_in
    if not isinstance(body, Block) or n_state < 0:
        return [None] * len(op.outputs)
    in_axes = attrs.get("scan_input_axes") or [0] * n_scan_in
    first = _shape(op, n_state) if n_scan_in else None
    length = None
    if first is not None and n_scan_in and _axis(in_axes[0], len(first)) is not None:
        length = first[_axis(in_axes[0], len(first))]
    states = [
        _join_types(_type(op, i), body.outputs[i].type if i < len(body.outputs) else None)
        for i in range(n_state)
    ]
    per_iter = body.outputs[n_state:]
    out_axes = attrs.get("scan_output_axes") or [0] * len(per_iter)
    scans = []
    for v, axis in zip(per_iter, out_axes):
        t = v.type
        if not isinstance(t, TensorType) or t.shape is None:
            scans.append(None if not isinstance(t, TensorType) else TensorType(t.dtype, None))
            continue
        a = _axis(axis, len(t.shape) + 1)
        scans.append(TensorType(t.dtype, None if a is None else t.shape[:a] + (length,) + t.shape[a:]))
    return states + scans


def _prepare_body(op: Operation) -> None:
    """Give untyped parameters of a Loop or Scan body the types the op passes in."""
    body = op.attributes.get("body")
    if not isinstance(body, Block):
        return
    if op.op_type == "Loop" and not op.domain:
        given = [TensorType(DataType.INT64, ()), TensorType(DataType.BOOL, ())]
        given += [_type(op, i) for i in range(2, len(op.inputs))]
    elif op.op_type == "Scan" and not op.domain:
        n_scan = op.attributes.get("num_scan_inputs") or 0
        n_state = len(op.inputs) - n_scan
        axes = op.attributes.get("scan_input_axes") or [0] * n_scan
        given = [_type(op, i) for i in range(n_state)]
        for j in range(n_scan):
            t = _tensor(op, n_state + j)
            a = None if t is None or t.shape is None else _axis(axes[j], len(t.shape))
            given.append(
                None
                if t is None
                else TensorType(t.dtype, None if a is None else t.shape[:a] + t.shape[a + 1 :])
            )
    else:
        return
    for param, t in zip(body.inputs, given):
        if param.type is None and t is not None:
            param.type = t
