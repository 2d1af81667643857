"""Normalization kernels: batch/layer/group norms, LRN, softmax family, attention, RoPE and the losses."""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from offload.ir import DataType

from . import kernel, prepared
from ._util import normalize_axes, normalize_axis, out_for, same_view, unsupported
from .approximations import exp32_into
from .buffers import _arena_buffers, _KeptCalls
from .conv import _epilogue, scalar_extras
from .linalg import widened


def _work_dtype(*dtypes) -> np.dtype:
    """The type to compute in: double if any input is double, else float32 (16-bit floats lose too much)."""
    return np.dtype(np.float64 if any(np.dtype(d) == np.float64 for d in dtypes) else np.float32)


def _stash_dtype(stash_type: int, op: str) -> np.dtype:
    if stash_type not in (DataType.FLOAT, DataType.DOUBLE, DataType.FLOAT16, DataType.BFLOAT16):
        raise unsupported(op, f"stash_type={stash_type}")
    return DataType(stash_type).numpy


def _channel(v, ndim: int, dtype) -> np.ndarray:
    """A per-channel vector shaped to broadcast over (N, C, D1, ...)."""
    return np.asarray(v).astype(dtype, copy=False).reshape((-1,) + (1,) * (ndim - 2))


def _standardize(x: np.ndarray, axes, epsilon: float):
    """(x - mean) / sqrt(var + epsilon) over ``axes``, with the mean and 1/std (dims kept)."""
    mean = np.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    var = np.mean(centered * centered, axis=axes, keepdims=True)
    inv_std = 1 / np.sqrt(var + x.dtype.type(epsilon))
    return centered * inv_std, mean, inv_std


def _needs_channels(X, op: str) -> None:
    if np.ndim(X) < 2:
        raise unsupported(op, f"an input of rank {np.ndim(X)} (it needs (N, C, ...))")


@kernel("BatchNormalization")
def batch_normalization(ctx, X, scale, B, input_mean, input_var, *, epsilon, momentum, training_mode):
    X, input_mean, input_var = np.asarray(X), np.asarray(input_mean), np.asarray(input_var)
    _needs_channels(X, "BatchNormalization")
    work = _work_dtype(X.dtype, np.asarray(scale).dtype)
    x = X.astype(work, copy=False)
    if training_mode:
        axes = (0,) + tuple(range(2, X.ndim))
        mean, var = np.mean(x, axis=axes), np.var(x, axis=axes)
    else:
        mean, var = input_mean, input_var
    out = out_for(ctx, 0, X.shape, X.dtype) if work == X.dtype and X.flags.c_contiguous else None
    if not training_mode:
        # x * a + b with a = scale / sqrt(var + eps), b = B - mean * a per channel: two passes
        # over x instead of four (DenseNet-121 spends a fifth of its CPU time in BatchNormalization)
        a = np.asarray(scale, work) / np.sqrt(np.asarray(var, work) + work.type(epsilon))
        b = np.asarray(B, work) - np.asarray(mean, work) * a
        y = np.multiply(x, _channel(a, X.ndim, work), out=out)
        return np.add(y, _channel(b, X.ndim, work), out=y).astype(X.dtype, copy=False)
    y = np.subtract(x, _channel(mean, X.ndim, work), out=out)
    y = np.divide(y, np.sqrt(_channel(var, X.ndim, work) + work.type(epsilon)), out=out)
    y = np.multiply(y, _channel(scale, X.ndim, work), out=out)
    y = np.add(y, _channel(B, X.ndim, work), out=out).astype(X.dtype, copy=False)
    # The running statistics blend the given ones with this batch's (population) statistics.
    running_mean = input_mean * momentum + mean * (1 - momentum)
    running_var = input_var * momentum + var * (1 - momentum)
    return y, running_mean.astype(input_mean.dtype), running_var.astype(input_var.dtype)


# An inference BatchNormalization's prepared call works through the channels by chunks of about
# this many bytes, so that its add (and the op it applies after, ``with_epilogue``) finds the
# chunk its multiply wrote in cache: DenseNet-121's BatchNormalizations read concatenations of up
# to 224 x 56 x 56 floats, and its Relu after each one was a third pass from memory.
_NORM_CHUNK_BYTES = 256 << 10


