"""TFLite custom operators: a rule the user registers for a custom code.

A custom operator (``BuiltinOperator.CUSTOM`` with a ``custom_code``) has no meaning offload could
know; without a rule it is refused with an ``UnsupportedOpError`` naming its code. A rule is a
function ``rule(node) -> list[Value]`` like the builtin ones (``tflite_node.Node``: ``node.inputs``,
``node.shape(i)``, ``node.custom_options`` — the operator's raw option bytes, a flexbuffer for
most converters —, ``node.op(...)`` / ``node.one(...)`` to add IR ops), returning one value per
output::

    from offload.frontends.tflite import register_custom_op

    def scaled_softplus(node):
        (scale,) = struct.unpack("<f", node.custom_options)
        return node.op("Softplus", [node.one("Mul", [node.inputs[0], node.scalar(scale)])])

    register_custom_op("ScaledSoftplus", scaled_softplus)

Two ways to give the operator its meaning:

- **IR ops** (above): the custom operator becomes ordinary ONNX-semantics ops at import. Nothing
  of the rule is needed after import: the program saves to a ``.pte``, loads and runs anywhere,
  and the GPU backends take the ops they support.
- **A numpy kernel**: the rule emits one op of the user's own domain
  (``node.op("ScaledSoftplus", inputs, {"scale": scale}, domain="com.example")``), given an IR
  schema (``offload.ir.register(parse_schema_line("com.example", "ScaledSoftplus(x) -> y |
  scale: float = 1.0 @1"))`` from ``offload.ir.registry``, with an ``infer`` function to type its
  outputs), which lays out its inputs and attributes in a ``.pte``, and a CPU kernel
  (``offload.runtime.kernels.kernel("ScaledSoftplus", domain="com.example")`` on
  ``fn(ctx, *inputs, **attributes)``). The ``.pte`` stores the op by domain and name, not the
  kernel's code: a process that loads and runs it must register the same schema and kernel
  first. Such an op runs on the CPU only.

Registration is per process and applies to every later import; registering a code again
replaces its rule.
"""

from __future__ import annotations

from collections.abc import Callable

from .tflite_node import ARITY, RULES, VERSIONS


def custom_key(code: str) -> str:
    """The operator name the importer gives custom code ``code`` (as errors name it)."""
    return f"CUSTOM '{code}'"


def register_custom_op(code: str, rule: Callable) -> None:
    """Translate TFLite custom operator ``code`` with ``rule(node) -> list[Value]``."""
    if not isinstance(code, str) or not code:
        raise ValueError(f"a custom code is a non-empty string, not {code!r}")
    if not callable(rule):
        raise TypeError(f"the rule for custom code {code!r} is not callable")
    key = custom_key(code)
    RULES[key] = rule
    VERSIONS[key] = 0
    ARITY[key] = 0


def unregister_custom_op(code: str) -> None:
    """Forget the rule of custom code ``code`` (it is refused again)."""
    key = custom_key(code)
    for table in (RULES, VERSIONS, ARITY):
        table.pop(key, None)
