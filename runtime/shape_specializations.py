"""Steps by input shapes: shape steps, and shape specializations (a method's steps for one tuple of input shapes)."""

from __future__ import annotations

import threading
from math import prod

import numpy as np

from offload.ir import computed_once, shape_rules

from . import kernels
from .bound_runs import _bind_runs, _static_inputs
from .decided_paths import _branch_joins, _conditions, _deciding_inputs, _Joins
from .folded_values import Noted, fold_known, known_notes
from .fusions import _fuse_depthwise_pointwise, _fuse_epilogues
from .instructions import _one_output, _prepared_outputs, _static_spec
from .load_time import _kernel_steps, _straight_line
from .loop_steps import loop_candidates, loop_notes, loop_step
from .quantize_pairs import _fuse_quantize_pairs
from .steps import MethodState, SubPlan, _JumpStep, _KernelStep, _MoveStep, _PreparedStep, _ShapeStep
from .straight_paths import straighten
from .transpose_views import prepare_transposes, strided_view

_SHAPE_OF = {"onnx::Shape", "onnx::Size"}


def _reach(m: MethodState, limit: int) -> int:
    """How far shape specializations look: past the first jump to the end where every jump goes
    forward (an If lowered to jumps: each step runs at most once a run, in order, so a value's
    lifetime is its span of steps and its shape, where it is made, follows from the input
    shapes as on a straight line), else to ``limit`` (a loop: a step may run again, later)."""
    forward = all(s.dest > pc for pc, s in enumerate(m._steps) if isinstance(s, _JumpStep))
    return len(m._steps) if forward else limit


def _find_shape_steps(m: MethodState) -> None:
    """The kernel steps (prepared or not) whose results depend only on
    the input shapes (``_ShapeStep``). A value's *shape* is known from the input shapes when it
    is a method input no step writes, a constant, or the result of an op whose output shapes
    follow from its inputs' shapes (``ir.shape_rules``: ``ir.SHAPE_FROM_SHAPES`` for ONNX), or
    from their shapes and the values at some positions that are themselves known
    (``ir.SHAPE_FROM_VALUES``). A value is *known* from the input shapes when it is Shape or Size
    of such a value, or the result of a deterministic ONNX op (``ir.computed_once``) of constants
    and known values; a prepared step of known values stays one (a bound call costs less than
    storing a kept result), its results known all the same (the exported transformer's sizes are
    products of them). Known results are neither inputs nor results of the method, and have one
    writer each. Steps are looked at up to ``_reach``: past an If's forward jumps, a step that
    runs computes the same from the same input shapes whichever runs take it.

    Where every jump goes forward and every jump's condition is known once the small inputs
    that only decide branches count as known (``decided_paths``: their values join the key of
    a run, ``m._deciding``), each run with one key takes the same steps, and an If's results
    (branch joins) follow from the input shapes where each branch's do. The values whose shape
    is known go to ``m._shaped`` (what shape specializations hold, ``_ShapeSpecialization``)."""
    limit, writers, constants = _straight_line(m)
    reach = _reach(m, limit)
    found = None
    if reach == len(m._steps) and reach > limit:  # forward jumps only
        deciding = _deciding_inputs(m, writers)
        found = _shape_pass(m, reach, writers, constants, deciding, _branch_joins(m, writers))
        # a condition no step writes and no run gives is a constant (an unconditional jump's)
        conditions = {c for c in _conditions(m) if c in writers or c in m._input_slots}
        if conditions <= found[1]:
            m._deciding = tuple(k for k, slot in enumerate(m._input_slots) if slot in deciding)
        else:
            found = None
    if found is None:
        found = _shape_pass(m, reach, writers, constants, set(), set())
    m._shaped, m._known, to_keep = found
    for pc in to_keep:
        m._steps[pc] = _ShapeStep(m._steps[pc])
        m._shape_steps = True


