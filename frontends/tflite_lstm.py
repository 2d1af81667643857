"""TFLite's UNIDIRECTIONAL_SEQUENCE_LSTM (what the converter writes for a Keras 2 LSTM layer).

Inputs, by position: 0 the sequence ([batch, time, input], or [time, batch, input] when
``time_major``); 1–4 input weights (input gate, forget, cell, output), 5–8 recurrent weights,
9–11 peephole weights (input, forget, output), 12–15 gate biases, 16 / 17 projection weights and
bias, 18 / 19 the output and cell state (variable tensors), 20–23 layer-norm coefficients. An
omitted input gate (1, 5, 12 absent) is CIFG: i = 1 - f.

One step, TFLite's way::

    i = σ(W_i x + R_i h + p_i ⊙ c + b_i)        f = σ(W_f x + R_f h + p_f ⊙ c + b_f)
    g = act(W_c x + R_c h + b_c)                c' = clip(f ⊙ c + i ⊙ g, cell_clip)
    o = σ(W_o x + R_o h + p_o ⊙ c' + b_o)       h' = clip(P (o ⊙ act(c')) + b_P, proj_clip)

Without cell clip, projection or layer norm this is ONNX's LSTM with its gates reordered (ONNX
stacks W, R and B as i, o, f, c, and the peepholes as i, o, f), ``input_forget`` for CIFG (ONNX
computes the input gate and derives forget = 1 - i, TFLite the reverse: its input-gate slot gets
the negated forget weights, as 1 - σ(z) = σ(-z)) and ``layout = 1`` for batch-major input. ONNX's ``clip`` bounds the gates' inputs, not the cell
state, so a cell clip (Keras's converted LSTMs carry 10) or a projection is written as a Loop over
the time steps with the step above as its body, counted so that the GPU backends can run it.
Layer norm and quantized (hybrid or integer) LSTMs are refused by name.

The two states are variable tensors: LiteRT keeps what one call leaves in them for the next (a
second call on the same input gives another answer). They import as function state, zeros in a
fresh or reset module, as the resource variables do (``tflite._Variables``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from offload.ir import Block, DataType, TensorType, Value
from offload.schemas.generated.tflite.ActivationFunctionType import ActivationFunctionType as Act
from offload.schemas.generated.tflite.TensorType import TensorType as TflType

from .tflite_node import INT64_MIN, Node, rule

ACTIVATIONS = {Act.TANH: "Tanh", Act.RELU: "Relu"}
INPUT_W, RECURRENT_W, PEEPHOLE, BIAS = (1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11), (12, 13, 14, 15)
PROJECTION_W, PROJECTION_B, OUTPUT_STATE, CELL_STATE = 16, 17, 18, 19
LAYER_NORM = (20, 21, 22, 23)


def _present(node: Node, i: int) -> bool:
    return i < len(node.inputs) and node.inputs[i] is not None


def _weights(node: Node, i: int, shape: tuple) -> np.ndarray:
    """Constant input ``i`` as float32 of ``shape``; zeros when it is omitted."""
    if not _present(node, i):
        return np.zeros(shape, np.float32)
    w = node.const(i).astype(np.float32)
    if w.shape != shape:
        raise node.fail(f"input {i} has shape {list(w.shape)}, not {list(shape)}")
    return w


@rule("UNIDIRECTIONAL_SEQUENCE_LSTM", version=4, inputs=1)
def unidirectional_sequence_lstm(node: Node) -> list:
    return [sequence_lstm(node, bool(node.opt("time_major")))]


@rule("LSTM", version=4, inputs=1)
def lstm(node: Node) -> list:
    """One step of the full LSTM kernel (the inputs of UNIDIRECTIONAL_SEQUENCE_LSTM, the input
    [batch, input]): a sequence of one step. The BASIC kernel and the four-output form of
    version 1 are refused."""
    if node.opt("kernel_type") != 0:
        raise node.unsupported("the BASIC LSTM kernel is not supported (only FULL)")
    if len(node.outputs) != 1:
        raise node.unsupported(f"{len(node.outputs)} outputs (the one-output form is supported)")
    x = node.one("Unsqueeze", [node.inputs[0], node.ints([1])])
    y = sequence_lstm(replace(node, inputs=[x, *node.inputs[1:]]), time_major=False)
    return [node.one("Squeeze", [y, node.ints([1])])]


# BIDIRECTIONAL_SEQUENCE_LSTM's inputs: 0 the sequence, 1–17 the forward cell (input, recurrent
# and peephole weights, biases, projection: UNIDIRECTIONAL_SEQUENCE_LSTM's 1–17), 18–34 the
# backward cell, 35 / 36 the forward output and cell state, 37 / 38 the backward ones, 39–47 an
# auxiliary input and its weights.
BIDIRECTIONAL_CELLS = ((1, (35, 36)), (18, (37, 38)))


@rule("BIDIRECTIONAL_SEQUENCE_LSTM", version=3, inputs=1)
def bidirectional_sequence_lstm(node: Node) -> list:
    """Two LSTMs: the forward one on the sequence, the backward one on the sequence reversed in
    time, its outputs reversed back; side by side on the last axis when merge_outputs."""
    if len(node.inputs) < 39:
        raise node.fail(f"has {len(node.inputs)} inputs, a bidirectional LSTM 39 or 48")
    if any(i < len(node.inputs) and node.inputs[i] is not None for i in range(39, 48)):
        raise node.unsupported("an auxiliary input is not supported")
    time_major = bool(node.opt("time_major"))
    time_axis = node.ints([0 if time_major else 1])

    def reverse(v):
        return node.one("Slice", [v, node.ints([-1]), node.ints([INT64_MIN]), time_axis, node.ints([-1])])

    outputs = []
    for first, (h, c) in BIDIRECTIONAL_CELLS:
        x = node.inputs[0] if first == 1 else reverse(node.inputs[0])
        picks = [0, *range(first, first + 17), h, c]
        cell = replace(
            node,
            inputs=[x, *(node.inputs[i] for i in picks[1:])],
            tensors=[node.tensors[i] for i in picks],
        )
        y = sequence_lstm(cell, time_major)
        outputs.append(y if first == 1 else reverse(y))
    if node.opt("merge_outputs"):
        return [node.one("Concat", outputs, {"axis": -1})]
    return outputs


def sequence_lstm(node: Node, time_major: bool):
    """The LSTM over the sequence at input 0 (UNIDIRECTIONAL_SEQUENCE_LSTM's inputs), its states
    updated; the output sequence."""
    if len(node.inputs) < 20:
        raise node.fail(f"has {len(node.inputs)} inputs, an LSTM 20 or 24")
    for i in (*INPUT_W[1:], *RECURRENT_W[1:], *BIAS[1:], OUTPUT_STATE, CELL_STATE):
        if not _present(node, i):
            raise node.fail(f"input {i} is omitted")
    if any(_present(node, i) for i in LAYER_NORM):
        raise node.unsupported("layer-normalized LSTM is not supported")
    for i, t in enumerate(node.tensors[:20]):
        if t is not None and t.get("type") != TflType.FLOAT32:
            raise node.unsupported(f"input {i} is not float32: quantized LSTMs are not supported")
    act = node.opt("fused_activation_function")
    if act not in ACTIVATIONS:
        raise node.unsupported(f"cell activation {act} (TANH and RELU are supported)")
    cifg = not _present(node, INPUT_W[0])
    if cifg and (_present(node, RECURRENT_W[0]) or _present(node, BIAS[0])):
        raise node.fail("the input gate has recurrent weights or a bias but no input weights")
    n_cell, n_input = node.shape(INPUT_W[1], 2)
    n_output = node.shape(RECURRENT_W[1], 2)[1]
    w = [_weights(node, i, (n_cell, n_input)) for i in INPUT_W]  # i, f, c, o
    r = [_weights(node, i, (n_cell, n_output)) for i in RECURRENT_W]
    b = [_weights(node, i, (n_cell,)) for i in BIAS]
    peepholes = [_present(node, i) for i in PEEPHOLE]
    if (any(peepholes) and not all(peepholes[1:])) or (peepholes[0] and cifg):
        raise node.fail("its peephole weights are neither all present nor all omitted")
    p = [_weights(node, i, (n_cell,)) for i in PEEPHOLE]  # i, f, o
    projection = _present(node, PROJECTION_W)
    if not projection and (n_output != n_cell or _present(node, PROJECTION_B)):
        raise node.fail(f"output size {n_output} differs from cell size {n_cell} without a projection")
    cell_clip, proj_clip = float(node.opt("cell_clip")), float(node.opt("proj_clip"))
    if cell_clip < 0 or proj_clip < 0:
        raise node.fail(f"negative clip (cell {cell_clip}, projection {proj_clip})")
    h0, c0 = node.inputs[OUTPUT_STATE], node.inputs[CELL_STATE]
    if cell_clip or projection:
        pw = _weights(node, PROJECTION_W, (n_output, n_cell)) if projection else None
        pb = _weights(node, PROJECTION_B, (n_output,)) if projection else None
        y, h, c = _step_loop(
            node,
            w,
            r,
            b,
            p if any(peepholes) else None,
            cifg,
            (pw, pb),
            act,
            cell_clip,
            proj_clip,
            time_major,
        )
    else:
        y, h, c = _onnx_lstm(node, w, r, b, p if any(peepholes) else None, cifg, act, time_major)
    node.imp.variables.assign_tensor(h0, h)
    node.imp.variables.assign_tensor(c0, c)
    return y


def _onnx_lstm(node: Node, w, r, b, p, cifg: bool, act: int, time_major: bool):
    """ONNX LSTM, gates i, o, f, c; its Y without the direction axis, and the final states."""
    order = (0, 3, 1, 2)  # TFLite's i, f, c, o → ONNX's i, o, f, c
    if cifg:
        # ONNX's input_forget computes the input gate and takes forget = 1 - i; TFLite's CIFG
        # computes the forget gate and takes i = 1 - f. Since 1 - σ(z) = σ(-z), ONNX's input gate
        # on the negated forget weights is TFLite's i, and its 1 - i TFLite's f.
        w, r, b = [-w[1], *w[1:]], [-r[1], *r[1:]], [-b[1], *b[1:]]
        p = None if p is None else [-p[1], *p[1:]]
    W = np.concatenate([w[k] for k in order])[None]
    R = np.concatenate([r[k] for k in order])[None]
    B = np.concatenate([*(b[k] for k in order), np.zeros(4 * len(b[0]), np.float32)])[None]
    layout = 0 if time_major else 1
    state_axis = 0 if time_major else 1  # ONNX's initial_h: [dirs, batch, H] or [batch, dirs, H]
    h0 = node.one("Unsqueeze", [node.inputs[OUTPUT_STATE], node.ints([state_axis])])
    c0 = node.one("Unsqueeze", [node.inputs[CELL_STATE], node.ints([state_axis])])
    inputs = [node.inputs[0], node.imp.const(W), node.imp.const(R), node.imp.const(B), None, h0, c0]
    if p is not None:
        inputs.append(node.imp.const(np.concatenate([p[0], p[2], p[1]])[None]))  # i, o, f
    name = ACTIVATIONS[act]
    attrs = {
        "hidden_size": len(b[0]),
        "layout": layout,
        "activations": ["Sigmoid", name, name],
        "input_forget": int(cifg),
    }
    y, yh, yc = node.op("LSTM", inputs, attrs, 3)
    y = node.one("Squeeze", [y, node.ints([1 if time_major else 2])])
    h = node.one("Squeeze", [yh, node.ints([state_axis])])
    c = node.one("Squeeze", [yc, node.ints([state_axis])])
    return y, h, c


def _step_loop(
    node: Node, w, r, b, p, cifg: bool, proj, act: int, cell_clip: float, proj_clip: float, time_major: bool
):
    """A Loop over time steps, the step of the module docstring as its body; Y a scan output."""
    imp = node.imp

    x = node.inputs[0]
    time_axis = 0 if time_major else 1
    steps = node.one("Gather", [node.one("Shape", [x]), node.ints(time_axis)], {"axis": 0})
    h0, c0 = node.inputs[OUTPUT_STATE], node.inputs[CELL_STATE]
    outer = imp.block
    body = imp.block = Block(name=imp.namer.fresh(f"lstm_{node.index}_step"))
    try:
        t = Value(imp.namer.fresh("time_step"), TensorType(DataType.INT64, ()))
        cond = Value(imp.namer.fresh("cond_in"), TensorType(DataType.BOOL, ()))
        h = Value(imp.namer.fresh("h_in"), None)
        c = Value(imp.namer.fresh("c_in"), None)
        body.inputs = [t, cond, h, c]
        xt = node.one("Gather", [x, t], {"axis": time_axis})
        W = imp.const(np.concatenate(w).T.copy())  # [input, 4·cell], gates i, f, c, o
        R = imp.const(np.concatenate(r).T.copy())
        z = node.one(
            "Add",
            [
                node.one("Add", [node.one("MatMul", [xt, W]), node.one("MatMul", [h, R])]),
                imp.const(np.concatenate(b)),
            ],
        )
        zi, zf, zc, zo = node.op("Split", [z], {"axis": -1, "num_outputs": 4}, 4)
        if p is not None:
            zf = node.one("Add", [zf, node.one("Mul", [c, imp.const(p[1])])])
        f = node.one("Sigmoid", [zf])
        if cifg:
            i = node.one("Sub", [node.scalar(1.0), f])
        else:
            if p is not None:
                zi = node.one("Add", [zi, node.one("Mul", [c, imp.const(p[0])])])
            i = node.one("Sigmoid", [zi])
        g = node.one(ACTIVATIONS[act], [zc])
        c1 = node.one("Add", [node.one("Mul", [f, c]), node.one("Mul", [i, g])])
        if cell_clip:
            c1 = node.one("Clip", [c1, node.scalar(-cell_clip), node.scalar(cell_clip)])
        if p is not None:
            zo = node.one("Add", [zo, node.one("Mul", [c1, imp.const(p[2])])])
        h1 = node.one("Mul", [node.one("Sigmoid", [zo]), node.one(ACTIVATIONS[act], [c1])])
        pw, pb = proj
        if pw is not None:
            h1 = node.one("Add", [node.one("MatMul", [h1, imp.const(pw.T.copy())]), imp.const(pb)])
            if proj_clip:
                h1 = node.one("Clip", [h1, node.scalar(-proj_clip), node.scalar(proj_clip)])
        keep = node.one("Identity", [cond])
        h_out, c_out = node.one("Identity", [h1]), node.one("Identity", [c1])
        body.outputs = [keep, h_out, c_out, node.one("Identity", [h1])]
    finally:
        imp.block = outer
    h, c, ys = node.op("Loop", [steps, imp.const(np.array(True)), h0, c0], {"body": body}, 3)
    y = ys if time_major else node.one("Transpose", [ys], {"perm": [1, 0, 2]})
    return y, h, c
