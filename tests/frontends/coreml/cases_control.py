"""Single-op cases: cond and while_loop (generate_ops.py; needs coremltools)."""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil import Builder as mb
from generate_ops import Case

rng = np.random.default_rng(99)
POS = (np.abs(rng.standard_normal((2, 3))) + 0.5).astype(np.float32)
NEG = -POS


def cond_prog(x):
    pred = mb.greater(x=mb.reduce_sum(x=x), y=np.float32(0.0))
    return mb.cond(
        pred=pred,
        _true_fn=lambda: mb.mul(x=x, y=np.float32(2.0)),
        _false_fn=lambda: mb.sub(x=x, y=np.float32(1.0)),
    )


def cond_ref(x):
    return [x * 2 if x.sum() > 0 else x - 1]


def counting_loop(x):
    """Adds x to an accumulator 5 times (the counter is a loop variable)."""
    i0 = mb.fill(shape=[1], value=np.float32(0.0))
    _, acc = mb.while_loop(
        _cond=lambda i, acc: mb.less(x=mb.reduce_sum(x=i), y=np.float32(5.0)),
        _body=lambda i, acc: (mb.add(x=i, y=np.float32(1.0)), mb.add(x=acc, y=x)),
        loop_vars=(i0, x),
    )
    return acc


def doubling_loop(x):
    """Doubles x until its largest element reaches 100: the trip count depends on the data."""
    y = mb.while_loop(
        _cond=lambda v: mb.less(x=mb.reduce_max(x=v), y=np.float32(100.0)),
        _body=lambda v: (mb.mul(x=v, y=np.float32(2.0)),),
        loop_vars=(x,),
    )
    return y


def doubling_ref(x):
    while x.max() < 100:
        x = x * 2
    return [x]


def counter_loop(x):
    """An int32 counter against a bound taken from x's shape (3): the importer gives Loop a trip count."""
    n = mb.gather(x=mb.shape(x=x), indices=np.int32(1))
    i0 = mb.fill(shape=np.array([], np.int32), value=np.int32(0))
    _, acc = mb.while_loop(
        _cond=lambda i, acc: mb.less(x=i, y=n),
        _body=lambda i, acc: (mb.add(x=i, y=np.int32(1)), mb.mul(x=acc, y=np.float32(1.5))),
        loop_vars=(i0, x),
    )
    return acc


CASES = [
    Case("c_while_counter", {"x": POS}, counter_loop, lambda x: [x * np.float32(1.5**3)]),
    Case("c_cond_true", {"x": POS}, cond_prog, cond_ref),
    Case("c_cond_false", {"x": NEG}, cond_prog, cond_ref),
    Case("c_while_counting", {"x": POS}, counting_loop, lambda x: [x * 6]),
    Case("c_while_doubling", {"x": POS}, doubling_loop, doubling_ref),
]


QUAD = {f"x{i}": rng.standard_normal((1, 2, 3, 4)).astype(np.float32) for i in range(1, 5)}


def nested_interleave(x1, x2, x3, x4):
    """The catalog's concat_to_pixel_shuffle pattern: interleaves on H, then on W."""
    a = mb.concat(values=[x1, x2], axis=2, interleave=True)
    b = mb.concat(values=[x3, x4], axis=2, interleave=True)
    return mb.concat(values=[a, b], axis=3, interleave=True)


def nested_interleave_ref(x1, x2, x3, x4):
    y = np.empty((1, 2, 6, 8), np.float32)
    for p in range(2):
        for q in range(2):
            y[:, :, p::2, q::2] = [x1, x2, x3, x4][p + 2 * q]  # y[2i+p, 2j+q] = x_{1+p+2q}[i, j]
    return [y]


# coremltools' own concat_to_pixel_shuffle would rewrite the pattern: saved as built.
CASES.append(Case("c_nested_interleave", QUAD, nested_interleave, nested_interleave_ref, passes=False))
