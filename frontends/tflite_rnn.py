"""TFLite's fully connected recurrent cells: RNN (one step), UNIDIRECTIONAL_SEQUENCE_RNN and
BIDIRECTIONAL_SEQUENCE_RNN.

One step is ``h' = act(W x + R h + b)``, ONNX RNN's step with one bias (ONNX adds W's and R's
biases: R's is zero here). RNN is that step written out (MatMul, Add, the activation); the
sequence operators are ONNX RNN, ``layout = 1`` for batch-major input, ``direction =
bidirectional`` for the two-way one (its backward half reads the sequence from the end, as
TFLite's does). TFLite's activations TANH and RELU are ONNX's Tanh and Relu and NONE is Affine(1,
0); the sequence operators refuse RELU6 and RELU_N1_TO_1 (no ONNX RNN activation), RNN takes
any fused activation. Quantized (hybrid) cells are refused by name.

The hidden states are variable tensors that LiteRT keeps between calls; they import as function
state, as the LSTM's do (``tflite._Variables``). Inputs by position: RNN and
UNIDIRECTIONAL_SEQUENCE_RNN 0 the input, 1 W [units, input], 2 R [units, units], 3 bias, 4 the
hidden state; BIDIRECTIONAL_SEQUENCE_RNN 0 the input, 1–4 the forward W, R, bias and state, 5–8
the backward ones, 9–11 an auxiliary input and its weights (refused).
"""

from __future__ import annotations

import numpy as np

from offload.schemas.generated.tflite.ActivationFunctionType import ActivationFunctionType as Act
from offload.schemas.generated.tflite.TensorType import TensorType as TflType

from .tflite_node import Node, rule

ONNX_ACTIVATIONS = {Act.TANH: ("Tanh", None), Act.RELU: ("Relu", None), Act.NONE: ("Affine", (1.0, 0.0))}


def _cell(node: Node, first: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The constant float32 W, R and bias at inputs ``first`` … ``first + 2``."""
    for i in range(first, first + 4):
        t = node.tensors[i] if i < len(node.tensors) else None
        if t is None:
            raise node.fail(f"input {i} is omitted")
        if t.get("type") != TflType.FLOAT32:
            raise node.unsupported(f"input {i} is not float32: quantized RNNs are not supported")
    w, r, b = (node.const(i).astype(np.float32) for i in range(first, first + 3))
    units = w.shape[0] if w.ndim == 2 else -1
    if w.ndim != 2 or r.shape != (units, units) or b.shape != (units,):
        raise node.fail(
            f"weights {list(w.shape)}, {list(r.shape)} and bias {list(b.shape)} do not fit one cell"
        )
    return w, r, b


def _activation_attrs(node: Node, directions: int) -> dict:
    act = node.opt("fused_activation_function")
    if act not in ONNX_ACTIVATIONS:
        raise node.unsupported(f"activation {act} (TANH, RELU and NONE are supported)")
    name, affine = ONNX_ACTIVATIONS[act]
    attrs = {"activations": [name] * directions}
    if affine is not None:
        attrs["activation_alpha"] = [affine[0]] * directions
        attrs["activation_beta"] = [affine[1]] * directions
    return attrs


@rule("RNN", version=3, inputs=5)
def rnn(node: Node) -> list:
    w, r, b = _cell(node, 1)
    x, h = node.inputs[0], node.inputs[4]
    z = node.one("Add", [node.one("MatMul", [x, node.imp.const(w.T.copy())]), node.imp.const(b)])
    z = node.one("Add", [z, node.one("MatMul", [h, node.imp.const(r.T.copy())])])
    y = node.activation(z, node.opt("fused_activation_function"))
    node.imp.variables.assign_tensor(h, y)
    return [node.one("Identity", [y])]


def _onnx_rnn(node: Node, cells: list, states: list, time_major: bool) -> tuple:
    """ONNX RNN over input 0 with one cell per direction; Y as [time, dirs, batch, units] or
    [batch, time, dirs, units], and the final states, one per direction."""
    dirs = len(cells)
    units = cells[0][0].shape[0]
    w = node.imp.const(np.stack([c[0] for c in cells]))
    r = node.imp.const(np.stack([c[1] for c in cells]))
    bias = node.imp.const(np.stack([np.concatenate([c[2], np.zeros_like(c[2])]) for c in cells]))
    state_axis = 0 if time_major else 1  # initial_h: [dirs, batch, H] or [batch, dirs, H]
    h0 = [node.one("Unsqueeze", [h, node.ints([state_axis])]) for h in states]
    h0 = h0[0] if dirs == 1 else node.one("Concat", h0, {"axis": state_axis})
    attrs = {
        "hidden_size": units,
        "layout": 0 if time_major else 1,
        "direction": "forward" if dirs == 1 else "bidirectional",
        **_activation_attrs(node, dirs),
    }
    y, yh = node.op("RNN", [node.inputs[0], w, r, bias, None, h0], attrs, 2)
    if dirs == 1:
        return y, [node.one("Squeeze", [yh, node.ints([state_axis])])]
    parts = node.op("Split", [yh], {"axis": state_axis, "num_outputs": 2}, 2)
    return y, [node.one("Squeeze", [p, node.ints([state_axis])]) for p in parts]


@rule("UNIDIRECTIONAL_SEQUENCE_RNN", version=3, inputs=5)
def unidirectional_sequence_rnn(node: Node) -> list:
    time_major = bool(node.opt("time_major"))
    y, (h,) = _onnx_rnn(node, [_cell(node, 1)], [node.inputs[4]], time_major)
    node.imp.variables.assign_tensor(node.inputs[4], h)
    return [node.one("Squeeze", [y, node.ints([1 if time_major else 2])])]


@rule("BIDIRECTIONAL_SEQUENCE_RNN", version=3, inputs=9)
def bidirectional_sequence_rnn(node: Node) -> list:
    if any(i < len(node.inputs) and node.inputs[i] is not None for i in (9, 10, 11)):
        raise node.unsupported("an auxiliary input is not supported")
    time_major = bool(node.opt("time_major"))
    states = [node.inputs[4], node.inputs[8]]
    y, finals = _onnx_rnn(node, [_cell(node, 1), _cell(node, 5)], states, time_major)
    for read, new in zip(states, finals):
        node.imp.variables.assign_tensor(read, new)
    dirs_axis = 1 if time_major else 2
    if node.opt("merge_outputs"):  # forward and backward units side by side
        if time_major:
            y = node.one("Transpose", [y], {"perm": [0, 2, 1, 3]})
        shape = node.one("Concat", [node.one("Shape", [y], {"end": 2}), node.ints([-1])], {"axis": 0})
        return [node.one("Reshape", [y, shape])]
    halves = node.op("Split", [y], {"axis": dirs_axis, "num_outputs": 2}, 2)
    return [node.one("Squeeze", [part, node.ints([dirs_axis])]) for part in halves]