def _shape_pass(
    m: MethodState, reach: int, writers: dict, constants: set, deciding: set, joins: set
) -> tuple[set[int], set[int], list[int]]:
    """(the values whose shape is known, those whose value is known, the kernel steps to keep
    results of) for ``_find_shape_steps``, with the inputs ``deciding`` known and the writers
    of the branch joins ``joins`` followed."""
    inputs, results = set(m._input_slots), set(m._output_slots)
    known = set(constants) | deciding
    if m._load_time:
        known.update(o for k in m._load_time for o in k.out_slots if o)
    shaped = known | {i for i in inputs if i not in writers}
    joined = _Joins(joins, writers)
    to_keep = []
    for pc, step in enumerate(m._steps[:reach]):
        if isinstance(step, _MoveStep):
            if step.dst in joins:
                joined.wrote(step.dst, step.src in shaped, step.src in known, shaped, known)
            continue
        kernel = step.kernel if isinstance(step, _PreparedStep) else step
        if not isinstance(kernel, _KernelStep):
            continue
        domain, _, op_type = kernel.op_name.partition("::")
        from_shapes, from_values = shape_rules(domain)
        ins = [i for i in kernel.in_slots if i]
        outs = [o for o in kernel.out_slots if o]
        single = all(writers.get(o) == 1 and o not in inputs for o in outs)
        if op_type in from_shapes:
            shape_follows = all(i in shaped for i in ins)
        elif op_type in from_values:
            by_value = from_values[op_type]
            shape_follows = all(
                i == 0 or (i in known if k in by_value else i in shaped)
                for k, i in enumerate(kernel.in_slots)
            )
        else:
            shape_follows = False
        if kernel.op_name in _SHAPE_OF:
            derived = bool(ins) and ins[0] in shaped
        else:
            derived = (
                bool(ins)
                and all(i in known for i in ins)
                and computed_once("" if domain == "onnx" else domain, op_type)
            )
        derived = derived and not any(isinstance(a, SubPlan) for a in kernel.attrs.values())
        for o in outs:
            if o in joins:
                joined.wrote(o, shape_follows, derived, shaped, known)
        if shape_follows and single:
            shaped.update(outs)
        if type(step) not in (_KernelStep, _PreparedStep) or not ins or not outs or not single:
            continue
        if not derived or any(o in results for o in outs):
            continue
        known.update(outs)
        shaped.update(outs)
        if type(step) is _KernelStep:
            to_keep.append(pc)
    return shaped, known, to_keep


# ---- shape specializations -------------------------------------------------------------------
#
# An exported model with a symbolic batch, image size or sequence length declares most values
# without static shapes, so they get no arena place and their kernels run as kernels: each
# allocates its result and a Conv makes its recipe's calls again for the new arrays (about 50 us of
# Python a call on the exported convnets, more than the arithmetic of a 32 x 32 image). But a
# value whose shape follows from the input shapes (``_find_shape_steps``) has the same shape at
# every run with the same input shapes. A *shape specialization* is the method for one tuple of input
# shapes: the run that first meets them notes the dtype and shape of each such value; the next
# run with them makes the specialization, in which every kernel step that has a prepared call for those
# types becomes one (``_PreparedStep``), writing into a place of the specialization's own arena (placed by
# the values' lifetimes, as the file's arenas are), its runs bound as the method's are. Runs with
# those shapes then take arena sets of the specialization.

# Shape specializations a method keeps (the most recently used): each holds an arena set per concurrent run.
SHAPE_SPECIALIZATIONS = 8


_ALIGNMENT = 64


