"""Load-time fusions of the CPU executor: runs of prepared steps made one call."""

from __future__ import annotations

import numpy as np

from offload.ir import TensorType

from .pte_values import value_type
from .steps import (
    MethodState,
    _FusedAway,
    _JumpStep,
    _KernelChain,
    _KernelPair,
    _KernelStep,
    _PreparedStep,
    _ShuffleSlices,
)


def _fusion_context(m: MethodState, steps: list) -> tuple[dict[int, int], set[int], set[int]]:
    """What a load-time fusion checks: how many steps read each slot, the method's results, and
    the steps jumps land on."""
    readers: dict[int, int] = {}
    for step in steps:
        for slot in step.info().reads:
            readers[slot] = readers.get(slot, 0) + 1
    return readers, set(m._output_slots), {s.dest for s in steps if isinstance(s, _JumpStep)}


def _fuse_epilogues(m: MethodState, steps: list) -> None:
    """Pair a prepared Conv with the prepared elementwise ops right after it (Relu, Clip,
    HardSwish, HardSigmoid, LeakyRelu, Max or Min with a one-element operand: ``conv._Epilogue``; a chain
    of them, as Conv → LeakyRelu → Max, one after another), and a prepared Add of operands of
    its result's shape with the Relu, PRelu or LeakyRelu after it (``add_prepared``: one
    compiled pass; any prepared call with a ``with_epilogue`` takes part), where each op is
    the only reader of the conv's result, which is not a result of the method, and the op is
    no jump's target: the conv's
    plan applies the op to each part of its output as it writes it, into the op's arena view
    (``_ConvCall.with_epilogue``), and the op's own step runs nothing (``_FusedAway``). The
    conv's result is then never written: nothing reads it. Only the CPU executor pairs them;
    the graph and the .pte keep both ops. The op's other inputs (Clip's bounds) must be
    constants, so that no arena view the conv writes is one they are read from. ``steps`` are the
    method's, or a shape specialization's (``_ShapeSpecialization``), changed in place."""
    readers, results, targets = _fusion_context(m, steps)
    pc = 0
    while pc < len(steps) - 1:
        q = pc + 1  # past the ops fused already: a fused step takes the op after them too
        while q < len(steps) - 1 and type(steps[q]) is _FusedAway:
            q += 1
        conv, op = steps[pc], steps[q]
        pc += 1
        if type(conv) is not _PreparedStep or type(op) is not _PreparedStep:
            continue
        if not isinstance(op.kernel, _KernelStep):  # a fused step already (a specialization's copy)
            continue
        with_epilogue = getattr(conv.call, "with_epilogue", None)
        mid, extras = conv.out_slot, op.in_slots[1:]
        if (
            with_epilogue is None
            or not op.in_slots
            or op.in_slots[0] != mid
            or readers.get(mid) != 1
            or mid in results
            or any(p in targets for p in range(pc, q + 1))
            or not all(i and m._planned[i] is None and type(m._initial[i]) is np.ndarray for i in extras)
        ):
            continue
        domain, _, op_type = op.kernel.op_name.partition("::")
        specs = [(m._initial[i].dtype, m._initial[i].shape) for i in extras]
        call = (
            with_epilogue(op_type, op.kernel.attrs, len(conv.in_slots), specs) if domain == "onnx" else None
        )
        if call is None:
            continue
        fused = _PreparedStep()
        fused.call, fused.out_slot = call, op.out_slot
        fused.kernel = _KernelPair(conv.kernel, op.kernel)
        fused.in_slots = fused.kernel.in_slots
        steps[pc - 1] = fused
        steps[q] = away = _FusedAway()
        away.kernel = op.kernel
        pc -= 1  # the fused step again: its result may have an op of its own after it


