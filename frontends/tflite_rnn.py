"""TFLite's fully connected recurrent cells: RNN (one step), UNIDIRECTIONAL_SEQUENCE_RNN and
BIDIRECTIONAL_SEQUENCE_RNN; and SVDF, a filter over a memory of past steps.

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


@rule("SVDF", version=4, inputs=3)
def svdf(node: Node) -> list:
    """A singular-value-decomposition filter over the last ``memory`` steps. Inputs: 0 the input
    [batch, input], 1 the feature weights [filters, input], 2 the time weights [filters, memory],
    3 an optional bias [units], 4 the state [batch, filters · memory] (a variable tensor). Each
    call shifts every filter's memory one step (the oldest dropped), appends the filter's
    response to the input, weights the memory by time, sums each unit's ``rank`` filters, adds
    the bias and applies the fused activation."""
    if len(node.inputs) < 5 or node.inputs[4] is None:
        raise node.fail("has no state (input 4)")
    for i in (0, 1, 2):
        if node.tensors[i].get("type") != TflType.FLOAT32:
            raise node.unsupported(f"input {i} is not float32: quantized SVDFs are not supported")
    filters, _ = node.shape(1, 2)
    memory = node.shape(2, 2)[1]
    rank = int(node.opt("rank"))
    if rank < 1 or filters % rank or node.shape(2, 2)[0] != filters:
        raise node.fail(f"{filters} filters, time weights {list(node.shape(2))} and rank {rank} do not fit")
    units = filters // rank
    x, state = node.inputs[0], node.inputs[4]
    feature = node.one("MatMul", [x, permuted_const(node, 1)])  # [batch, filters]
    memory_now = node.one("Reshape", [state, node.ints([0, filters, memory])])
    kept = node.one("Slice", [memory_now, node.ints([1]), node.ints([memory]), node.ints([2])])
    memory_next = node.one("Concat", [kept, node.one("Unsqueeze", [feature, node.ints([2])])], {"axis": 2})
    weighted = node.one("Mul", [memory_next, node.imp.const(node.const(2).astype(np.float32))])
    per_filter = node.one("ReduceSum", [weighted, node.ints([2])], {"keepdims": 0})
    grouped = node.one("Reshape", [per_filter, node.ints([0, units, rank])])
    y = node.one("ReduceSum", [grouped, node.ints([2])], {"keepdims": 0})
    if len(node.inputs) > 3 and node.inputs[3] is not None:
        y = node.one("Add", [y, node.inputs[3]])
    node.imp.variables.assign_tensor(
        state, node.one("Reshape", [memory_next, node.ints([0, filters * memory])])
    )
    return [node.activation(y)]


def permuted_const(node: Node, i: int):
    """Constant input ``i`` (a 2-D weight) transposed."""
    return node.imp.const(np.ascontiguousarray(node.const(i).astype(np.float32).T))