class _BatchNormCall(_KeptCalls):
    """An inference BatchNormalization of a float32 or float64 tensor of static shape whose
    parameters are of its type: the kernel's x * a + b per channel (a and b computed as the
    kernel computes them: once where the parameters are constants, else at each run), by chunks
    of channels (``_NORM_CHUNK_BYTES``). With an ``epilogue`` (Relu, Clip, HardSwish,
    HardSigmoid, LeakyRelu, Max or Min with a one-element operand, or a chain of them:
    ``conv._Epilogue``) it applies those ops to each chunk in place and writes the last op's
    output; the ops' other inputs follow the five of BatchNormalization. The same numpy ops on
    the same elements as the two steps: the same bits. Its calls are made once per arena set
    when bound, and kept for the last arrays when called unbound (``buffers._KeptCalls``)."""

    __slots__ = ("dtype", "epilogue", "epsilon", "last", "shape")

    def __init__(self, epsilon: float, shape: tuple, dtype, epilogue=None):
        self.epsilon, self.shape, self.dtype, self.epilogue = epsilon, tuple(shape), np.dtype(dtype), epilogue
        self.last = None  # (out, args, calls): one tuple, replaced whole (threads)

    def with_epilogue(self, op_type: str, attrs: dict, n_norm: int, extras: list):
        """This op (its ``n_norm`` inputs) followed by ``op_type`` reading its result alone, as one
        call, or None."""
        epilogue = _epilogue(op_type, attrs, extras, self.dtype, len(self.shape))
        if epilogue is None:
            return None
        if self.epilogue is not None:  # an op after the one fused already (n_norm counts its inputs)
            epilogue = self.epilogue.followed_by(epilogue)
        elif n_norm != 5:
            return None
        return _BatchNormCall(self.epsilon, self.shape, self.dtype, epilogue)

    def _calls(self, out, args) -> tuple:
        x, scale, B, mean, var, *extras = args
        params = (scale, B, mean, var)
        c = self.shape[1]
        if (
            x.shape != self.shape
            or out.shape != self.shape
            or x.dtype != self.dtype
            or out.dtype != self.dtype
        ):
            raise TypeError("not the declared types")
        if any(p.dtype != self.dtype or p.shape != (c,) for p in params):
            raise TypeError("not the declared parameter types")
        if self.epilogue is None and extras:
            raise TypeError("not the declared types")
        extras = scalar_extras(tuple(extras), self.dtype)
        calls = []
        if np.may_share_memory(out, x) and not same_view(out, x):
            copy = np.empty(self.shape, self.dtype)
            calls.append(functools.partial(np.copyto, copy, x))
            x = copy
        a, b = np.empty(c, self.dtype), np.empty(c, self.dtype)
        derive = functools.partial(_affine, self.epsilon, *params, a, b)
        if any(p.flags.writeable for p in params):
            calls.append(derive)  # parameters the graph computes: again at each run
        else:
            derive()
        shape = (c,) + (1,) * (len(self.shape) - 2)
        a, b = a.reshape(shape), b.reshape(shape)
        buffers = _arena_buffers(out)
        per_channel = max(1, math.prod(self.shape[2:]) * self.shape[0] * self.dtype.itemsize)
        step = max(1, _NORM_CHUNK_BYTES // per_channel)
        for lo in range(0, c, step):
            ch = slice(lo, lo + step)
            part = out[:, ch]
            calls.append(functools.partial(np.multiply, x[:, ch], a[ch], part))
            calls.append(functools.partial(np.add, part, b[ch], part))
            if self.epilogue is not None:
                calls.extend(self.epilogue.calls(part, extras, buffers))
        return tuple(calls)


def _affine(epsilon: float, scale, B, mean, var, a, b) -> None:
    """The kernel's a = scale / sqrt(var + epsilon) and b = B - mean * a, into a and b."""
    np.divide(scale, np.sqrt(var + a.dtype.type(epsilon)), out=a)
    np.subtract(B, mean * a, out=b)


@prepared("BatchNormalization")
def _batch_norm_prepared(attrs, inputs, output):
    if attrs.get("training_mode") or len(inputs) != 5 or output is None or any(i is None for i in inputs):
        return None
    (dtype, shape), (out_dtype, out_shape) = inputs[0], output
    if dtype not in (np.float32, np.float64) or out_dtype != dtype or tuple(out_shape) != tuple(shape):
        return None
    if len(shape) < 2 or any(d != dtype or tuple(s) != (shape[1],) for d, s in inputs[1:]):
        return None
    return _BatchNormCall(attrs.get("epsilon", 1e-5), shape, dtype)


@kernel("InstanceNormalization")
def instance_normalization(ctx, input, scale, B, *, epsilon):
    X = np.asarray(input)
    _needs_channels(X, "InstanceNormalization")
    work = _work_dtype(X.dtype)
    normalized, _, _ = _standardize(X.astype(work), tuple(range(2, X.ndim)), epsilon)
    y = normalized * _channel(scale, X.ndim, work) + _channel(B, X.ndim, work)
    return y.astype(X.dtype)


@kernel("LayerNormalization")
def layer_normalization(ctx, X, Scale, B=None, *, axis, epsilon, stash_type):
    X = np.asarray(X)
    stash = _stash_dtype(stash_type, "LayerNormalization")
    axes = tuple(range(normalize_axis(axis, X.ndim, "LayerNormalization"), X.ndim))
    normalized, mean, inv_std = _standardize(X.astype(stash), axes, epsilon)
    # The scale and shift happen in X's own type, as the spec's second stage does.
    y = normalized.astype(X.dtype) * Scale
    if B is not None:
        y = y + B
    return y.astype(X.dtype, copy=False), mean, inv_std


@kernel("GroupNormalization")
def group_normalization(ctx, X, scale, bias, *, epsilon, num_groups, stash_type):
    X = np.asarray(X)
    _needs_channels(X, "GroupNormalization")
    n, c = X.shape[:2]
    if num_groups <= 0 or c % num_groups:
        raise unsupported("GroupNormalization", f"num_groups={num_groups} with {c} channels")
    stash = _stash_dtype(stash_type, "GroupNormalization")
    grouped = X.astype(stash).reshape(n, num_groups, -1)
    normalized = _standardize(grouped, -1, epsilon)[0].reshape(X.shape).astype(X.dtype)
    scale, bias = np.asarray(scale), np.asarray(bias)
    if scale.size == num_groups != c:
        # Opset 18 gave one scale and bias per group: spread them over the group's channels.
        scale, bias = np.repeat(scale, c // num_groups), np.repeat(bias, c // num_groups)
    y = normalized * _channel(scale, X.ndim, X.dtype) + _channel(bias, X.ndim, X.dtype)
    return y.astype(X.dtype, copy=False)


@kernel("RMSNormalization")
def rms_normalization(ctx, X, scale, *, axis, epsilon, stash_type):
    X, scale = np.asarray(X), np.asarray(scale)
    stash = _stash_dtype(stash_type, "RMSNormalization")
    axes = tuple(range(normalize_axis(axis, X.ndim, "RMSNormalization"), X.ndim))
    x = X.astype(stash)
    rms = np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + stash.type(epsilon))
    normalized = (x / rms).astype(X.dtype).astype(scale.dtype)
    return (normalized * scale).astype(scale.dtype, copy=False)


@kernel("LpNormalization")
def lp_normalization(ctx, input, *, axis, p):
    X = np.asarray(input)
    ax = normalize_axis(axis, X.ndim, "LpNormalization")
    x = X.astype(_work_dtype(X.dtype))
    if p == 1:
        norm = np.sum(np.abs(x), axis=ax, keepdims=True)
    elif p == 2:
        norm = np.sqrt(np.sum(x * x, axis=ax, keepdims=True))
    else:
        raise unsupported("LpNormalization", f"p={p}")
    # An all-zero slice has norm zero; the spec defines its output as zero.
    out = np.divide(x, norm, out=np.zeros_like(x), where=norm != 0)
    return out.astype(X.dtype)


@kernel("MeanVarianceNormalization")
def mean_variance_normalization(ctx, X, *, axes):
    X = np.asarray(X)
    x = X.astype(_work_dtype(X.dtype))
    ax = normalize_axes(axes, X.ndim, "MeanVarianceNormalization")
    centered = x - np.mean(x, axis=ax, keepdims=True)
    std = np.sqrt(np.mean(centered * centered, axis=ax, keepdims=True))
    # The spec's function adds 1e-9 to the deviation, not to the variance.
    return (centered / (std + x.dtype.type(1e-9))).astype(X.dtype)


@kernel("LRN")
def lrn(ctx, X, *, alpha, beta, bias, size):
    x = widened(X)
    before = (size - 1) // 2
    square = np.pad(x * x, [(0, 0), (before, size - 1 - before)] + [(0, 0)] * (x.ndim - 2))
    sums = sliding_window_view(square, size, axis=1).sum(-1)
    return (x / (bias + alpha / size * sums) ** beta).astype(X.dtype, copy=False)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    if x.size == 0:  # see _softmax
        return x.copy()
    shifted = x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _softmax(x: np.ndarray, axis: int, out=None) -> np.ndarray:
    if x.size == 0:  # a max over an empty axis fills every other axis: (2**31 - 1, 0) makes 8 GiB
        return x.copy()
    e = x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    if e.dtype == np.float32:  # the compiled exp (approximations.exp32_into), as the prepared call
        exp32_into(e, e)
    else:
        np.exp(e, out=e)
    return np.divide(e, np.sum(e, axis=axis, keepdims=True), out=out)


@kernel("Softmax")
def softmax(ctx, input, *, axis):
    X = np.asarray(input)
    ax = normalize_axis(axis, X.ndim, "Softmax")
    x = X.astype(_work_dtype(X.dtype))
    out = out_for(ctx, 0, X.shape, X.dtype) if x.dtype == X.dtype and X.flags.c_contiguous else None
    return _softmax(x, ax, out).astype(X.dtype, copy=False)


@kernel("LogSoftmax")
def log_softmax(ctx, input, *, axis):
    X = np.asarray(input)
    ax = normalize_axis(axis, X.ndim, "LogSoftmax")
    return _log_softmax(X.astype(_work_dtype(X.dtype)), ax).astype(X.dtype)


@kernel("Hardmax")
def hardmax(ctx, input, *, axis):
    X = np.asarray(input)
    ax = normalize_axis(axis, X.ndim, "Hardmax")
    first_max = np.expand_dims(np.argmax(X, axis=ax), ax)
    positions = np.arange(X.shape[ax]).reshape((-1,) + (1,) * (X.ndim - ax - 1))
    return (positions == first_max).astype(X.dtype)


# ----------------------------------------------------------------------------- attention


def _to_heads(x: np.ndarray, num_heads, what: str) -> np.ndarray:
    """(B, S, H*D) packed input as (B, H, S, D); 4-D input as it is."""
    if x.ndim == 4:
        return x
    if x.ndim != 3 or not num_heads:
        raise unsupported("Attention", f"{what} of rank {x.ndim} without its number of heads")
    b, s, hidden = x.shape
    return x.reshape(b, s, num_heads, hidden // num_heads).transpose(0, 2, 1, 3)


def _structural_allowed(sq, total, offset, nonpad, is_causal, left, right) -> np.ndarray:
    """Which keys each query may see from causality, windows and padding: (B|1, 1, Sq, T) bool.

    A query's absolute position is its index plus ``offset`` (the keys that precede the block).
    """
    pos = np.reshape(offset, (-1, 1, 1)) + np.arange(sq).reshape(1, -1, 1)
    key = np.arange(total).reshape(1, 1, -1)
    allowed = np.ones((np.shape(pos)[0], sq, total), dtype=bool)
    if is_causal:
        allowed &= key <= pos
    if left is not None and left >= 0:
        allowed &= key >= pos - left
    if right is not None and right >= 0:
        allowed &= key <= pos + right
    if nonpad is not None:
        allowed &= key < np.reshape(nonpad, (-1, 1, 1))
    return allowed[:, None]


def _mask_bias(attn_mask, total: int, work) -> np.ndarray:
    """The user mask as an additive bias: bool False is -inf; a short key axis is padded with -inf."""
    m = np.asarray(attn_mask)
    bias = np.where(m, 0, -np.inf).astype(work) if m.dtype == np.bool_ else m.astype(work)
    if bias.ndim == 0:
        bias = bias.reshape(1)
    if bias.shape[-1] < total:
        pad = [(0, 0)] * (bias.ndim - 1) + [(0, total - bias.shape[-1])]
        bias = np.pad(bias, pad, constant_values=-np.inf)
    return bias


def _masked_softmax(scores: np.ndarray, dead: np.ndarray, precision) -> np.ndarray:
    """Softmax over the last axis in ``precision``; rows whose keys are all masked give zeros."""
    work = scores.dtype
    x = scores.astype(precision).astype(_work_dtype(precision))
    top = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - np.where(np.isfinite(top), top, 0))
    total = np.sum(e, axis=-1, keepdims=True)
    keep = np.broadcast_to(~dead, x.shape)
    probs = np.divide(e, total, out=np.zeros_like(e), where=keep)
    return probs.astype(precision).astype(work)


def _grouped_matmul(a: np.ndarray, b: np.ndarray, groups: int) -> np.ndarray:
    """a (B, Hq, M, K) @ b (B, Hkv, K, N) with query head h using kv head h // groups."""
    bsz, hq, m, k = a.shape
    out = np.matmul(a.reshape(bsz, b.shape[1], groups, m, k), b[:, :, None])
    return out.reshape(bsz, hq, m, out.shape[-1])


@kernel("Attention")
def attention(
    ctx,
    Q,
    K,
    V,
    attn_mask=None,
    past_key=None,
    past_value=None,
    nonpad_kv_seqlen=None,
    *,
    is_causal,
    kv_num_heads,
    left_window_size,
    q_num_heads,
    qk_matmul_output_mode,
    right_window_size,
    scale,
    softcap,
    softmax_precision,
):
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    work = _work_dtype(Q.dtype, K.dtype, V.dtype)
    q = _to_heads(Q, q_num_heads, "Q")
    k = _to_heads(K, kv_num_heads, "K")
    v = _to_heads(V, kv_num_heads, "V")
    past = 0
    if (past_key is None) != (past_value is None):
        raise unsupported("Attention", "past_key without past_value (or the reverse)")
    if past_key is not None:
        past = np.shape(past_key)[2]
        k = np.concatenate([past_key, k], axis=2)
        v = np.concatenate([past_value, v], axis=2)
    batch, hq, sq, head = q.shape
    hkv, total = k.shape[1], k.shape[2]
    if hq % hkv:
        raise unsupported("Attention", f"{hq} query heads over {hkv} key/value heads")
    groups = hq // hkv

    # Q and K each take sqrt(scale), as the spec does to keep the product in range.
    root = math.sqrt(scale if scale is not None else 1 / math.sqrt(head))
    raw = _grouped_matmul(q.astype(work) * root, (k.astype(work) * root).swapaxes(-1, -2), groups)
    capped = softcap * np.tanh(raw / softcap) if softcap and softcap > 0 else raw

    # The keys before the query block: the past cache, or an external cache's valid length minus Sq.
    offset = past
    if nonpad_kv_seqlen is not None and past_key is None:
        offset = np.asarray(nonpad_kv_seqlen) - sq
    allowed = _structural_allowed(
        sq, total, offset, nonpad_kv_seqlen, is_causal, left_window_size, right_window_size
    )
    bias = np.where(allowed, 0, -np.inf).astype(work)
    if attn_mask is not None:
        bias = bias + _mask_bias(attn_mask, total, work)
    biased = capped + bias
    dead = np.all(np.isneginf(np.broadcast_to(bias, biased.shape)), axis=-1, keepdims=True)
    precision = DataType(softmax_precision).numpy if softmax_precision else work
    probs = _masked_softmax(biased, dead, precision)

    y = _grouped_matmul(probs, v.astype(work), groups).astype(Q.dtype)
    if Q.ndim == 3:
        y = y.transpose(0, 2, 1, 3).reshape(batch, sq, -1)
    qk = None
    if ctx.output_wanted(3):
        stages = {0: raw, 1: capped, 2: biased, 3: probs}
        if qk_matmul_output_mode not in stages:
            raise unsupported("Attention", f"qk_matmul_output_mode={qk_matmul_output_mode}")
        qk = np.broadcast_to(stages[qk_matmul_output_mode], probs.shape).astype(Q.dtype)
    return y, k.astype(K.dtype, copy=False), v.astype(V.dtype, copy=False), qk


@kernel("FlexAttention", domain="ai.onnx.preview")
def flex_attention(ctx, Q, K, V, *, prob_mod, scale, score_mod, softmax_precision):
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    if Q.ndim != 4 or K.ndim != 4 or V.ndim != 4:
        raise unsupported("FlexAttention", f"inputs of rank {Q.ndim}, {K.ndim}, {V.ndim} (rank 4 needed)")
    hq, hkv = Q.shape[1], K.shape[1]
    if hq % hkv:
        raise unsupported("FlexAttention", f"{hq} query heads over {hkv} key/value heads")
    if softmax_precision:
        precision = DataType(softmax_precision).numpy
    else:
        precision = np.dtype(np.float64 if Q.dtype == np.float64 else np.float32)
    work = _work_dtype(precision)
    factor = scale if scale is not None else 1 / math.sqrt(Q.shape[-1])
    scores = _grouped_matmul(Q.astype(work), K.astype(work).swapaxes(-1, -2), hq // hkv) * factor
    scores = scores.astype(precision)
    if score_mod is not None:
        scores = np.asarray(ctx.run_block(score_mod, [scores])[0])
    probs = _softmax(scores.astype(work), -1).astype(precision)
    if prob_mod is not None:
        probs = np.asarray(ctx.run_block(prob_mod, [probs])[0])
    return _grouped_matmul(probs.astype(work), V.astype(work), hq // hkv).astype(Q.dtype)


_LINEAR_RULES = ("linear", "gated", "delta", "gated_delta")


@kernel("LinearAttention")
def linear_attention(
    ctx,
    query,
    key,
    value,
    past_state=None,
    decay=None,
    beta=None,
    *,
    chunk_size,
    kv_num_heads,
    q_num_heads,
    scale,
    update_rule,
):
    if update_rule not in _LINEAR_RULES:
        raise unsupported("LinearAttention", f"update_rule={update_rule!r}")
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    if (gated and decay is None) or (delta and beta is None):
        raise unsupported("LinearAttention", f"update_rule={update_rule!r} without its decay/beta input")
    query, key, value = np.asarray(query), np.asarray(key), np.asarray(value)
    work = _work_dtype(query.dtype)
    b, t = query.shape[:2]
    hq, hkv = q_num_heads, kv_num_heads
    if hq % hkv:
        raise unsupported("LinearAttention", f"{hq} query heads over {hkv} key/value heads")
    dk, dv = key.shape[-1] // hkv, value.shape[-1] // hkv
    q = query.astype(work).reshape(b, t, hkv, hq // hkv, dk)
    k = key.astype(work).reshape(b, t, hkv, dk)
    v = value.astype(work).reshape(b, t, hkv, dv)
    # Decay is per key dimension or per head, beta per head or shared: both broadcast over S's rows.
    g = None if not gated else np.exp(np.asarray(decay).astype(work).reshape(b, t, hkv, -1))
    rate = None if not delta else np.asarray(beta).astype(work).reshape(b, t, -1, 1)
    state = np.zeros((b, hkv, dk, dv), work) if past_state is None else np.asarray(past_state).astype(work)
    factor = scale if scale else 1 / math.sqrt(dk)
    out = np.empty((b, t, hkv, hq // hkv, dv), work)
    for i in range(t):
        if gated:
            state = g[:, i, :, :, None] * state
        if delta:
            # Move the state's prediction for k_t towards v_t by the rate beta_t.
            error = v[:, i] - np.einsum("bhkv,bhk->bhv", state, k[:, i])
            update = rate[:, i] * error
        else:
            update = v[:, i]
        state = state + k[:, i, :, :, None] * update[:, :, None, :]
        out[:, i] = factor * np.einsum("bhgk,bhkv->bhgv", q[:, i], state)
    return out.reshape(b, t, hq * dv).astype(query.dtype), state.astype(query.dtype)


@kernel("RotaryEmbedding")
def rotary_embedding(
    ctx, X, cos_cache, sin_cache, position_ids=None, *, interleaved, num_heads, rotary_embedding_dim
):
    X = np.asarray(X)
    work = _work_dtype(X.dtype)
    if X.ndim == 4:
        x = X.transpose(0, 2, 1, 3)  # (B, S, H, D)
    elif X.ndim == 3 and num_heads:
        x = X.reshape(X.shape[0], X.shape[1], num_heads, -1)
    else:
        raise unsupported("RotaryEmbedding", f"an input of rank {X.ndim} without num_heads")
    x = x.astype(work)
    rot = rotary_embedding_dim or x.shape[-1]
    cos, sin = np.asarray(cos_cache).astype(work), np.asarray(sin_cache).astype(work)
    if position_ids is not None:
        cos, sin = cos[position_ids], sin[position_ids]
    if cos.shape[-1] != rot // 2:
        raise unsupported("RotaryEmbedding", f"a cache of width {cos.shape[-1]} for {rot} rotated dims")
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    part = x[..., :rot]
    if interleaved:
        x1, x2 = part[..., 0::2], part[..., 1::2]
    else:
        x1, x2 = part[..., : rot // 2], part[..., rot // 2 :]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if interleaved:
        rotated = np.stack([real, imag], axis=-1).reshape(part.shape)
    else:
        rotated = np.concatenate([real, imag], axis=-1)
    y = np.concatenate([rotated, x[..., rot:]], axis=-1)
    y = y.transpose(0, 2, 1, 3) if X.ndim == 4 else y.reshape(X.shape)
    return y.astype(X.dtype)


# ----------------------------------------------------------------------------- losses


def _nll(log_prob: np.ndarray, target, weight, ignore_index, reduction: str, op: str) -> np.ndarray:
    """Negative log likelihood of the target classes (axis 1 of log_prob), weighted and reduced."""
    if reduction not in ("none", "sum", "mean"):
        raise unsupported(op, f"reduction={reduction!r}")
    target = np.asarray(target).astype(np.int64)
    keep = np.ones(target.shape, bool) if ignore_index is None else target != ignore_index
    # Ignored entries may hold any value (even out of range): read class 0 there, then drop it.
    safe = np.where(keep, target, 0)
    picked = np.take_along_axis(log_prob, safe[:, None], axis=1)[:, 0]
    w = keep.astype(log_prob.dtype)
    if weight is not None:
        w = w * np.asarray(weight).astype(log_prob.dtype)[safe]
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.sum(loss)
    return np.sum(loss) / np.sum(w)


@kernel("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(ctx, input, target, weight=None, *, ignore_index, reduction):
    X = np.asarray(input)
    log_prob = X.astype(_work_dtype(X.dtype))
    loss = _nll(log_prob, target, weight, ignore_index, reduction, "NegativeLogLikelihoodLoss")
    return np.asarray(loss).astype(X.dtype)


@kernel("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx, scores, labels, weights=None, *, ignore_index, reduction):
    X = np.asarray(scores)
    log_prob = _log_softmax(X.astype(_work_dtype(X.dtype)), 1)
    loss = _nll(log_prob, labels, weights, ignore_index, reduction, "SoftmaxCrossEntropyLoss")
    return np.asarray(loss).astype(X.dtype), log_prob.astype(X.dtype)