def _find_specializable_steps(m: MethodState) -> None:
    """The kernel steps before the first jump that a shape specialization may prepare: an op with a
    prepared call and one output, which has an arena place or follows from the input shapes
    (``m._shaped``), has one writer and is not a method input; each input a planned value, a
    constant, or a value that follows from the input shapes. And the outputs of the other kernel
    steps there that a shape specialization may give a place (the same conditions, not a method result): a
    kernel writes its result there, or the method copies it in, so that the prepared call that
    reads it sees the same array at every run (a Conv's calls are made for its arrays)."""
    limit, writers, _ = _straight_line(m)
    limit = _reach(m, limit)
    inputs, results = set(m._input_slots), set(m._output_slots)
    found, held = [], []
    for step in m._steps[:limit]:  # branch joins (If results) the moves write: places to copy into
        if (
            isinstance(step, _MoveStep)
            and step.dst in m._shaped
            and m._planned[step.dst] is None
            and step.dst not in inputs
            and step.dst not in results
            and step.dst not in held
        ):
            held.append(step.dst)
    for pc, step, kernel, domain, op_type in _kernel_steps(m, limit):
        if type(step) is _KernelStep:
            held.extend(
                o
                for o in kernel.out_slots
                if o
                and m._planned[o] is None
                and o in m._shaped
                and writers.get(o) == 1
                and o not in inputs
                and o not in results
            )
        out = _one_output(kernel)
        factory = kernels.find_prepared("" if domain == "onnx" else domain, op_type)
        if (
            type(step) is not _KernelStep
            or out is None
            or not kernel.in_slots
            or factory is None
            or (out not in m._shaped and m._planned[out] is None)
            or writers.get(out) != 1
            or out in inputs
            or any(isinstance(a, SubPlan) for a in kernel.attrs.values())
        ):
            continue
        takes_omitted = getattr(factory, "omitted_inputs", False)  # an omitted input is slot 0
        if not all(_plan_input(m, i) if i else takes_omitted for i in kernel.in_slots):
            continue
        # a planned output: where an input's type is known only at a run (else the method's own
        # preparation made the call, or there is none for these types)
        if m._planned[out] is None or any(
            i and m._planned[i] is None and m._initial[i] is None for i in kernel.in_slots
        ):
            found.append(pc)
    loops = loop_candidates(m, limit, writers)
    noted = m._shaped | loop_notes(m, limit) if loops else m._shaped
    m._specializable_steps = found + loops
    m._specialization_held = held
    m._specialization_limit = limit
    m._specialization_notes = [tuple(v for v in s.info().writes if v in noted) for s in m._steps]
    m._known_notes = known_notes(m, limit)


def _prepare_outputs_steps(m: MethodState) -> None:
    """Kernel steps of ops with several outputs (``kernels.prepared_outputs``) whose inputs and
    outputs have static types here become _PreparedOutputsSteps; and the ones before the first
    jump whose outputs follow from the input shapes and have one writer each go to
    ``m._specialized_outputs`` (what a shape specialization may prepare, as _find_specializable_steps does for
    ops of one output)."""
    limit, writers, _ = _straight_line(m)
    limit = _reach(m, limit)
    inputs = set(m._input_slots)
    m._read_slots = set(m._output_slots).union(*(step.info().reads for step in m._steps))
    found = []
    for pc, step in enumerate(m._steps):
        if type(step) is not _KernelStep or not step.in_slots:
            continue
        domain, _, op_type = step.op_name.partition("::")
        if kernels.find_prepared_outputs("" if domain == "onnx" else domain, op_type) is None:
            continue
        specs = [_static_spec(m, i) for i in step.in_slots]
        outs = {
            o: (m._planned[o].dtype, m._planned[o].shape)
            for o in step.out_slots
            if o and m._planned[o] is not None
        }
        if all(s is not False for s in specs):
            prepared = _prepared_outputs(m, step, specs, outs)
            if prepared is not None:
                m._steps[pc] = prepared
                continue
        outs_free = [o for o in step.out_slots if o]
        if (
            pc < limit
            and outs_free
            and all(  # an output with a place in the file's arena too (a method result of a static type)
                (m._planned[o] is not None or o in m._shaped) and writers.get(o) == 1 and o not in inputs
                for o in outs_free
            )
            and all(i == 0 or _plan_input(m, i) for i in step.in_slots)
        ):
            found.append(pc)
    m._specialized_outputs = found


def _plan_input(m: MethodState, i: int) -> bool:
    """Whether slot ``i`` is an input a shape specialization's prepared call may read: a planned value, a
    constant, or a value whose shape follows from the input shapes."""
    return (
        m._planned[i] is not None
        or isinstance(m._initial[i], np.ndarray)
        or (m._initial[i] is None and i in m._shaped)
    )


def _note(seen: Noted, slot: int, value) -> None:
    if type(value) is np.ndarray:
        spec = (value.dtype, value.shape)
        if seen.setdefault(slot, spec) != spec:
            seen.varied.add(slot)
    elif slot in seen:
        seen.varied.add(slot)


