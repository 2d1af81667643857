"""optimize_normalization::fuse_layernorm_or_instancenorm — the mean/variance decomposition is one op.

Rule: over the same constant axes (keepdims=1),
``m = ReduceMean(x)``, ``d = Sub(x, m)``, ``v = ReduceMean(Pow(d, 2))`` (or of ``Mul(d, d)``),
``n = Div(d, Sqrt(Add(v, eps)))``, then optionally ``Mul(n, gamma)`` and ``Add(·, beta)``
(either operand order), every intermediate read inside the pattern alone and eps a constant
with one value, becomes

* ``LayerNormalization(x, Scale, B, axis=k, epsilon=eps)`` when the axes are the last ones,
  k..r-1, of a float x whose normalized dims are static, and gamma / beta vary only along
  them (Scale and B take the normalized shape; Scale is ones when there is no gamma);
* ``InstanceNormalization(x, scale, B, epsilon=eps)`` when x has rank ≥ 3, the axes are every
  spatial axis 2..r-1 (static), and gamma / beta are per channel (one value or (C,1,…),
  (1,C,1,…)) of a static channel count.

The other dims of x may be symbols or unknown (a batch, a sequence length): x needs a known
rank only. The result keeps x's shape when it keeps x's rank (eps and the exponent are one
value, so only their rank can broadcast) and gamma / beta vary along the normalized axes (or
the channel) alone: those are the checks, not an equality of types that an unknown dim fails.

Both ops compute the same mean, variance and quotient, so the result differs by float
rounding only. A gamma or beta that varies along other axes, axes that are neither form, or
an eps that is not one number leave the pattern alone.

Before::

    %m: (2,5,1,fp32) = ReduceMean(data=%x, axes=%ax)           # %x: (2,5,8,fp32), %ax = [-1]
    %d: (2,5,8,fp32) = Sub(A=%x, B=%m)
    %p: (2,5,8,fp32) = Pow(X=%d, Y=%two)
    %v: (2,5,1,fp32) = ReduceMean(data=%p, axes=%ax)
    %e: (2,5,1,fp32) = Add(A=%v, B=%eps)
    %s: (2,5,1,fp32) = Sqrt(X=%e)
    %n: (2,5,8,fp32) = Div(A=%d, B=%s)
    %g: (2,5,8,fp32) = Mul(A=%n, B=%gamma)                      # %gamma: (8,fp32)
    %y: (2,5,8,fp32) = Add(A=%g, B=%beta)

After::

    %y: (2,5,8,fp32) = LayerNormalization(X=%x, Scale=%y_scale, B=%y_bias, axis=2, epsilon=1e-05)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Program, TensorType, Value

from ..pattern import Rewriter, const, is_float, other_input, rank, scalar, with_scalar
from ..registry import graph_pass


def _axes(op: Operation | None, r: int) -> tuple[int, ...] | None:
    """The sorted, normalized axes of a keepdims ReduceMean with constant axes."""
    if op is None or op.op_type != "ReduceMean" or op.domain or not op.attributes.get("keepdims", 1):
        return None
    a = const(op.inputs[1]) if len(op.inputs) > 1 and op.inputs[1] is not None else None
    if a is None or a.size == 0:
        return None
    axes = sorted({int(i) % r for i in a.reshape(-1)})
    return tuple(axes) if len(axes) == a.size else None


def _shape(v: Value) -> tuple | None:
    """The dims of ``v`` (numbers, symbols or None) when its rank is known."""
    t = v.type
    return tuple(t.shape) if isinstance(t, TensorType) and t.shape is not None else None


def _single(rw: Rewriter, v: Value, op_type: str) -> Operation | None:
    user = rw.only_user(v)
    return user if user is not None and user.op_type == op_type and not user.domain else None


def _squares(op: Operation | None, d: Value) -> bool:
    if op is None or op.domain:
        return False
    if op.op_type == "Mul":
        return list(op.inputs) == [d, d]
    p = with_scalar(op, "Pow", const_second=True)
    return p is not None and p[0] is d and p[1] == 2.0


def _affine(rw: Rewriter, n: Value) -> tuple[list[Operation], np.ndarray | None, np.ndarray | None]:
    """The optional ``Mul(·, gamma)`` then ``Add(·, beta)`` after the quotient ``n``."""
    ops, gamma, beta, v = [], None, None, n
    for op_type in ("Mul", "Add"):
        user = _single(rw, v, op_type)
        c = None if user is None else const(other_input(user, v))
        if c is None or c.dtype != n.type.dtype.numpy:
            continue
        ops.append(user)
        gamma, beta = (c, beta) if op_type == "Mul" else (gamma, c)
        v = user.outputs[0]
    return ops, gamma, beta


def _along(c: np.ndarray | None, shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray | None:
    """``c`` as an array of x's rank that varies only along ``axes`` (1 elsewhere), or None."""
    if c is None:
        return None
    r = len(shape)
    if c.ndim > r:
        return None
    full = c.reshape((1,) * (r - c.ndim) + c.shape)
    if any(d != 1 and (i not in axes or d != shape[i]) for i, d in enumerate(full.shape)):
        return None
    return full


