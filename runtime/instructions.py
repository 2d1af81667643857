"""Preparing a chain's instructions as steps: kernel, move, jump, free and delegate calls, once at load."""

from __future__ import annotations

import re

import numpy as np

from offload.errors import ModelFormatError, UnsupportedOpError
from offload.ir import TensorType, lookup
from offload.schemas.generated.executorch_flatbuffer.InstructionArguments import InstructionArguments

from . import delegates as dl
from . import kernels
from .pte_values import AttributeReader, value_type
from .steps import (
    MethodState,
    SubPlan,
    _DelegateStep,
    _FreeStep,
    _JumpStep,
    _KernelStep,
    _MoveStep,
    _PreparedOutputsStep,
    _PreparedStep,
)


def _label(frames, pc: int) -> str:
    if pc < len(frames) and frames[pc] is not None and frames[pc].items:
        return frames[pc].items[0].name or ""
    return ""


def _prepared(m: MethodState, step: _KernelStep, domain: str, op_type: str) -> _PreparedStep | None:
    """The prepared form of ``step`` where its op has one and every type is static here."""
    factory = kernels.find_prepared(domain, op_type)
    slot = _one_output(step)
    if factory is None or slot is None or not step.in_slots:
        return None
    out = m._planned[slot]
    if out is None or any(isinstance(a, SubPlan) for a in step.attrs.values()):
        return None
    specs = [_static_spec(m, i) for i in step.in_slots]  # a method input's, checked when given
    if any(
        spec is False or (spec is None and not getattr(factory, "omitted_inputs", False)) for spec in specs
    ):
        return None  # an omitted input (None) only to a factory that says it takes one
    call = factory(step.attrs, specs, (out.dtype, out.shape))
    if call is None:
        return None
    fast = _PreparedStep()
    fast.call, fast.in_slots, fast.kernel, fast.out_slot = call, list(step.in_slots), step, slot
    return fast


def _prepared_outputs(
    m: MethodState, kernel: _KernelStep, specs: list, outs: dict
) -> _PreparedOutputsStep | None:
    """The prepared form of a kernel step of an op with several outputs, for its inputs' types
    ``specs`` ((dtype, shape), None for an omitted input) and the types of its outputs that have
    places ``outs`` (slot → (dtype, shape)); None where the op has no such call, or an output that
    a step or the method's results read has no place."""
    domain, _, op_type = kernel.op_name.partition("::")
    factory = kernels.find_prepared_outputs("" if domain == "onnx" else domain, op_type)
    if factory is None or any(isinstance(a, SubPlan) for a in kernel.attrs.values()):
        return None
    read = m._read_slots
    wanted = [bool(o) and o in read for o in kernel.out_slots]
    if any(w and o not in outs for o, w in zip(kernel.out_slots, wanted)):
        return None
    call = factory(kernel.attrs, specs, [outs[o] if w else None for o, w in zip(kernel.out_slots, wanted)])
    if call is None:
        return None
    step = _PreparedOutputsStep()
    step.call, step.in_slots, step.kernel = call, list(kernel.in_slots), kernel
    step.out_slots, step.wanted = list(kernel.out_slots), wanted
    return step


def _static_spec(m: MethodState, i: int):
    """(dtype, shape) of input slot ``i`` where it is static at load, None for an omitted input
    (slot 0), False where not known."""
    if i == 0:
        return None
    known = m._planned[i] if m._planned[i] is not None else m._initial[i]
    if isinstance(known, np.ndarray):
        return known.dtype, known.shape
    declared = value_type(m._values[i])
    if not isinstance(declared, TensorType) or not declared.is_static or known is not None:
        return False
    return declared.dtype.numpy, tuple(declared.shape)


def _one_output(step: _KernelStep) -> int | None:
    """The slot of a kernel step's first output where no other output exists (an omitted
    optional output, such as MaxPool's Indices, is slot 0); None otherwise."""
    slots = step.out_slots
    return slots[0] if slots and slots[0] and not any(slots[1:]) else None