class _ShapeSpecializations:
    """A method's shape specializations by input shapes, the most recently used last. An entry is what the
    first run with those shapes noted (the next run makes the specialization from it), the specialization, or None
    where the specialization would hold no value (the method's own steps run)."""

    __slots__ = ("entries", "lock")

    def __init__(self):
        self.entries: dict[tuple, dict | _ShapeSpecialization | None] = {}
        self.lock = threading.Lock()

    def find(self, m: MethodState, shapes: tuple | None) -> tuple[_ShapeSpecialization | None, dict | None]:
        """(the specialization for ``shapes`` or None, a dict for the run to note its values in or None)."""
        if shapes is None or None in shapes:  # a sequence input: its shape says nothing
            return None, None
        with self.lock:
            if shapes not in self.entries:
                return None, Noted()
            entry = self.entries.pop(shapes)
            self.entries[shapes] = entry  # the most recently used last
        if not isinstance(entry, dict):
            return entry, None
        specialization = _ShapeSpecialization(m, entry)
        if not specialization.layout and not specialization.folded:
            specialization = None
        with self.lock:
            if shapes in self.entries:
                self.entries[shapes] = specialization
        return specialization, None

    def seen(self, shapes: tuple, noted: dict) -> None:
        with self.lock:
            if shapes not in self.entries:
                self.entries[shapes] = noted
                while len(self.entries) > SHAPE_SPECIALIZATIONS:
                    del self.entries[next(iter(self.entries))]


class _ShapeSpecialization:
    """A method's steps for one tuple of input shapes: ``steps`` with the kernel steps that have
    prepared calls for the noted types made _PreparedSteps, ``fast_steps`` with their runs bound
    (``_bind_runs``), and ``layout``, the place in the specialization's arena of each value they write and of
    each method input they read (slot → (offset, dtype, shape)). Arena sets (the file's arenas and
    one of the specialization's) are made as runs need them and kept in ``pool``."""

    __slots__ = (
        "bound_runs",
        "fast_steps",
        "folded",
        "layout",
        "method",
        "nbytes",
        "pool",
        "steps",
        "strided",
    )

    def __init__(self, m: MethodState, seen: dict):
        self.method = m
        self.pool: list[tuple[list, list, list]] = []
        steps = list(m._steps)
        inputs = set(m._input_slots)
        held: dict[int, tuple] = {}  # slot → (dtype, shape) of the values the specialization's arena holds
        self.folded = fold_known(m, steps, seen)  # slot → the known value the run's frames start with
        writers = _straight_line(m)[1]
        transposes = []  # Transposes of no prepared call: (pc, input spec, output spec)
        for pc in m._specializable_steps:
            kernel = steps[pc]
            if type(kernel) is not _KernelStep:  # folded, or fused into the call before it
                continue
            if pc >= m._specialization_limit:  # in a loop (loop_steps.py)
                step, places = loop_step(m, kernel, seen, writers)
                if step is not None:
                    steps[pc] = step
                    held.update(places)
                continue
            out = kernel.out_slots[0]
            out_spec = _known_spec(m, out, seen)  # a planned output: its view's
            specs = [_known_spec(m, i, seen) if i else None for i in kernel.in_slots]
            if out_spec is None or any(s is None for i, s in zip(kernel.in_slots, specs) if i):
                continue
            domain, _, op_type = kernel.op_name.partition("::")
            factory = kernels.find_prepared("" if domain == "onnx" else domain, op_type)
            call = factory(kernel.attrs, specs, out_spec)
            if call is None:
                if op_type == "Transpose" and domain in ("", "onnx"):
                    transposes.append((pc, specs[0], out_spec))
                continue
            step = steps[pc] = _PreparedStep()
            step.call, step.in_slots, step.kernel, step.out_slot = call, list(kernel.in_slots), kernel, out
            if m._planned[out] is None:
                held[out] = out_spec
            held.update((i, seen[i]) for i in kernel.in_slots if i in inputs and m._planned[i] is None)
        for pc in m._specialized_outputs:
            kernel = steps[pc]
            if type(kernel) is not _KernelStep:  # folded
                continue
            specs = [None if i == 0 else _known_spec(m, i, seen) for i in kernel.in_slots]
            outs = {o: s for o in kernel.out_slots if o and (s := _known_spec(m, o, seen)) is not None}
            if any(s is None for i, s in zip(kernel.in_slots, specs) if i):
                continue
            step = _prepared_outputs(m, kernel, specs, outs)
            if step is None:
                continue
            steps[pc] = step
            held.update(
                (o, outs[o]) for o, w in zip(step.out_slots, step.wanted) if w and m._planned[o] is None
            )
        held.update((o, seen[o]) for o in m._specialization_held if o in seen and o not in held)
        straighten(m, steps, self.folded, held)
        _fuse_epilogues(m, steps)
        _fuse_depthwise_pointwise(m, steps)
        _fuse_quantize_pairs(m, steps)
        self.strided = prepare_transposes(m, steps, transposes, held, lambda i: _known_spec(m, i, seen))
        self.steps = steps
        certain = _static_inputs(m) | (inputs & set(held)) | set(self.folded)
        self.fast_steps, self.bound_runs = _bind_runs(m, steps, certain)
        spans = _spans(m, steps, held)
        sizes = {v: int(np.dtype(d).itemsize) * prod(s) for v, (d, s) in held.items()}
        offsets, self.nbytes = _place(sizes, spans)
        self.layout = {v: (offsets[v], np.dtype(d), tuple(s)) for v, (d, s) in held.items()}

    def acquire(self) -> tuple[list, list, list]:
        """An arena set of this specialization that no other run holds (a new one when all are taken)."""
        m = self.method
        with m._pool_lock:
            if self.pool:
                return self.pool.pop()
        planned, initial = m._new_arenas()
        arena = np.zeros(self.nbytes, np.uint8)
        m.module._hold_arena(arena)
        for slot, (offset, dtype, shape) in self.layout.items():
            nbytes = dtype.itemsize * prod(shape)
            planned[slot] = initial[slot] = arena[offset : offset + nbytes].view(dtype).reshape(shape)
        for slot, (shape, perm) in self.strided.items():
            planned[slot] = initial[slot] = strided_view(planned[slot], shape, perm)
        for slot, value in self.folded.items():
            initial[slot] = value
        return planned, initial, m._bind(planned, initial, self.bound_runs)


