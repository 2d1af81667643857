"""onnxruntime's contrib operators (domain ``com.microsoft``) that keep arithmetic of their own:
their schemas and type inference.

Most contrib operators are rewritten at import into ONNX operators (frontends/onnx_contrib*.py).
The ones here round in a way no chain of ONNX operators reproduces at a reasonable cost, so they
stay one operation with a CPU kernel (runtime/kernels/recurrent_quantized.py for
DynamicQuantizeLSTM, runtime/kernels/linalg.py for Inverse, which no ONNX operator computes); the
GPU backends take default-domain ops only and leave them to the CPU.
"""

from __future__ import annotations

from .infer_dims import _dtype, _shape, _tt
from .infer_nn import _recurrent
from .registry import inference, parse_schema_line, register, register_shape_rules

DOMAIN = "com.microsoft"

_LSTM_ATTRS = (
    "activation_alpha: floats, activation_beta: floats, activations: strs, clip: float, "
    "direction: str = 'forward', hidden_size: int!, input_forget: int = 0"
)

SCHEMAS = f"""
DynamicQuantizeLSTM(X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, W_scale, W_zero_point, R_scale, R_zero_point) -> Y?, Y_h?, Y_c?  | {_LSTM_ATTRS}  @1
Inverse(X) -> Y  @1
"""

for _line in SCHEMAS.strip().splitlines():
    register(parse_schema_line(DOMAIN, _line))

# Output shapes from input shapes alone (sequence_lens' values shape nothing), as for LSTM.
register_shape_rules(DOMAIN, frozenset({"DynamicQuantizeLSTM", "Inverse"}), {})


@inference("DynamicQuantizeLSTM", domain=DOMAIN)
def _dynamic_quantize_lstm(op, attrs):
    """LSTM's shapes: Y [seq, directions, batch, hidden], Y_h and Y_c [directions, batch, hidden]."""
    return _recurrent(op, attrs)


@inference("Inverse", domain=DOMAIN)
def _inverse(op, attrs):
    """The inverse of each square matrix of X [..., n, n]: X's type and shape."""
    return [_tt(_dtype(op, 0), _shape(op, 0))]