def _missing_kernel(name: str, where: str):
    def fn(ctx, *args, **attrs):
        raise UnsupportedOpError(f"{where}: no CPU kernel for {name}")

    return fn


def _prepare_kernel(m: MethodState, call, pc: int, where: str, label: str, operators, n: int) -> _KernelStep:
    if not 0 <= call.opIndex < len(operators):
        raise ModelFormatError(
            f"{where}: operator index {call.opIndex} is out of range ({len(operators)} operators)"
        )
    op = operators[call.opIndex]
    name, overload = op.name or "", op.overload or ""
    domain, sep, op_type = name.partition("::")
    domain = "" if domain == "onnx" else domain
    schema = lookup(domain, op_type) if sep else None
    if schema is None:
        raise ModelFormatError(
            f"{where}: operator '{name}' is not an operator offload knows (expected '<domain>::<Op>')"
        )
    args = [m._index(a, where, "an argument") for a in (call.args if call.args is not None else [])]
    n_in, _ = _split(schema, len(args), overload, f"{where}: operator '{name}'")
    n_attr = len(schema.attributes)
    step = _KernelStep()
    step.method, step.label, step.op_name = m, label, name
    step.where = where
    step.what = f"{where}: op '{label or name}' ({name})"
    in_slots = args[:n_in]
    if not any(p.variadic for p in schema.inputs):
        # Trailing omitted inputs are left out, as evaluate passes them.
        while in_slots and in_slots[-1] == 0:
            in_slots.pop()
    step.in_slots = in_slots
    reader = AttributeReader(m._values, m._initial, f"{where}: operator '{name}'", m._subplan)
    step.attrs = {
        spec.name: reader.read(spec, i)
        for spec, i in zip(schema.attributes.values(), args[n_in : n_in + n_attr])
    }
    step.out_slots = args[n_in + n_attr :]
    fn = kernels.find(domain, op_type)
    if fn is None:
        m._unsupported.append(name)
        fn = _missing_kernel(name, where)
    step.fn = fn
    return _prepared(m, step, domain, op_type) or step


_OVERLOAD = re.compile(r"^in(\d+)$")


def _split(schema, n_args: int, overload: str, where: str) -> tuple[int, int]:
    """How many of a KernelCall's args are inputs and outputs (the rest are the attributes)."""
    n_attr = len(schema.attributes)
    in_fixed = sum(not p.variadic for p in schema.inputs)
    out_fixed = sum(not p.variadic for p in schema.outputs)
    in_var = any(p.variadic for p in schema.inputs)
    out_var = any(p.variadic for p in schema.outputs)
    if in_var and out_var:
        m = _OVERLOAD.match(overload)
        if not m:
            raise ModelFormatError(
                f"{where}: variadic inputs and outputs need the input count as overload 'in<N>'"
            )
        n_in = int(m.group(1))
        n_out = n_args - n_in - n_attr
    elif in_var:
        n_out = out_fixed
        n_in = n_args - n_attr - n_out
    else:
        n_in = in_fixed
        n_out = n_args - n_in - n_attr if out_var else out_fixed
    if n_in < in_fixed or n_out < out_fixed or n_in + n_attr + n_out != n_args:
        raise ModelFormatError(
            f"{where}: {n_args} arguments, but {schema.signature()} takes "
            f"{in_fixed}{'+' if in_var else ''} inputs, {n_attr} attributes and {out_fixed}{'+' if out_var else ''} outputs"
        )
    return n_in, n_out


def _prepare_move(m: MethodState, call, pc: int, where: str, label: str, operators, n: int) -> _MoveStep:
    step = _MoveStep()
    step.method = m
    step.src = m._index(call.moveFrom, where, "move_from")
    step.dst = m._index(call.moveTo, where, "move_to")
    return step


def _prepare_jump(m: MethodState, call, pc: int, where: str, label: str, operators, n: int) -> _JumpStep:
    step = _JumpStep()
    step.where = where
    step.cond = m._index(call.condValueIndex, where, "the condition")
    if not 0 <= call.destinationInstruction <= n:
        raise ModelFormatError(
            f"{where}: jump to instruction {call.destinationInstruction}; the chain has {n}"
        )
    step.dest = int(call.destinationInstruction)
    return step