def _known_spec(m: MethodState, i: int, seen: dict) -> tuple | None:
    """(dtype, shape) of input slot ``i`` of a prepared call in a shape specialization, or None."""
    known = m._planned[i] if m._planned[i] is not None else m._initial[i]
    if isinstance(known, np.ndarray):
        return known.dtype, known.shape
    return seen.get(i) if known is None else None


def _spans(m: MethodState, steps: list, held: dict) -> dict[int, tuple[int, int]]:
    """Each held value's lifetime, (first write, last read) with both ends inclusive so that a
    step's output never shares bytes with its inputs: method inputs from before the first step,
    method results and values read from the first jump on (in a loop, perhaps again) to the end,
    values written from the first jump on from there (a loop's next trip writes them again)."""
    n, limit, inputs = len(steps), m._specialization_limit, set(m._input_slots)
    first = {v: -1 for v in held if v in inputs}
    last: dict[int, int] = {}
    for pc, step in enumerate(steps):
        info = step.info()
        for v in info.reads:
            if v in held:
                last[v] = max(last.get(v, -1), pc if pc < limit else n)
        for v in info.writes:
            if v in held:
                first.setdefault(v, min(pc, limit))
    for v in m._output_slots:
        if v in held:
            last[v] = n
    return {v: (first[v], max(first[v], last.get(v, first[v]))) for v in held}


def _place(sizes: dict[int, int], spans: dict[int, tuple[int, int]]) -> tuple[dict[int, int], int]:
    """Offsets in one arena for values live over ``spans``: in the order they are first written,
    each takes the lowest gap between the values live with it that holds it (first fit), so that a
    value reuses the bytes of one that just died, while they are still in cache. Returns the
    offsets and the arena's size."""
    live: list[tuple[int, int, int]] = []  # (offset, end, last read) of the values placed so far
    offsets: dict[int, int] = {}
    top = 0
    for v in sorted(sizes, key=lambda v: (spans[v][0], v)):
        # placed earlier, so first written no later: live with v unless dead before v's start
        # (and then dead before every later start too)
        live = [p for p in live if p[2] >= spans[v][0]]
        at = 0
        for o, e, _ in sorted(live):
            if o - at >= sizes[v]:
                break
            at = max(at, -(-e // _ALIGNMENT) * _ALIGNMENT)
        offsets[v] = at
        live.append((at, at + sizes[v], spans[v][1]))
        top = max(top, at + sizes[v])
    return offsets, -(-top // _ALIGNMENT) * _ALIGNMENT
