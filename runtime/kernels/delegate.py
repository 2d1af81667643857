"""The CPU kernel of ``offload::Delegate``: it runs the delegate's fallback block."""

from __future__ import annotations

from . import kernel


@kernel("Delegate", domain="offload")
def delegate(ctx, *inputs, backend, processed, compile_specs, fallback, fp16_error=None):
    # The reference evaluator never calls a backend: the fallback is the partition as it was.
    return tuple(ctx.run_block(fallback, list(inputs)))