def _prepare_free(m: MethodState, call, pc: int, where: str, label: str, operators, n: int) -> _FreeStep:
    step = _FreeStep()
    step.method = m
    step.slot = m._index(call.valueIndex, where, "value_index")
    return step


def _keep_on_device(m: MethodState) -> None:
    """Mark the delegate outputs that stay in device memory: those written once, read only by
    delegates that take this backend's device tensors, and not a result of the method. A
    consumer that falls back to the CPU at run time copies them to the host then. Mark also,
    for runs that ask for device outputs, the method results such a delegate writes
    (``keep_results``), and note which delegates read each method input when only delegates
    that take device tensors read it (``m._device_readers``, for inputs in device memory)."""
    readers: dict[int, list] = {}
    writers: dict[int, int] = {}
    for step in m._steps:
        info = step.info()
        for slot in info.reads:
            readers.setdefault(slot, []).append(step)
        for slot in info.writes:
            writers[slot] = writers.get(slot, 0) + 1
    results = set(m._output_slots)
    returned = set(m._output_slots[: len(m._output_slots) - len(m.state_names)])
    for step in m._steps:
        if not isinstance(step, _DelegateStep) or not step.delegate.keeps_on_device():
            continue

        def read_on_device(slot: int, step=step) -> bool:
            return all(
                isinstance(r, _DelegateStep) and r.delegate.reads_device_tensors_of(step.delegate)
                for r in readers.get(slot, ())
            )

        keep = [
            bool(slot)
            and slot not in results
            and writers.get(slot) == 1
            and bool(readers.get(slot))
            and read_on_device(slot)
            for slot in step.out_slots
        ]
        if any(keep):
            step.keep = keep
        kept = [
            k or (slot in returned and writers.get(slot) == 1 and read_on_device(slot))
            for k, slot in zip(keep, step.out_slots)
        ]
        if any(kept):
            step.keep_results = kept
    m._device_readers = {
        slot: [r.delegate for r in readers[slot]]
        for slot in m._input_slots
        if slot not in results
        and readers.get(slot)
        and all(isinstance(r, _DelegateStep) and r.delegate.takes_device_tensors for r in readers[slot])
    }


def _prepare_delegate(
    m: MethodState, call, pc: int, where: str, label: str, operators, n: int
) -> _DelegateStep:
    entries = m.plan.delegates or []
    k = int(call.delegateIndex)
    if not 0 <= k < len(entries):
        raise ModelFormatError(f"{where}: delegate index {k} is out of range ({len(entries)} delegates)")
    delegate = m._delegates.get(k)
    if delegate is None:  # init runs once per delegate, however many calls name it
        delegate = m._delegates[k] = dl.bind(m, k, entries[k], m.module.strict)
    fallback = delegate.fallback
    n_in = len(fallback._input_slots)
    args = [m._index(a, where, "an argument") for a in (call.args if call.args is not None else [])]
    if len(args) != n_in + len(fallback._output_slots):
        raise ModelFormatError(
            f"{where}: {len(args)} arguments; the delegate takes {n_in} inputs and returns "
            f"{len(fallback._output_slots)} outputs"
        )
    # The fallback is part of this method either way; it runs (and needs kernels) only on the CPU.
    (m._fallbacks if delegate.on_backend else m._callees).add(fallback.index)
    step = _DelegateStep()
    step.method, step.delegate, step.keep, step.keep_results = m, delegate, None, None
    step.in_slots, step.out_slots = args[:n_in], args[n_in:]
    step.declared = dl.output_decls(m, step.out_slots)
    return step


_PREPARE = {
    InstructionArguments.KernelCall: _prepare_kernel,
    InstructionArguments.MoveCall: _prepare_move,
    InstructionArguments.JumpFalseCall: _prepare_jump,
    InstructionArguments.FreeCall: _prepare_free,
    InstructionArguments.DelegateCall: _prepare_delegate,
}
