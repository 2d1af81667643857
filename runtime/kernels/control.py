"""Control-flow kernels: If, Loop and Scan, which run their nested blocks with ``ctx.run_block``."""

from __future__ import annotations

import numpy as np

from offload.errors import ShapeError
from offload.ir import TensorType

from . import kernel
from ._util import normalize_axis, unsupported


def _truth(op: str, cond) -> bool:
    cond = np.asarray(cond)
    if cond.size != 1:
        raise ShapeError(f"{op}: the condition has {cond.size} elements, expected one")
    return bool(cond.reshape(-1)[0])


@kernel("If")
def if_(ctx, cond, *, else_branch, then_branch):
    branch = then_branch if _truth("If", cond) else else_branch
    return tuple(ctx.run_block(branch, []))


def _empty_scan_output(value, axis: int = 0) -> np.ndarray:
    """A scan output of a loop that ran zero times: the declared per-step shape with 0 steps."""
    t = value.type
    if not isinstance(t, TensorType):
        return np.zeros((0,), dtype=np.float32)
    dims = list(t.shape) if t.is_static else []
    dims.insert(normalize_axis(axis, len(dims) + 1, "Scan"), 0)
    return np.zeros(dims, dtype=t.dtype.numpy)


@kernel("Loop")
def loop(ctx, M=None, cond=None, *v_initial, body):
    if M is None and cond is None:
        raise unsupported("Loop", "a loop with neither a trip count M nor a condition (it never ends)")
    n_carried = len(v_initial)
    n_scan = len(body.outputs) - 1 - n_carried
    carried = list(v_initial)
    scans: list[list] = [[] for _ in range(n_scan)]
    max_trips = None if M is None else int(np.asarray(M).reshape(-1)[0])
    # Without a cond input the loop is a plain for loop and the body's cond output is ignored.
    keep_going = True if cond is None else _truth("Loop", cond)
    i = 0
    while keep_going and (max_trips is None or i < max_trips):
        out = ctx.run_block(body, [np.array(i, dtype=np.int64), np.array(keep_going), *carried])
        if cond is not None:
            keep_going = _truth("Loop", out[0])
        carried = out[1 : 1 + n_carried]
        for acc, value in zip(scans, out[1 + n_carried :]):
            acc.append(value)
        i += 1
    scan_values = body.outputs[1 + n_carried :]
    stacked = [np.stack(acc) if acc else _empty_scan_output(v) for acc, v in zip(scans, scan_values)]
    return tuple(carried + stacked)


@kernel("Scan")
def scan(
    ctx,
    *initial_state_and_scan_inputs,
    body,
    num_scan_inputs,
    scan_input_axes,
    scan_input_directions,
    scan_output_axes,
    scan_output_directions,
):
    n_state = len(initial_state_and_scan_inputs) - num_scan_inputs
    if any(x is None for x in initial_state_and_scan_inputs):
        # Opset 8's Scan, whose optional first input was sequence_lens, is rewritten at import
        # (frontends/onnx_versions.py); since opset 9 no input is optional.
        raise unsupported("Scan", "an omitted input (no input of opset 9's Scan is optional)")
    states = list(initial_state_and_scan_inputs[:n_state])
    inputs = initial_state_and_scan_inputs[n_state:]
    n_out = len(body.outputs) - n_state
    in_axes = scan_input_axes or [0] * len(inputs)
    in_dirs = scan_input_directions or [0] * len(inputs)
    # Each scan input as a view with its scan axis first, in the order the body reads it.
    steps_of = [
        np.moveaxis(x, normalize_axis(a, x.ndim, "Scan"), 0)[:: -1 if d else 1]
        for x, a, d in zip(inputs, in_axes, in_dirs)
    ]
    lengths = {len(x) for x in steps_of}
    if len(lengths) != 1:
        raise ShapeError(f"Scan: scan inputs have lengths {sorted(lengths)} along their scan axes")
    (steps,) = lengths
    outs: list[list] = [[] for _ in range(n_out)]
    for t in range(steps):
        result = ctx.run_block(body, [*states, *(x[t] for x in steps_of)])
        states = result[:n_state]
        for acc, value in zip(outs, result[n_state:]):
            acc.append(value)
    out_axes = scan_output_axes or [0] * n_out
    out_dirs = scan_output_directions or [0] * n_out
    stacked = []
    for acc, a, d, v in zip(outs, out_axes, out_dirs, body.outputs[n_state:]):
        if d:
            acc.reverse()
        if not acc:
            stacked.append(_empty_scan_output(v, a))
        else:
            stacked.append(np.stack(acc, axis=normalize_axis(a, np.ndim(acc[0]) + 1, "Scan")))
    return tuple(states + stacked)
