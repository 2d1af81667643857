"""Running passes: in order, optionally to a fixed point, with per-pass op counts and time.

With ``verify=True`` (tests) or ``OFFLOAD_VERIFY_PASSES=1`` in the environment (debug mode)
the program is verified after every pass, so a broken rewrite is caught at the pass that made it.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field

from offload.errors import VerificationError
from offload.ir import Program, verify

from .registry import resolve

# The default pipeline: cleanup first (folding makes patterns visible), fusions, cleanup after.
DEFAULT: tuple[str, ...] = (
    # float16 programs (Core ML's default precision) compute in float32, as the GPU backends do
    "quantization::fp16_compute_in_fp32",
    "cleanup::const_elimination",
    # after the folding that makes a shape test's condition a constant; its types then help all below
    "cleanup::inline_constant_if",
    "cleanup::noop_elimination",
    "cleanup::dead_code_elimination",
    # a branch's or body's weights in the top block: the GPU backends take them from there
    "cleanup::hoist_nested_constants",
    "cleanup::const_deduplication",
    "cleanup::remove_redundant_ops",
    "cleanup::loop_invariant_elimination",
    "cleanup::fuse_reduce_mean",
    "optimize_elementwise_binary::select_optimization",
    "optimize_quantization::dequantize_quantize_pair_elimination",
    "optimize_quantization::int_op_canonicalization",
    "optimize_quantization::nullify_redundant_quantization_zero_point",
    "optimize_tensor_operation::replace_stack_reshape",
    "optimize_tensor_operation::use_reflection_padding",
    "optimize_tensor_operation::concat_to_pixel_shuffle",
    "optimize_tensor_operation::fuse_onehot_matmul_to_gather",
    "optimize_tensor_operation::slices_concat_to_scatter",
    "optimize_repeat_ops::merge_consecutive_reshapes",
    "optimize_repeat_ops::merge_consecutive_transposes",
    "optimize_repeat_ops::keep_reduced_dims",
    # a channels-last (TFLite) graph's layout-free ops move to the side of its convolutions
    "optimize_repeat_ops::transpose_regions",
    "optimize_repeat_ops::reduce_transposes",
    "optimize_repeat_ops::unit_axis_moves",
    "optimize_repeat_ops::merge_consecutive_relus",
    "optimize_repeat_ops::merge_consecutive_paddings",
    "optimize_repeat_ops::cast_optimization",
    "optimize_conv::fuse_conv_batchnorm",
    "optimize_conv::fuse_batchnorm_conv",
    "optimize_conv::fuse_conv_bias",
    "optimize_conv::fuse_conv_scale",
    "optimize_conv::fuse_pad_conv",
    "optimize_conv::compose_conv1d",
    "optimize_activation::fuse_gelu_exact",
    "optimize_activation::fuse_gelu_tanh_approximation",
    "optimize_activation::fuse_leaky_relu",
    "optimize_activation::fuse_hard_swish",
    "optimize_activation::fuse_prelu",
    "optimize_normalization::fuse_layernorm_or_instancenorm",
    # after the norm and conv fusions, which read the same Mul / Add as their gamma / beta or scale
    "optimize_elementwise_binary::fuse_elementwise_to_batchnorm",
    "optimize_linear::fuse_transpose_matmul",
    "optimize_linear::fuse_matmul_weight_bias",
    "optimize_linear::fuse_linear_bias",
    "optimize_elementwise_binary::divide_to_multiply",
    "cleanup::dead_code_elimination",
    # last: values made close to their first reader live shortest in the memory plan
    "cleanup::topological_reorder",
)

ENV_VERIFY = "OFFLOAD_VERIFY_PASSES"
MAX_ROUNDS = 8  # a fixed point is normally reached in two or three rounds


@dataclass
class PassRecord:
    """What one pass did in one round: whether it changed the program, op counts, time."""

    name: str
    round: int
    changed: bool
    seconds: float
    before: Counter = field(default_factory=Counter)
    after: Counter = field(default_factory=Counter)

    def delta(self) -> dict[str, int]:
        """Op type → change in count (only the types that changed)."""
        keys = set(self.before) | set(self.after)
        return {k: self.after[k] - self.before[k] for k in sorted(keys) if self.after[k] != self.before[k]}


def op_counts(program: Program) -> Counter:
    """Op type → how many ops of it the program has, nested blocks included."""
    counts: Counter = Counter()
    for fn in program.functions.values():
        for op in fn.body.walk():
            counts[op.qualified_type] += 1
    return counts


def run_passes(
    program: Program,
    names: list[str] | tuple[str, ...],
    *,
    fixed_point: bool = False,
    verify_each: bool | None = None,
) -> list[PassRecord]:
    """Run the named passes on ``program`` in place, in order; with ``fixed_point``, repeat the
    list until a round changes nothing (at most MAX_ROUNDS). Returns one record per pass run."""
    fns = [(name, resolve(name)) for name in names]  # unknown names fail before anything runs
    if verify_each is None:
        verify_each = os.environ.get(ENV_VERIFY, "") not in ("", "0")
    records: list[PassRecord] = []
    for round_ in range(1, (MAX_ROUNDS if fixed_point else 1) + 1):
        any_change = False
        for name, fn in fns:
            before = op_counts(program)
            start = time.perf_counter()
            changed = bool(fn(program))
            seconds = time.perf_counter() - start
            if verify_each:
                try:
                    verify(program)
                except VerificationError as e:
                    raise VerificationError(f"after pass {name}: {e}") from e
            records.append(PassRecord(name, round_, changed, seconds, before, op_counts(program)))
            any_change |= changed
        if not any_change:
            break
    return records