def _fuse_depthwise_pointwise(m: MethodState, steps: list) -> None:
    """Make a depthwise Conv and the pointwise Conv that alone reads its result one prepared call
    (``conv._ConvChain``; each may carry its epilogue, ``_fuse_epilogues`` runs first):

        d = Conv(x, w1, b1, group=C)   [then Relu / Clip / HardSwish / HardSigmoid, fused]
        y = Conv(d, w2, b2)            1 x 1 [then its epilogue op, fused]

    becomes one step at the first conv's place that writes y (the second conv's step runs
    nothing, ``_FusedAway``): the pointwise product reads the depthwise sums channels-last where
    the first conv's plan made them, so that d is never copied out (nor written). Only where the
    first conv takes the ``last`` path (or ``rows`` at stride 1), d has one reader, the second
    conv, as its input, is no result of the method, and no jump lands between the two; the
    second conv's other inputs are constants (no arena view the chain writes is one they are
    read from). Only the CPU executor fuses them, in the method's own steps and in shape specializations
    alike (the fused step reads what the first conv read and writes y, which nothing between the
    two reads or writes); the graph and the .pte keep both."""
    from .kernels.conv import _ConvChain

    readers, results, targets = _fusion_context(m, steps)
    for pc, first in enumerate(steps):
        if type(first) is not _PreparedStep:
            continue
        q = pc + 1
        while q < len(steps) and type(steps[q]) is _FusedAway:
            q += 1
        if q >= len(steps) or type(steps[q]) is not _PreparedStep:
            continue
        second, mid = steps[q], first.out_slot
        if (
            not _ConvChain.fits(first.call, second.call)
            or second.in_slots[0] != mid
            or readers.get(mid) != 1
            or mid in results
            or any(p in targets for p in range(pc + 1, q + 1))
            or not all(
                i and m._planned[i] is None and type(m._initial[i]) is np.ndarray for i in second.in_slots[1:]
            )
        ):
            continue
        fused = _PreparedStep()
        fused.call = _ConvChain(first.call, second.call, len(first.in_slots))
        fused.kernel = _KernelChain([first.kernel, second.kernel])
        fused.in_slots = list(first.in_slots) + list(second.in_slots[1:])
        fused.out_slot = second.out_slot
        steps[pc] = fused
        steps[q] = away = _FusedAway()
        away.kernel = second.kernel


def _step_kernel(step) -> _KernelStep | None:
    """The kernel step of a kernel or prepared step; None for any other step."""
    if type(step) is _PreparedStep:
        return step.kernel if type(step.kernel) is _KernelStep else None
    return step if type(step) is _KernelStep else None


def _declared_spec(m: MethodState, slot: int) -> tuple | None:
    """(dtype, shape) of a value with a static declared tensor type, or None."""
    declared = value_type(m._values[slot]) if slot else None
    if not isinstance(declared, TensorType) or not declared.is_static:
        return None
    return np.dtype(declared.dtype.numpy), tuple(declared.shape)


