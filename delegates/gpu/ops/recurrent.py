"""RNN, GRU and LSTM (float32, ONNX opsets 14 to 22): one input-projection GEMM, then a kernel
launch per time step (``kernels_cl/recurrent.cl``).

X W^T for every time step and direction is one ``linalg.GemmCall`` into a step scratch buffer
(cuBLAS on CUDA, matmul.cl elsewhere). Then come T step launches, recorded when the plan is
specialized (at init when its shapes are static, so T is known). Each runs both directions, one
work-item per (direction, batch, hidden unit), adding the biases and the recurrent product
h_{t-1} R^T to that projection and applying the gates; the state is kept in float32 scratch
buffers (two per state, read and written in turn), so fp16 storage rounds only Y, Y_h and Y_c.
GRU without linear_before_reset takes two launches per step, because every unit's candidate
reads the whole of r * h_{t-1}. Sizes, strides and activations are kernel arguments: one built
program serves every shape, and a plan whose sequence length or batch is symbolic records its
steps again for each shape it specializes to.

Supported: a symbolic sequence length and batch, directions forward / reverse / bidirectional,
layouts 0 and 1, the optional inputs B, sequence_lens (int32), initial_h, initial_c and P, any of
the outputs Y, Y_h, Y_c, clip, input_forget, linear_before_reset, and every activation ONNX lists
with its alpha / beta. Refused (``_check``, the op then runs on the CPU): shapes that do not fit
each other, a symbolic input or hidden size, empty tensors, activation lists of the wrong length
or with unknown names, Affine / ThresholdedRelu / ScaledTanh without explicit alpha / beta (ONNX
takes the operators' defaults, onnxruntime 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType, attributes_of

from ...backend import OpCapability, Support
from ..api import Buf, Builder, Scratch, float_options, fp16, source
from ..plan import MAX_ELEMENTS
from . import linalg

OPS = ("RNN", "GRU", "LSTM")
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
# Activation functions per direction, and their defaults (f, g, h as ONNX names them).
DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
# Slots of the kernels' ACT_ARGS: at most 2 directions x 3 functions, a 4-bit code each.
SLOTS = 6
# Lower-case name → (code of rnn_act in recurrent.cl, takes alpha, takes beta, default alpha,
# default beta). The defaults are those of the ONNX operators of the same name where onnxruntime
# agrees; None where they do not (Affine, ThresholdedRelu, ScaledTanh: onnxruntime takes 0), so a
# missing value is refused rather than guessed.
ACTIVATIONS = {
    "relu": (0, False, False, None, None),
    "tanh": (1, False, False, None, None),
    "sigmoid": (2, False, False, None, None),
    "affine": (3, True, True, None, None),
    "leakyrelu": (4, True, False, 0.01, None),
    "thresholdedrelu": (5, True, False, None, None),
    "scaledtanh": (6, True, True, None, None),
    "hardsigmoid": (7, True, True, 0.2, 0.5),
    "elu": (8, True, False, 1.0, None),
    "softsign": (9, False, False, None, None),
    "softplus": (10, False, False, None, None),
}

_TYPES = frozenset({DataType.FLOAT, DataType.INT32})  # int32: sequence_lens only (_geometry checks)
_COMMON = {"direction": tuple(DIRECTIONS), "layout": (0, 1)}
CAPS = {
    "RNN": OpCapability(_TYPES, max_rank=4, attributes=_COMMON),
    "GRU": OpCapability(_TYPES, max_rank=4, attributes={**_COMMON, "linear_before_reset": (0, 1)}),
    "LSTM": OpCapability(_TYPES, max_rank=4, attributes={**_COMMON, "input_forget": (0, 1)}),
}
MULTI_OUTPUT = OPS  # Y, Y_h (and Y_c), any of them absent


@dataclass(frozen=True)
class Geometry:
    """Sequence length T, batch N, input size I, hidden size H, directions D, gates G (T and N
    may be symbols at compile time; a launcher sees sizes)."""

    T: int | str | None
    N: int | str | None
    I: int
    H: int
    D: int
    G: int


def _fits(shape, expected) -> bool:
    """Whether ``shape`` can be ``expected``: equal where both dims are sizes (a symbolic or unknown
    dim, in a plan that specializes per input shape, is checked again by the launcher)."""
    return len(shape) == len(expected) and all(
        a == b for a, b in zip(shape, expected) if isinstance(a, int) and isinstance(b, int)
    )


def _geometry(op_type: str, attrs: dict, shapes: list, dtypes: list) -> Geometry | str:
    """The sizes of an op whose inputs (X, W, R, B, sequence_lens, initial_h, initial_c, P; None
    where absent) have ``shapes`` and ``dtypes`` (numpy names), or why they do not fit. The
    sequence length and batch may be symbols (str) or unknown (None) at compile time."""
    if len(shapes) > (8 if op_type == "LSTM" else 6):
        return f"has {len(shapes)} inputs"
    shapes = list(shapes) + [None] * (8 - len(shapes))
    dtypes = list(dtypes) + [None] * (8 - len(dtypes))
    direction, layout = attrs.get("direction", "forward"), attrs.get("layout", 0)
    if direction not in DIRECTIONS or layout not in (0, 1):
        return f"direction {direction!r}, layout {layout!r}"
    x, w, r = shapes[:3]
    if any(s is None or len(s) != 3 for s in (x, w, r)):
        return "with X, W or R absent or not of rank 3"
    T, N = (x[1], x[0]) if layout else (x[0], x[1])
    I, H, D, G = x[2], r[2], DIRECTIONS[direction], GATES[op_type]
    if not isinstance(I, int) or not isinstance(H, int):
        return f"with a symbolic input size or hidden size (X {list(x)}, R {list(r)})"
    hidden = attrs.get("hidden_size")
    if hidden is not None and hidden != H:
        return f"hidden_size {hidden} but R of shape {list(r)}"
    state = (N, D, H) if layout else (D, N, H)
    want = [(D, G * H, I), (D, G * H, H), (D, 2 * G * H), (N,), state, state, (D, 3 * H)]
    names = ["W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
    for name, s, t, expected in zip(names, shapes[1:], dtypes[1:], want):
        if s is None:
            continue
        if not _fits(s, expected):
            return f"{name} of shape {list(s)} (expected {list(expected)})"
        if t != ("int32" if name == "sequence_lens" else "float32"):
            return f"{name} of dtype {t}"
    if dtypes[0] != "float32":
        return f"X of dtype {dtypes[0]}"
    sizes = [d for d in (T, N, I, H) if isinstance(d, int)]
    if min(sizes) == 0:
        return "of an empty sequence, batch, input or hidden size"
    if len(sizes) == 4 and T * N * D * G * H > MAX_ELEMENTS:
        return f"whose input projection has more than {MAX_ELEMENTS} elements (kernels index with int32)"
    return Geometry(T, N, I, H, D, G)


def _activations(op_type: str, attrs: dict, D: int) -> list[tuple[int, float, float]] | str:
    """(code, alpha, beta) per direction and function, in the kernels' slot order, or why not.

    Alphas and betas are consumed in order by the functions that take them (ONNX, and
    onnxruntime). An RNN of one direction may list two equal functions: the schema default
    ['Tanh', 'Tanh'] names both directions of a bidirectional net, and onnxruntime takes the
    first."""
    F = len(DEFAULT_ACTIVATIONS[op_type])
    names = attrs.get("activations")
    if names is None:
        names = list(DEFAULT_ACTIVATIONS[op_type]) * D
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return f"activations {names!r}"
    if op_type == "RNN" and D == 1 and len(names) == 2 and names[0].lower() == names[1].lower():
        names = names[:1]
    if len(names) != F * D:
        return f"with {len(names)} activations for {D} direction(s) ({F} each)"
    alphas = list(attrs.get("activation_alpha") or [])
    betas = list(attrs.get("activation_beta") or [])
    bound = []
    for name in names:
        entry = ACTIVATIONS.get(name.lower())
        if entry is None:
            return f"activation {name!r}"
        code, takes_alpha, takes_beta, alpha, beta = entry
        if takes_alpha:
            alpha = alphas.pop(0) if alphas else alpha
        if takes_beta:
            beta = betas.pop(0) if betas else beta
        if (takes_alpha and alpha is None) or (takes_beta and beta is None):
            return (
                f"activation {name} without its activation_alpha / activation_beta "
                "(the default is ambiguous: ONNX's operator default, onnxruntime's 0)"
            )
        bound.append((code, float(alpha or 0.0), float(beta or 0.0)))
    return bound


def _check(op) -> Support | None:
    attrs = attributes_of(op)
    # A tensor of unknown rank is taken as the rank-3 tensor the op requires, its sizes unknown
    # (X's input size is W's): the launcher checks the shapes it is given.
    w = op.inputs[1] if len(op.inputs) > 1 else None
    x = (None, None, w.type.shape[-1] if w is not None and w.type.shape else None)
    # X, W, R, B, sequence_lens, initial_h, initial_c, P (W and R are weights: never unranked)
    required = [x, None, None, (None,) * 2, (None,), (None,) * 3, (None,) * 3, (None,) * 2]
    shapes = [
        None if v is None else tuple(v.type.shape) if v.type.shape is not None else required[k]
        for k, v in enumerate(op.inputs)
    ]
    dtypes = [np.dtype(v.type.dtype.numpy).name if v is not None else None for v in op.inputs]
    geo = _geometry(op.op_type, attrs, shapes, dtypes)
    if isinstance(geo, str):
        return Support(False, f"{op.op_type} {geo}")
    acts = _activations(op.op_type, attrs, geo.D)
    if isinstance(acts, str):
        return Support(False, f"{op.op_type} {acts}")
    return None


CHECKS = dict.fromkeys(OPS, _check)


def _launch(b: Builder, step: dict) -> None:
    op, attrs = step["type"], step["attributes"]
    ins = list(step["inputs"]) + [None] * (8 - len(step["inputs"]))
    outs = list(step["outputs"]) + [None] * (3 - len(step["outputs"]))

    def bad(what: str):
        return ModelFormatError(f"gpu backend: {op} '{step.get('name')}' {what}")

    shapes = [b.shape(v) if v is not None else None for v in step["inputs"]]
    dtypes = [b.dtype(v).name if v is not None else None for v in step["inputs"]]
    geo = _geometry(op, attrs, shapes, dtypes)
    if isinstance(geo, str):
        raise bad(geo)
    acts = _activations(op, attrs, geo.D)
    if isinstance(acts, str):
        raise bad(acts)
    if len(step["outputs"]) > (3 if op == "LSTM" else 2):
        raise bad(f"has {len(step['outputs'])} outputs")
    X, W, R, bias, lens, h0, c0, P = ins[:8]
    Y, Yh, Yc = outs[:3]
    T, N, I, H, D, G = geo.T, geo.N, geo.I, geo.H, geo.D, geo.G
    if not isinstance(T, int) or not isinstance(N, int):
        raise bad(f"with sequence length {T!r} and batch {N!r} not known")
    layout = attrs.get("layout", 0)
    i32, f32 = np.int32, np.float32
    dummy = Buf(X)  # fills the argument of an absent buffer, which the kernel then never touches

    # X W^T of every step as one GEMM: rows are X's own (t, b) rows, columns (d, g, j).
    xw = Scratch((2 if fp16(b) else 4) * T * N * D * G * H, "xw")
    run = getattr(b, "gemm", None) or (lambda g: linalg.gemm_kernel(b, g))
    run(linalg.GemmCall(T * N, D * G * H, I, X, 0, I, 1, W, 0, 1, I, xw, 0))

    xw_t, xw_b = (1, T) if layout else (N, 1)
    y_t, y_d, y_b = (D * H, H, T * D * H) if layout else (D * N * H, N * H, H)
    sd, sb = (H, D * H) if layout else (N * H, H)  # initial_h / Y_h element (d, b, 0)
    n = D * N * H
    program = b.program(source("recurrent.cl"), float_options(b))
    lens_args = [Buf(lens) if lens is not None else dummy, i32(lens is not None)]

    codes, alphas, betas = 0, [f32(0)] * SLOTS, [f32(0)] * SLOTS
    for k, (code, alpha, beta) in enumerate(acts):
        codes |= code << (4 * k)
        alphas[k], betas[k] = f32(alpha), f32(beta)
    clip = attrs.get("clip")
    gate_args = [i32(clip is not None), f32(clip if clip is not None else 0.0), i32(codes), *alphas, *betas]

    states = {"h": (h0, Yh)} | ({"c": (c0, Yc)} if op == "LSTM" else {})
    buffers = {s: [Scratch(4 * n, f"{s}0"), Scratch(4 * n, f"{s}1")] for s in states}
    for s, (init, _) in states.items():
        args = [Buf(init) if init is not None else dummy, i32(init is not None), buffers[s][0]]
        b.launch(program, "rnn_state_init", (n,), None, [*args, *(i32(v) for v in (D, N, H, sd, sb))])

    reverse0 = i32(attrs.get("direction") == "reverse")
    bias_args = [Buf(bias) if bias is not None else dummy, i32(bias is not None)]
    weights = [xw, i32(xw_t), i32(xw_b), Buf(R), *bias_args]
    y_args = [Buf(Y) if Y is not None else dummy, i32(Y is not None), i32(y_t), i32(y_d), i32(y_b)]
    h = buffers["h"]
    for s in range(T):
        head = [i32(T), i32(N), i32(H), i32(D), i32(s), reverse0, *lens_args, *weights]
        now, nxt = s % 2, (s + 1) % 2
        if op == "RNN":
            b.launch(program, "rnn_step", (n,), None, [*head, *gate_args, h[now], h[nxt], *y_args])
        elif op == "LSTM":
            c = buffers["c"]
            peep = [Buf(P) if P is not None else dummy, i32(P is not None)]
            forget = i32(attrs.get("input_forget", 0))
            args = [*head, *peep, forget, *gate_args, h[now], c[now], h[nxt], c[nxt], *y_args]
            b.launch(program, "lstm_step", (n,), None, args)
        elif attrs.get("linear_before_reset", 0):
            b.launch(program, "gru_step", (n,), None, [*head, *gate_args, h[now], h[nxt], *y_args])
        else:
            z, rh = Scratch(4 * n, "z"), Scratch(4 * n, "rh")
            b.launch(program, "gru_gates", (n,), None, [*head, *gate_args, h[now], z, rh])
            b.launch(program, "gru_state", (n,), None, [*head, *gate_args, h[now], z, rh, h[nxt], *y_args])

    for s, (_, out) in states.items():
        if out is not None:
            args = [buffers[s][T % 2], Buf(out), *(i32(v) for v in (T, D, N, H, sd, sb)), *lens_args]
            b.launch(program, "rnn_state_final", (n,), None, args)


LAUNCH = dict.fromkeys(OPS, _launch)