@graph_pass("optimize_normalization::fuse_layernorm_or_instancenorm")
def fuse_layernorm_or_instancenorm(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, mean in rw.ops():
        if mean.op_type != "ReduceMean" or not rw.alive(mean) or not is_float(mean.inputs[0]):
            continue
        x = mean.inputs[0]
        shape = _shape(x)
        axes = None if shape is None else _axes(mean, len(shape))
        if axes is not None and not all(isinstance(shape[a], int) for a in axes):
            continue
        sub = _single(rw, mean.outputs[0], "Sub")
        if axes is None or sub is None or list(sub.inputs) != [x, mean.outputs[0]]:
            continue
        d = sub.outputs[0]
        users = d.users
        if len(users) != 2 or rw.returned(d):
            continue
        square = next((u for u in users if _squares(u, d)), None)
        div = next((u for u in users if u.op_type == "Div" and not u.domain and u.inputs[0] is d), None)
        if square is None or div is None or square is div:
            continue
        var = _single(rw, square.outputs[0], "ReduceMean")
        if var is None or _axes(var, len(shape)) != axes:
            continue
        add = _single(rw, var.outputs[0], "Add")
        eps = None if add is None else scalar(other_input(add, var.outputs[0]))
        sqrt = None if add is None else _single(rw, add.outputs[0], "Sqrt")
        if eps is None or sqrt is None or _single(rw, sqrt.outputs[0], "Div") is not div:
            continue
        affine, gamma, beta = _affine(rw, div.outputs[0])
        last = (affine or [div])[-1]
        r = len(shape)
        if rank(last.outputs[0]) != r:
            continue  # a one-valued eps, exponent or gamma of a higher rank broadcast the result
        gamma_full, beta_full = _along(gamma, shape, axes), _along(beta, shape, axes)
        layer = axes == tuple(range(axes[0], r))
        layer = (
            layer and (gamma is None or gamma_full is not None) and (beta is None or beta_full is not None)
        )
        dtype = x.type.dtype.numpy
        name = last.outputs[0].name
        if layer:
            lead = axes[0]
            norm_shape = shape[lead:]
            scale = (
                np.ones(norm_shape, dtype) if gamma_full is None else _squeeze(gamma_full, lead, norm_shape)
            )
            inputs = [x, rw.constant(block, scale, stem=f"{name}_scale")]
            if beta_full is not None:
                inputs.append(rw.constant(block, _squeeze(beta_full, lead, norm_shape), stem=f"{name}_bias"))
            attrs = {"axis": lead, "epsilon": eps}
            fused = rw.build(block, "LayerNormalization", inputs, attrs, before=last, stem="layer_norm")
        elif (
            r >= 3
            and axes == tuple(range(2, r))
            and isinstance(shape[1], int)
            and _per_channel(gamma, beta, shape)
        ):
            channels = shape[1]
            inputs = [
                x,
                rw.constant(block, _channel(gamma, channels, dtype, 1.0), stem=f"{name}_scale"),
                rw.constant(block, _channel(beta, channels, dtype, 0.0), stem=f"{name}_bias"),
            ]
            fused = rw.build(
                block, "InstanceNormalization", inputs, {"epsilon": eps}, before=last, stem="instance_norm"
            )
        else:
            continue
        if rw.replace_op(last, fused):
            rw.drop(mean, sub, square, var, add, sqrt, div, *affine)
            changed = True
    return changed


def _squeeze(full: np.ndarray, lead: int, norm_shape: tuple[int, ...]) -> np.ndarray:
    """The normalized-shape view of a rank-r constant that is 1 on the leading axes."""
    return np.ascontiguousarray(np.broadcast_to(full.reshape(full.shape[lead:]), norm_shape))


def _per_channel(gamma, beta, shape) -> bool:
    """gamma and beta (where present) vary only along axis 1 of ``shape``."""
    return all(c is None or _along(c, shape, (1,)) is not None for c in (gamma, beta))


def _channel(c: np.ndarray | None, channels: int, dtype, fill: float) -> np.ndarray:
    if c is None:
        return np.full(channels, fill, dtype)
    return np.ascontiguousarray(np.broadcast_to(c.reshape(-1), (channels,))).astype(dtype)
