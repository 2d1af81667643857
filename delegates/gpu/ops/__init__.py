"""The op table of the GPU backends, gathered from one module per op family.

Each family module declares, as data, what it takes and how it runs it:
``CAPS`` (op type → ``OpCapability``), ``CHECKS`` (op type → ``check(op) -> Support | None``,
the limits a capability row cannot express; None means no objection), ``LAUNCH`` (plan step type
→ ``launch(builder, step)``) and optionally ``MULTI_OUTPUT`` (op types with several outputs). Which
inputs the runtime reads on the host when it specializes is one table for all families
(``gpu/host.py``, from ``ir.SHAPE_FROM_VALUES``).
Family modules import neither pyopencl nor CuPy: the compile half reads CAPS/CHECKS, the runtime
halves read LAUNCH.
"""

from __future__ import annotations

from . import (
    attention,
    cast,
    constant,
    conv,
    elementwise,
    generate,
    indexing,
    layout,
    linalg,
    loss,
    norm,
    onehot,
    pool,
    quantize,
    recurrent,
    reduce,
    scan,
    scatter,
    topk,
)

FAMILIES = (
    elementwise,
    linalg,
    conv,
    pool,
    norm,
    reduce,
    layout,
    indexing,
    constant,
    recurrent,
    cast,
    generate,
    scan,
    attention,
    loss,
    topk,
    scatter,
    onehot,
    quantize,
)

CAPABILITIES = {op: cap for f in FAMILIES for op, cap in f.CAPS.items()}
CHECKS = {op: check for f in FAMILIES for op, check in f.CHECKS.items()}
LAUNCH = {step: fn for f in FAMILIES for step, fn in f.LAUNCH.items()}
MULTI_OUTPUT = frozenset(op for f in FAMILIES for op in getattr(f, "MULTI_OUTPUT", ()))
ELEMENTWISE = elementwise.ELEMENTWISE
