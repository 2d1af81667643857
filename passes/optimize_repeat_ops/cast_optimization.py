"""optimize_repeat_ops::cast_optimization — a Cast after a lossless Cast reads the original.

Rule: ``Cast(Cast(x, to=T1), to=T2)`` where every value of x's type T0 is a value of T1 (a
widening: int8 → int32, float16 → float32, uint8 → float16, bool → anything …) becomes
``Cast(x, to=T2)``, and plain x when T2 is T0 (a widening then a narrowing back; unless x is
a graph input and the result a graph output, whose names must stay). The first
cast keeps its other readers. Because the first cast changes no value, the second one sees
the same number either way: the result is bit for bit the same. A lossy first cast is never
skipped (float32 → bool → float16 keeps only 0/1; int32 → int8 → uint8 keeps only
[-128, 127] mod 256; float32 → float16 → float32 rounds). Same-dtype casts are removed by
cleanup::noop_elimination. Only the standard integer, bool and float types (float16,
bfloat16, float32, float64) take part; the 8-bit and smaller floats do not.

Before::

    %w: (2,3,i32) = Cast(input=%x, to=6)       # %x: (2,3,i8)
    %y: (2,3,fp32) = Cast(input=%w, to=1)

After::

    %y: (2,3,fp32) = Cast(input=%x, to=1)
"""

from __future__ import annotations

from offload.ir import DataType, Program

from ..pattern import Rewriter
from ..registry import graph_pass

D = DataType
# Integer types: (bits, signed).
_INTS = {
    D.UINT8: (8, False),
    D.INT8: (8, True),
    D.UINT16: (16, False),
    D.INT16: (16, True),
    D.UINT32: (32, False),
    D.INT32: (32, True),
    D.UINT64: (64, False),
    D.INT64: (64, True),
}
# Float types: (significand bits with the implicit one, exponent bits).
_FLOATS = {D.FLOAT16: (11, 5), D.BFLOAT16: (8, 8), D.FLOAT: (24, 8), D.DOUBLE: (53, 11)}


def lossless(src: DataType, dst: DataType) -> bool:
    """Whether every value of ``src`` is exactly a value of ``dst``."""
    if src == dst:
        return True
    if src == D.BOOL:
        return dst in _INTS or dst in _FLOATS
    if src in _INTS and dst in _INTS:
        (sb, ss), (db, ds) = _INTS[src], _INTS[dst]
        return db > sb if ss != ds and not ss else db >= sb and ss == ds
    if src in _INTS and dst in _FLOATS:
        bits, signed = _INTS[src]
        return bits - signed <= _FLOATS[dst][0]
    if src in _FLOATS and dst in _FLOATS:
        (sm, se), (dm, de) = _FLOATS[src], _FLOATS[dst]
        return dm >= sm and de >= se
    return False


def _plain(t) -> bool:
    return t == D.BOOL or t in _INTS or t in _FLOATS


def _dtype(v):
    return getattr(v.type, "dtype", None)


@graph_pass("optimize_repeat_ops::cast_optimization")
def cast_optimization(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if op.op_type != "Cast" or op.domain or not rw.alive(op):
            continue
        first = op.inputs[0].producer
        if first is None or first.op_type != "Cast" or first.domain:
            continue
        x = first.inputs[0]
        t0, t1, t2 = _dtype(x), _dtype(first.outputs[0]), _dtype(op.outputs[0])
        if not all(_plain(t) for t in (t0, t1, t2)) or not lossless(t0, t1):
            continue
        if t2 == t0 and rw.substitute(op.outputs[0], x, block):
            rw.drop(first, op)
        else:  # (a graph input cannot take a graph output's name: a same-type Cast stays)
            op.set_input(0, x)
            rw.drop(first)
        changed = True
    return changed