def _fuse_channel_shuffles(m: MethodState, steps: list) -> None:
    """Make ShuffleNet's channel shuffle one prepared call (``kernels.shuffle.ChannelShuffle``):

        c = Concat(x1, x2, ..., axis=1)            (N, C, H, W), float
        r = Reshape(c, (N, g, C / g, H, W))
        t = Transpose(r, perm=(0, 2, 1, 3, 4))
        y = Reshape(t, (N, C, H, W))

    becomes one step at the Concat's place that writes y from x1, x2, ... (the other three run
    nothing, ``_FusedAway``), where c, r and t each have one reader, the next op, are no results
    of the method, and no jump lands inside. Where all that reads y is Slices right after it,
    each of constant bounds on the channels (ShuffleNet's halves), the step writes their results
    instead (``_ShuffleSlices``; y is never written, the Slices run nothing). Only the CPU
    executor fuses them, and only in the method's own steps (shape specializations keep the four: their
    arena places follow the steps' reads and writes, and the fused step writes y three steps
    early); the graph and the .pte keep the ops. ``steps`` are changed in place.

    Not fused: another perm or rank (not the shuffle), a Concat on another axis, a reshape that
    does not split the channels into (g, C / g) or merge them back, an intermediate that is also
    a result or read elsewhere (it would never be written), types that are not static."""
    from .kernels.shuffle import ChannelShuffle

    readers, results, targets = _fusion_context(m, steps)
    for pc in range(len(steps) - 3):
        ks = [_step_kernel(s) for s in steps[pc : pc + 4]]
        if None in ks or [k.op_name for k in ks] != [
            "onnx::Concat",
            "onnx::Reshape",
            "onnx::Transpose",
            "onnx::Reshape",
        ]:
            continue
        concat, split, transpose, merge = ks
        mids = [concat.out_slots[0], split.out_slots[0], transpose.out_slots[0]]
        outs = [k.out_slots for k in ks]
        if (
            any(len(o) != 1 for o in outs)
            or [split.in_slots[0], transpose.in_slots[0], merge.in_slots[0]] != mids
            or any(readers.get(s) != 1 or s in results for s in mids)
            or any(p in targets for p in range(pc + 1, pc + 4))
            or int(concat.attrs.get("axis", 0)) not in (1, -3)
            or [int(p) for p in transpose.attrs.get("perm") or ()] != [0, 2, 1, 3, 4]
        ):
            continue
        y = merge.out_slots[0]
        specs = [_declared_spec(m, s) for s in [*concat.in_slots, mids[0], mids[1], y]]
        if None in specs or m._planned[y] is None:
            continue
        *ins, (dtype, joined), (_, grouped), (_, shuffled) = specs
        if dtype.kind != "f" or len(joined) != 4 or shuffled != joined or len(grouped) != 5:
            continue
        n, c, h, w = joined
        g = grouped[1]
        if grouped != (n, g, c // g, h, w) or g * (c // g) != c or not ins:
            continue
        if any(d != dtype or len(s) != 4 or (s[0], s[2], s[3]) != (n, h, w) for d, s in ins):
            continue
        channels = tuple(s[1] for _, s in ins)
        slices = _channel_slices(m, steps, pc + 4, y, (n, c, h, w), readers, results, targets)
        if slices:
            ks += [k for k, _ in slices]
            fused = _ShuffleSlices()
            fused.call = ChannelShuffle(channels, (n, h, w), dtype, g, tuple(r for _, r in slices))
            fused.out_slots = [k.out_slots[0] for k, _ in slices]
        else:
            fused = _PreparedStep()
            fused.call = ChannelShuffle(channels, (n, h, w), dtype, g)
            fused.out_slot = y
        fused.kernel = _KernelChain(ks)
        fused.in_slots = list(concat.in_slots)
        steps[pc] = fused
        for i in range(1, len(ks)):
            steps[pc + i] = away = _FusedAway()
            away.kernel = ks[i]


def _channel_slices(
    m: MethodState, steps: list, pc: int, y: int, shape: tuple, readers, results, targets
) -> list:
    """[(Slice step, (first, end channel))] of the Slices at ``pc`` on that are all that reads
    ``y`` (of ``shape``), each of constant starts and ends on axis 1 (step 1), whose results are
    planned; [] where there are none such, or where y is read by anything else or is a result."""
    n, c, h, w = shape
    count = readers.get(y, 0)
    if not count or y in results or pc + count > len(steps):
        return []
    found = []
    for q in range(pc, pc + count):
        k = _step_kernel(steps[q])
        if k is None or k.op_name != "onnx::Slice" or q in targets or len(k.out_slots) != 1:
            return []
        if k.in_slots[0] != y or not 3 <= len(k.in_slots) <= 5:
            return []
        args = []
        for i in k.in_slots[1:]:
            value = m._initial[i] if i and m._planned[i] is None else None
            if not isinstance(value, np.ndarray) or value.size != 1 or value.dtype.kind not in "iu":
                return []
            args.append(int(value.reshape(-1)[0]))
        start, end, *rest = args
        if not rest or rest[0] not in (1, -3) or (len(rest) > 1 and rest[1] != 1):  # axis 1, step 1
            return []
        lo, hi, _ = slice(start, end).indices(c)  # ONNX's clamping, for a step of 1
        out = k.out_slots[0]
        if (
            hi <= lo
            or m._planned[out] is None
            or _declared_spec(m, out) != (m._planned[out].dtype, (n, hi - lo, h, w))
        ):
            return []
        found.append((k, (lo, hi)))
    return found
