"""Loading and running .pte files: a Module of Methods, each an executor over one plan's chain.

``load`` maps the file, parses it, and prepares every plan once: constants become read-only
views into the mapped constant segment, planned tensors views into one arena per memory id,
and each instruction a step with its arguments already split and decoded (docs/pte.md).
Kernels are the same CPU kernels ``offload.evaluate`` calls, called the same way, so results
match it bit for bit. A Module may be run from several threads at once: each run of a Method
takes a set of arenas from the Method's pool (a new set is allocated when every set is in use, so
a Method holds as many as it has had concurrent runs) and gives it back when its outputs are
copied out; backends serialize the runs of a delegate handle themselves. A Method with symbolic
shapes keeps a plan for each of its last input shapes (``_ShapePlan``), with a pool of its own.
"""

from __future__ import annotations

import json
import mmap
import operator
import os
import re
import threading
import weakref
from collections.abc import Mapping
from math import prod
from typing import Any, NamedTuple

import numpy as np

from offload.delegates.backend import DeviceTensor
from offload.errors import (
    DTypeError,
    ModelFormatError,
    OffloadError,
    ShapeError,
    UnsupportedOpError,
)
from offload.ir import SHAPE_FROM_SHAPES, SHAPE_FROM_VALUES, TensorType, computed_once, lookup
from offload.profile import Profile, now, profiling
from offload.schemas import pte as pte_format
from offload.schemas.generated.executorch_flatbuffer.InstructionArguments import InstructionArguments
from offload.schemas.generated.executorch_flatbuffer.KernelTypes import KernelTypes

from . import delegates as dl
from . import kernels
from .inputs import check_inputs
from .options import RunOptions
from .pte_values import (
    AttributeReader,
    constant_array,
    planned_view,
    scalar_value,
    tensor_decl,
    tensor_name,
    value_type,
)

MAX_FILE_BYTES = 1 << 40


def load(source: str | os.PathLike | bytes | bytearray | memoryview, *, strict: bool = False) -> Module:
    """A .pte file (a path, mapped read-only, or its bytes) ready to run.

    With ``strict``, a kernel result that does not have the dtype and shape the file declares
    for it is an error (otherwise it is kept outside the arena and the run goes on), and so is a
    delegate whose backend cannot run here: BackendUnavailableError instead of a warning and the
    delegate's CPU fallback.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        buffer, origin = memoryview(source).toreadonly(), "<bytes>"
    else:
        origin = os.fspath(source)
        buffer = _map(origin)
    return Module(pte_format.parse(buffer, origin), origin, strict)


def _map(path: str) -> mmap.mmap:
    if not os.path.isfile(path):
        raise ModelFormatError(f"{path}: no such file")
    size = os.path.getsize(path)
    if size == 0:
        raise ModelFormatError(f"{path}: the file is empty")
    if size > MAX_FILE_BYTES:
        raise ModelFormatError(f"{path}: {size} bytes is larger than the {MAX_FILE_BYTES}-byte limit")
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


class Module:
    """The methods of one .pte file; ``run`` runs the first plan (``forward`` for ONNX models).

    ``close`` (or leaving a ``with`` block) releases what the delegates' backends hold.
    """

    def __init__(self, pte, origin: str, strict: bool = False):
        self.origin = origin
        self.strict = strict
        self.pte = pte
        plans = pte.program.executionPlan or []
        if not plans:
            raise ModelFormatError(f"{origin}: the file has no execution plan")
        self._arena_ids: set[int] = set()
        self._warned_backends: set[str] = set()
        self._plans = [Method(self, i, p) for i, p in enumerate(plans)]
        try:
            for m in self._plans:
                m._prepare()
        except BaseException:
            self.close()  # backends initialized before the failure still hold their resources
            raise
        # Sub-plans of graph attributes and delegate fallbacks are parts of methods.
        subplans = {c for m in self._plans for c in m._callees | m._fallbacks}
        _check_acyclic(self._plans, origin)
        self._by_name: dict[str, Method] = {}
        for m in self._plans:
            self._by_name.setdefault(m.name, m)
        # Plans that graph attributes call are parts of other methods, not entry points.
        self.method_names = [m.name for i, m in enumerate(self._plans) if i not in subplans]

    @property
    def plan_names(self) -> list[str]:
        """Every plan of the file, sub-plans of graph attributes included."""
        return [m.name for m in self._plans]

    def method(self, name: str) -> Method:
        m = self._by_name.get(name)
        if m is None:
            raise OffloadError(f"{self.origin}: no method '{name}'; the file has {self.method_names}")
        return m

    def run(
        self, inputs: Mapping[str, Any], options: RunOptions | None = None, profile: Profile | None = None
    ) -> dict[str, Any]:
        return self._plans[0].run(inputs, options, profile)

    def reset_state(self) -> None:
        """Set the states of every method back to zeros (a model without state has none)."""
        for m in self._plans:
            m.reset_state()

    def close(self) -> None:
        """Destroy every backend handle (once; the CPU fallbacks need nothing released)."""
        errors = []
        for m in self._plans:
            for d in m._delegates.values():
                try:
                    d.destroy()
                except Exception as e:  # destroy the others anyway
                    errors.append(e)
        if errors:
            raise OffloadError(
                f"{self.origin}: a backend failed to release a delegate: {errors[0]}"
            ) from errors[0]

    def __enter__(self) -> Module:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _hold_arena(self, arena: np.ndarray) -> None:
        """Count ``arena`` as one whose arrays ``_detach`` copies out, while it lives (the arena
        sets of a shape plan go with the plan)."""
        self._arena_ids.add(id(arena))
        weakref.finalize(arena, self._arena_ids.discard, id(arena))

    def _detach(self, value):
        """``value`` with any array that lives in an arena copied out (arenas are reused)."""
        if isinstance(value, np.ndarray):
            root = value
            while isinstance(root.base, np.ndarray):
                root = root.base
            return value.copy(order="K") if id(root) in self._arena_ids else value
        if isinstance(value, list):
            out = [self._detach(x) for x in value]
            return value if all(a is b for a, b in zip(out, value)) else out
        return value


def _check_acyclic(plans: list[Method], origin: str) -> None:
    state: dict[int, int] = {}  # 1: on the current path, 2: done

    def visit(i: int) -> None:
        state[i] = 1
        for c in plans[i]._callees:
            if state.get(c) == 1:
                raise ModelFormatError(
                    f"{origin}: plan '{plans[c].name}' calls itself through graph attributes"
                )
            if c not in state:
                visit(c)
        state[i] = 2

    try:
        for i in range(len(plans)):
            if i not in state:
                visit(i)
    except RecursionError:
        raise ModelFormatError(f"{origin}: graph attributes nest plans too deeply") from None


class StepInfo(NamedTuple):
    """One prepared instruction: what it reads and writes (value indices) and where it may jump."""

    kind: str  # kernel | move | jump | free | delegate
    name: str  # the operator, for kernel calls
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    jump: int | None


class SubPlan:
    """A graph attribute's value as kernels see it: a block to pass to ``ctx.run_block``.

    ``inputs`` / ``outputs`` carry ``name`` and ``type`` like IR values do (the Scan and Loop
    kernels read the outputs' declared types for zero-iteration results).
    """

    def __init__(self, method: Method, captured: list[int]):
        self.method = method
        self.captured = captured
        self.name = method.name
        n_params = len(method.input_names) - len(captured)
        self.inputs = method.inputs[:n_params]
        self.outputs = method.outputs


class Port:
    """One input or output of a Method: its name and the type the file declares."""

    __slots__ = ("name", "type")

    def __init__(self, name: str, type_):
        self.name, self.type = name, type_

    @property
    def dtype(self) -> np.dtype | None:
        t = self.type
        return getattr(t, "dtype", None) and t.dtype.numpy

    @property
    def shape(self) -> tuple | None:
        return getattr(self.type, "shape", None)

    def __repr__(self) -> str:
        return f"{self.name}: {self.type}"


class MethodContext:
    """What a kernel may ask beyond its inputs (as runtime.evaluate's KernelContext offers)."""

    __slots__ = ("_frame", "_site", "num_outputs", "op")

    def __init__(self, site: _KernelStep, frame: list):
        self.op = site
        self.num_outputs = len(site.out_slots)
        self._site = site
        self._frame = frame

    def output_wanted(self, i: int) -> bool:
        return i < self.num_outputs and self._site.out_slots[i] != 0

    def out(self, i: int) -> np.ndarray | None:
        """The preallocated arena view for output ``i`` (a kernel may write its result there)."""
        return self._frame.planned[self._site.out_slots[i]] if i < self.num_outputs else None

    def run_block(self, block, args: list) -> list:
        if not isinstance(block, SubPlan):
            raise UnsupportedOpError(f"{self._site.where}: a .pte method can only run its own sub-plans")
        args = list(args) + [self._frame[i] for i in block.captured]
        if len(args) != len(block.method._input_slots):
            raise ModelFormatError(
                f"{self._site.where}: sub-plan '{block.name}' takes {len(block.method._input_slots)} inputs, "
                f"got {len(args)} (captured values included)"
            )
        return block.method._call(args, self._frame.options, self._frame.profile)


class Method:
    """One execution plan: its values table, arena views, and the prepared chain."""

    def __init__(self, module: Module, index: int, plan):
        self.module = module
        self.index = index
        self.plan = plan
        self.name = plan.name or f"#{index}"
        self.where = f"{module.origin}: plan '{self.name}'"
        self._values = plan.values or []
        self._initial: list = [None] * len(self._values)
        self._planned: list = [None] * len(self._values)
        self._arenas: dict[int, np.ndarray] = {}
        self._layout: dict[int, tuple[int, int]] = {}  # planned value → (memory id, byte offset)
        # Arena sets (planned views, initial frame, bound calls) that no run holds: the one made
        # at load, and one more for each run that found them all taken.
        self._pool: list[tuple[list, list, list]] = []
        self._pool_lock = threading.Lock()
        self._decode_values()
        self._input_slots = self._slots(plan.inputs, "inputs")
        self._output_slots = self._slots(plan.outputs, "outputs")
        self.state_names: list[str] = []
        self.input_names = self._names(plan, "encodedInpStr", self._input_slots, "input")
        self.output_names = self._names(plan, "encodedOutStr", self._output_slots, "output")
        ports = [Port(n, value_type(self._values[i])) for n, i in zip(self.input_names, self._input_slots)]
        outs = [Port(n, value_type(self._values[i])) for n, i in zip(self.output_names, self._output_slots)]
        # State inputs are fed from the values kept between runs; their new values come out as the
        # last outputs and are kept, not returned. ``inputs``/``outputs`` are what a caller sees.
        self._states = self._state_ports(ports, outs)  # (input position, port) of each state
        self.inputs = [p for p in ports if p.name not in self.state_names]
        self.outputs = outs[: len(outs) - len(self.state_names)]
        self._state_values: dict[str, np.ndarray] | None = None
        self._state_lock = threading.Lock()
        self._steps: list = []
        # _steps with each run of prepared steps whose inputs are certain replaced by one
        # _BoundRun (at the run's first index; the others stay, never reached): the hot loop's.
        self._fast_steps: list = []
        self._bound_runs: list[list[_PreparedStep]] = []
        # Kernel steps computed once, at the first run, their results kept with the constants
        # (_find_load_time); None once done or when there are none.
        self._load_time: list[_KernelStep] | None = None
        self._load_time_lock = threading.Lock()
        self._shape_steps = False  # whether any step keeps results by input shapes (_find_shape_steps)
        # Values whose shapes follow from the input shapes (_find_shape_steps), and the kernel steps
        # a shape plan may prepare (_find_shape_plan_steps); the plans by input shapes.
        self._shaped: set[int] = set()
        self._shape_plan_steps: list[int] = []
        self._shape_plan_held: list[int] = []
        self._shape_plan_limit = 0
        self._shape_plan_notes: list[tuple[int, ...]] = []  # by instruction: what a first run notes
        self._shape_plan_outputs: list[int] = []  # kernel steps of several outputs (_prepare_outputs_steps)
        self._read_slots: set[int] = set()  # what any step or the method's results read
        self._shape_plans = _ShapePlans()
        self._callees: set[int] = set()
        self._fallbacks: set[int] = set()  # fallback plans of delegates that run on a backend
        self._delegates: dict[int, dl.Delegate] = {}
        self._unsupported: list[str] = []
        self._missing_cache: list[str] | None = None
        # Planned results of the last run that a kernel allocated rather than wrote in place.
        self.allocated_results = 0

    # ---- description -------------------------------------------------------------------------

    @property
    def input_dtypes(self) -> list:
        return [p.dtype for p in self.inputs]

    @property
    def input_shapes(self) -> list:
        return [p.shape for p in self.inputs]

    @property
    def output_dtypes(self) -> list:
        return [p.dtype for p in self.outputs]

    @property
    def output_shapes(self) -> list:
        return [p.shape for p in self.outputs]

    @property
    def arena_bytes(self) -> int:
        """Bytes of the arenas the plan asks for (non_const_buffer_sizes without entry 0)."""
        sizes = self.plan.nonConstBufferSizes
        return int(sum(int(s) for s in sizes[1:])) if sizes is not None else 0

    @property
    def planned_bytes(self) -> int:
        """What the planned tensors would take if none shared memory."""
        return sum(v.nbytes for v in self._planned if v is not None)

    @property
    def instructions(self) -> list[StepInfo]:
        """The chain as prepared: reads, writes and jump target of every instruction."""
        return [step.info() for step in self._steps]

    @property
    def constants(self) -> dict[int, np.ndarray]:
        """Value index → its constant data (a read-only view into the file for numeric types)."""
        values = self._values
        return {
            i: v
            for i, v in enumerate(self._initial)
            if values[i].valType == KernelTypes.Tensor and values[i].val.dataBufferIdx
        }

    @property
    def delegates(self) -> list[dl.DelegateInfo]:
        """(backend id, 'backend' | 'cpu fallback', reason) of each delegate this method runs,
        those of its sub-plans included."""
        return [d.info() for d in self._all_delegates()]

    @property
    def kept_on_device(self) -> int:
        """How many delegate outputs of this plan stay in device memory for the delegates that
        read them (never copied to the host and back)."""
        return sum(sum(s.keep) for s in self._steps if isinstance(s, _DelegateStep) and s.keep)

    @property
    def delegate_details(self) -> list[str]:
        """Each backend's own line on how its delegate runs (e.g. what a new input shape costs),
        in the order of ``delegates``; empty where a backend says nothing."""
        return [d.detail() for d in self._all_delegates()]

    def _all_delegates(self) -> list[dl.Delegate]:
        out, seen, todo = [], set(), [self.index]
        while todo:
            i = todo.pop(0)
            if i in seen:
                continue
            seen.add(i)
            m = self.module._plans[i]
            out.extend(d for _, d in sorted(m._delegates.items()))
            todo.extend(sorted(m._callees))
        return out

    @property
    def planned(self) -> dict[int, np.ndarray]:
        """Value index → its arena view, for every planned tensor."""
        return {i: v for i, v in enumerate(self._planned) if v is not None}

    # ---- loading -----------------------------------------------------------------------------

    def _value_where(self, i: int) -> str:
        name = tensor_name(self._values[i])
        return f"{self.where}: value {i}" + (f" '{name}'" if name else "")

    def _decode_values(self) -> None:
        sizes = self.plan.nonConstBufferSizes
        buffer_sizes = [int(s) for s in sizes] if sizes is not None else []
        if any(s < 0 for s in buffer_sizes):
            raise ModelFormatError(f"{self.where}: negative non_const_buffer_sizes {buffer_sizes}")
        for i, e in enumerate(self._values):
            if e is None or (e.val is None and e.valType != KernelTypes.Null):
                raise ModelFormatError(f"{self.where}: value {i} is empty")
            if e.valType == KernelTypes.Tensor:
                self._decode_tensor(i, e.val, buffer_sizes)
            elif e.valType in (KernelTypes.TensorList, KernelTypes.OptionalTensorList, KernelTypes.Null):
                pass  # slots filled at run time (or None)
            elif e.valType in (
                KernelTypes.Int,
                KernelTypes.Bool,
                KernelTypes.Double,
                KernelTypes.String,
                KernelTypes.IntList,
                KernelTypes.DoubleList,
                KernelTypes.BoolList,
            ):
                self._initial[i] = scalar_value(e)
            else:
                raise ModelFormatError(f"{self.where}: value {i} has unknown kind {e.valType}")
        self.module._arena_ids.update(id(a) for a in self._arenas.values())

    def _decode_tensor(self, i: int, t, buffer_sizes: list[int]) -> None:
        where = self._value_where(i)
        if t.dataBufferIdx and t.allocationInfo is not None:
            raise UnsupportedOpError(f"{where}: mutable tensors with initial data are not supported")
        if t.dataBufferIdx:
            self._initial[i] = constant_array(self.module.pte, t, where)
        elif t.allocationInfo is not None:
            view = planned_view(t, self._arenas, buffer_sizes, t.allocationInfo, where)
            self._initial[i] = self._planned[i] = view
            alloc = t.allocationInfo
            self._layout[i] = (
                int(alloc.memoryId),
                int(alloc.memoryOffsetHigh) << 32 | int(alloc.memoryOffsetLow),
            )
        else:
            tensor_decl(t, where)  # a bad declaration is an error even when nothing is stored

    def _slots(self, indices, what: str) -> list[int]:
        out = [int(i) for i in (indices if indices is not None else [])]
        for i in out:
            if not 0 <= i < len(self._values):
                raise ModelFormatError(
                    f"{self.where}: {what} name value {i}; the plan has {len(self._values)}"
                )
        return out

    def _names(self, plan, field: str, slots: list[int], stem: str) -> list[str]:
        meta = plan.containerMetaType
        text = getattr(meta, field, None) if meta is not None else None
        if not text:
            return [tensor_name(self._values[i]) or f"{stem}{k}" for k, i in enumerate(slots)]
        try:
            names = json.loads(text)
        except ValueError:
            raise ModelFormatError(f"{self.where}: the {stem} names are not JSON") from None
        if stem == "input" and isinstance(names, dict):  # {"inputs": [...], "states": [...]}
            states = names.get("states")
            if not isinstance(states, list) or not all(isinstance(s, str) for s in states):
                raise ModelFormatError(f"{self.where}: the state names must be a list of strings")
            self.state_names = states
            names = names.get("inputs")
        if (
            not isinstance(names, list)
            or len(names) != len(slots)
            or not all(isinstance(n, str) for n in names)
        ):
            raise ModelFormatError(f"{self.where}: the {stem} names must be a list of {len(slots)} strings")
        return names

    def _state_ports(self, inputs: list[Port], outputs: list[Port]) -> list[tuple[int, Port]]:
        """(input position, port) of each state, checked against the outputs that update it."""
        names = [p.name for p in inputs]
        out = []
        if len(set(self.state_names)) != len(self.state_names) or len(self.state_names) > len(outputs):
            raise ModelFormatError(
                f"{self.where}: states {self.state_names} do not fit {len(outputs)} outputs"
            )
        for k, s in enumerate(self.state_names):
            if s not in names:
                raise ModelFormatError(f"{self.where}: state '{s}' is not an input of the plan")
            port = inputs[names.index(s)]
            update = outputs[len(outputs) - len(self.state_names) + k]
            if not isinstance(port.type, TensorType) or port.type != update.type or not port.type.is_static:
                raise ModelFormatError(
                    f"{self.where}: state '{s}' ({port.type}) needs a static tensor type, the same as "
                    f"the output that updates it ({update.type})"
                )
            out.append((names.index(s), port))
        return out

    @property
    def states(self) -> list[Port]:
        """The method's states: inputs the module feeds itself, kept between runs."""
        return [p for _, p in self._states]

    def reset_state(self) -> None:
        """Set every state of the method back to its initial value (zeros, as Core ML does)."""
        with self._state_lock:
            self._state_values = None

    def state(self) -> dict[str, np.ndarray]:
        """A copy of the method's states as the last run left them (zeros before any run)."""
        with self._state_lock:
            return {k: v.copy() for k, v in self._current_states().items()}

    def _current_states(self) -> dict[str, np.ndarray]:
        if self._state_values is None:
            self._state_values = {p.name: np.zeros(p.type.shape, p.type.dtype.numpy) for _, p in self._states}
        return self._state_values

    def _prepare(self) -> None:
        chains = self.plan.chains or []
        if len(chains) > 1:
            raise UnsupportedOpError(f"{self.where}: {len(chains)} chains; offload runs plans of one chain")
        instructions = (chains[0].instructions or []) if chains else []
        frames = (chains[0].stacktrace or []) if chains else []
        operators = self.plan.operators or []
        for pc, ins in enumerate(instructions):
            label = _label(frames, pc)
            where = f"{self.where}: instruction {pc}" + (f" ('{label}')" if label else "")
            prepare = _PREPARE.get(ins.instrArgsType) if ins is not None else None
            if prepare is None or ins.instrArgs is None:
                kind = ins.instrArgsType if ins is not None else None
                raise ModelFormatError(f"{where}: unknown instruction type {kind}")
            self._steps.append(prepare(self, ins.instrArgs, pc, where, label, operators, len(instructions)))
        _find_load_time(self)
        _find_shape_steps(self)
        _find_shape_plan_steps(self)
        _prepare_outputs_steps(self)
        _fuse_epilogues(self, self._steps)
        _fuse_depthwise_pointwise(self, self._steps)
        _fuse_channel_shuffles(self, self._steps)
        _keep_on_device(self)
        self._fast_steps, self._bound_runs = _bind_runs(self, self._steps, _static_inputs(self))
        self._pool.append((self._planned, self._initial, self._bind(self._planned, self._initial)))

    def _index(self, i, where: str, what: str) -> int:
        i = int(i)
        if not 0 <= i < len(self._values):
            raise ModelFormatError(
                f"{where}: {what} names value {i}; the plan has {len(self._values)} values"
            )
        return i

    def _subplan(self, plan_index: int, captured: list[int], where: str) -> SubPlan:
        plans = self.module._plans
        if not 0 <= plan_index < len(plans):
            raise ModelFormatError(f"{where}: plan {plan_index} does not exist ({len(plans)} plans)")
        sub = plans[plan_index]
        if len(captured) > len(sub.input_names):
            raise ModelFormatError(
                f"{where}: captures {len(captured)} values; plan '{sub.name}' takes {len(sub.input_names)}"
            )
        self._callees.add(plan_index)
        return SubPlan(sub, captured)

    # ---- running -----------------------------------------------------------------------------

    def run(
        self, inputs: Mapping[str, Any], options: RunOptions | None = None, profile: Profile | None = None
    ) -> dict[str, Any]:
        """Run the method on named inputs (checked against the declared dtypes and shapes);
        ``options`` bound it by a deadline or a stop flag (``RunTerminated``); ``profile``
        records where its time goes (``runtime.profile``)."""
        if self._missing_cache is None:
            self._missing_cache = self._missing()
        missing = self._missing_cache
        if missing:
            raise UnsupportedOpError(
                f"{self.where}: no CPU kernel for {', '.join(missing)}; these ops cannot run in this version of offload"
            )
        args = check_inputs([(p.name, p.type) for p in self.inputs], inputs)
        options = options.start() if options else None
        if self._states:
            return self._run_with_states(args, options, profile)
        if profile is None:
            return dict(zip(self.output_names, self._call(args, options)))
        with profiling(profile):
            return dict(zip(self.output_names, self._call(args, options, profile)))

    def _run_with_states(self, args: list, options, profile) -> dict[str, Any]:
        """One run of a method with state: runs of it take turns, each sees the last one's states."""
        with self._state_lock:
            states = self._current_states()
            full = list(args)
            for position, port in sorted(self._states, key=lambda s: s[0]):
                full.insert(position, states[port.name])
            if profile is None:
                results = self._call(full, options)
            else:
                with profiling(profile):
                    results = self._call(full, options, profile)
            n = len(self._states)
            for (_, port), value in zip(self._states, results[len(results) - n :]):
                states[port.name] = np.array(value, dtype=port.type.dtype.numpy, copy=True).reshape(
                    port.type.shape
                )
            return dict(zip(self.output_names, results[: len(results) - n]))

    def _missing(self) -> list[str]:
        seen, todo, out = set(), [self.index], set()
        while todo:
            i = todo.pop()
            if i in seen:
                continue
            seen.add(i)
            m = self.module._plans[i]
            out.update(m._unsupported)
            todo.extend(m._callees)
        return sorted(out)

    def _call(self, args: list, options: RunOptions | None = None, profile: Profile | None = None) -> list:
        if self._load_time is not None:
            self._compute_load_time()
        self.allocated_results = 0
        # (a sequence input has no shape: no op that shape steps follow reads one)
        shapes = (
            tuple(getattr(a, "shape", None) for a in args)
            if self._shape_steps or self._shape_plan_steps
            else None
        )
        plan, seen = self._shape_plans.find(self, shapes) if self._shape_plan_steps else (None, None)
        arena_set = plan.acquire() if plan is not None else self._acquire()
        planned, initial, bound = arena_set
        start = now() if profile is not None else 0
        try:
            frame = _Frame(initial)
            frame.planned, frame.bound, frame.options, frame.profile = planned, bound, options, profile
            frame.shapes = shapes if self._shape_steps else None
            for slot, value in zip(self._input_slots, args):
                view = planned[slot]
                if view is None:
                    frame[slot] = value
                elif getattr(value, "dtype", None) == view.dtype and np.shape(value) == view.shape:
                    np.copyto(view, value, casting="no")  # whatever its layout (_bind_runs counts on it)
                else:
                    self._store(frame, slot, value)
            # Floating-point exceptions are IEEE results here (inf, nan, 0), as in other runtimes.
            with np.errstate(all="ignore"):
                if options is None and profile is None and seen is None:  # the hot loop
                    steps = plan.fast_steps if plan is not None else self._fast_steps
                    pc, n = 0, len(steps)
                    while pc < n:
                        nxt = steps[pc].run(frame)
                        pc = pc + 1 if nxt is None else nxt
                else:
                    steps = plan.steps if plan is not None else self._steps
                    self._run_watched(frame, options, profile, steps, seen)
            if seen is not None:  # the first run at these input shapes: the next one plans them
                self._shape_plans.seen(shapes, seen)
            return [self.module._detach(frame[i]) for i in self._output_slots]
        finally:
            with self._pool_lock:
                (plan.pool if plan is not None else self._pool).append(arena_set)
            if profile is not None:
                profile.add(f"plan {self.name}", "plan", start, now())

    def _run_watched(
        self,
        frame: _Frame,
        options: RunOptions | None,
        profile: Profile | None,
        steps: list,
        seen: dict | None = None,
    ) -> None:
        """The chain with ``options`` checked before every instruction and, when profiling, an
        event per instruction (its time on this thread). With ``seen``, the dtype and shape of
        each value a shape plan may hold go into it as the steps write them (_ShapePlans)."""
        pc, n = 0, len(steps)
        if seen is not None:
            for slot in self._input_slots:
                _note(seen, slot, frame[slot])
            notes = self._shape_plan_notes
        while pc < n:
            if options is not None:
                options.check(self.where)
            step = steps[pc]
            start = now() if profile is not None else 0
            nxt = step.run(frame)
            if profile is not None:
                name, cat, args = _describe(step)
                profile.add(name, cat, start, now(), pc=pc, **args)
            if seen is not None:
                for slot in notes[pc]:
                    _note(seen, slot, frame[slot])
            pc = pc + 1 if nxt is None else nxt

    def _compute_load_time(self) -> None:
        """Run the load-time steps once and keep their results as constants (read-only): in the
        initial frame every arena set copies, and in the sets made before (the first one)."""
        with self._load_time_lock:
            if self._load_time is None:
                return
            frame = _Frame(self._initial)
            frame.planned, frame.bound, frame.options, frame.profile = [None] * len(frame), None, None, None
            frame.shapes = None
            with np.errstate(all="ignore"):
                for step in self._load_time:
                    step.run(frame)
            with self._pool_lock:
                sets = [initial for _, initial, _ in self._pool]
            for step in self._load_time:
                for slot in step.out_slots:
                    if slot:
                        value = np.array(frame[slot], copy=True)  # its own memory, read-only
                        value.flags.writeable = False
                        self._initial[slot] = value
                        for initial in sets:
                            initial[slot] = value
            self._load_time = None

    def _acquire(self) -> tuple[list, list, list]:
        """An arena set no other run holds: (planned views by value, the initial frame, the
        bound calls of each _BoundRun)."""
        with self._pool_lock:
            if self._pool:
                return self._pool.pop()
        planned, initial = self._new_arenas()
        return planned, initial, self._bind(planned, initial)

    def _new_arenas(self) -> tuple[list, list]:
        """Planned views into new arenas by value, and the initial frame that holds them."""
        arenas = {k: np.zeros(a.nbytes, np.uint8) for k, a in self._arenas.items()}
        for a in arenas.values():
            self.module._hold_arena(a)
        planned, initial = [None] * len(self._values), list(self._initial)
        for i, (memory_id, offset) in self._layout.items():
            view = self._planned[i]
            planned[i] = initial[i] = (
                arenas[memory_id][offset : offset + view.nbytes].view(view.dtype).reshape(view.shape)
            )
        return planned, initial

    def _bind(self, planned: list, initial: list, bound_runs: list | None = None) -> list[list]:
        """Each _BoundRun's calls (the method's, or ``bound_runs``) with the arrays of one arena
        set fixed in them."""
        return [
            [kernels.bind(s.call, planned[s.out_slot], [initial[i] for i in s.in_slots]) for s in run]
            for run in (self._bound_runs if bound_runs is None else bound_runs)
        ]

    def _store(self, frame: list, slot: int, value) -> None:
        """A result into its slot: copied into the planned view when it fits, else bound."""
        view = frame.planned[slot]
        if value is view:  # the kernel wrote into ctx.out
            frame[slot] = view
            return
        if view is not None:
            if _fits(value, view):
                # The kernel allocated its result instead of writing into ctx.out.
                self.allocated_results += value.base is None
                np.copyto(view, value, casting="no")
                frame[slot] = view
                return
            if self.module.strict and not _layout_only(value, view):
                self._mismatch(slot, value, view)
        frame[slot] = self.module._detach(value)

    def _mismatch(self, slot: int, value, view: np.ndarray) -> None:
        where = self._value_where(slot)
        got = getattr(value, "dtype", type(value).__name__)
        if getattr(value, "dtype", None) != view.dtype:
            raise DTypeError(f"{where}: a result of dtype {got} for a tensor declared {view.dtype}")
        raise ShapeError(f"{where}: a result of shape {np.shape(value)} for a tensor declared {view.shape}")


class _Frame(list):
    """The values of one run of a Method by slot, with the arena views of the set it holds, and
    the shapes of the run's inputs (what ``_ShapeStep`` results depend on)."""

    __slots__ = ("bound", "options", "planned", "profile", "shapes")


def _describe(step) -> tuple[str, str, dict]:
    """(name, category, arguments) of a step's profile event."""
    if isinstance(step, (_PreparedStep, _PreparedOutputsStep, _ShapeStep, _FusedAway, _ShuffleSlices)):
        step = step.kernel
    if isinstance(step, _KernelChain):  # a fused run's time is its first op's
        step = step.kernels[0]
    if isinstance(step, _KernelPair):  # the pair's time is its first op's (onnxruntime's fused Conv)
        step = step.first
    if isinstance(step, _KernelStep):
        return step.label or step.op_name, "kernel", {"op": step.op_name}
    if isinstance(step, _DelegateStep):
        return f"delegate {step.delegate.backend}", "delegate", {}
    kind = step.info().kind
    return kind, kind, {}


def _fits(value, view: np.ndarray) -> bool:
    # Only C-contiguous results go into the arena: a kernel's non-contiguous result (a
    # transposed view…) keeps its layout, so later kernels iterate it as evaluate's do.
    return (
        isinstance(value, (np.ndarray, np.generic))
        and value.dtype == view.dtype
        and value.shape == view.shape
        and value.flags.c_contiguous
    )


def _layout_only(value, view: np.ndarray) -> bool:
    return isinstance(value, np.ndarray) and value.dtype == view.dtype and value.shape == view.shape


def _label(frames, pc: int) -> str:
    if pc < len(frames) and frames[pc] is not None and frames[pc].items:
        return frames[pc].items[0].name or ""
    return ""


# ---- steps ---------------------------------------------------------------------------------------


class _KernelStep:
    """A prepared KernelCall; also the ``ctx.op`` its kernel sees (seeded kernels key on it)."""

    __slots__ = (
        "__weakref__",
        "attrs",
        "fn",
        "in_slots",
        "label",
        "method",
        "op_name",
        "out_slots",
        "what",
        "where",
    )

    def run(self, frame: list) -> None:
        # kernels.invoke inlined: this is the executor's innermost loop.
        args = [frame[i] for i in self.in_slots]
        try:
            result = self.fn(MethodContext(self, frame), *args, **self.attrs)
        except OffloadError:
            raise
        except Exception as e:
            raise kernels.failure(self.what, args, e) from e
        if type(result) is not tuple:
            result = (result,)
        store = self.method._store
        for slot, value in zip(self.out_slots, result):
            if slot:
                store(frame, slot, value)

    def info(self) -> StepInfo:
        captured = [i for a in self.attrs.values() if isinstance(a, SubPlan) for i in a.captured]
        reads = tuple(i for i in self.in_slots if i) + tuple(captured)
        return StepInfo("kernel", self.op_name, reads, tuple(i for i in self.out_slots if i), None)


class _PreparedStep:
    """A kernel call prepared at load (``kernels.prepared``): its inputs go straight into the
    op's call writing into the output's arena view. An input that is not a C-contiguous array,
    or not of the declared type (the call raises before writing), takes the kernel's way. Its
    result is always in the arena view, which bound calls read (``_bind_runs``); a kernel result
    of another type than declared unbinds the rest of the run."""

    __slots__ = ("call", "in_slots", "kernel", "out_slot")

    def run(self, frame: list) -> None:
        args = [frame[i] for i in self.in_slots]
        out = frame.planned[self.out_slot]
        for a in args:
            if type(a) is not np.ndarray or not a.flags.c_contiguous:
                return self._by_kernel(frame, out)
        try:
            self.call(out, *args)
        except Exception:  # another type or shape than declared, or a failure the kernel names
            return self._by_kernel(frame, out)
        frame[self.out_slot] = out
        return None

    def _by_kernel(self, frame: list, out: np.ndarray) -> None:
        self.kernel.run(frame)
        value = frame[self.out_slot]
        if value is out:
            return
        if _layout_only(value, out):
            # Kernels read the result in its layout, as evaluate's do; bound calls read the view.
            np.copyto(out, value, casting="no")
        else:  # another type than declared (lenient, not strict): no call is bound from here on
            frame.bound = None

    def info(self) -> StepInfo:
        return self.kernel.info()


def _prepared(m: Method, step: _KernelStep, domain: str, op_type: str) -> _PreparedStep | None:
    """The prepared form of ``step`` where its op has one and every type is static here."""
    factory = kernels.find_prepared(domain, op_type)
    slot = _one_output(step)
    if factory is None or slot is None or not step.in_slots:
        return None
    out = m._planned[slot]
    if out is None or any(isinstance(a, SubPlan) for a in step.attrs.values()):
        return None
    specs = [_static_spec(m, i) for i in step.in_slots]  # a method input's, checked when given
    if any(spec is None or spec is False for spec in specs):
        return None
    call = factory(step.attrs, specs, (out.dtype, out.shape))
    if call is None:
        return None
    fast = _PreparedStep()
    fast.call, fast.in_slots, fast.kernel, fast.out_slot = call, list(step.in_slots), step, slot
    return fast


class _PreparedOutputsStep:
    """A kernel call of an op with several outputs prepared for its types (``kernels.
    prepared_outputs``): its inputs go straight into the op's call, which writes the outputs that
    steps or the method's results read (``wanted``) into their arena views and leaves the others.
    An input that is not an array (of any layout) or None, or a call that raises (another type or
    shape than declared, or a value the kernel's checks refuse), takes the kernel's way."""

    __slots__ = ("call", "in_slots", "kernel", "out_slots", "wanted")

    def run(self, frame: list) -> None:
        args = [frame[i] for i in self.in_slots]
        for a in args:
            if a is not None and type(a) is not np.ndarray:
                return self.kernel.run(frame)
        planned = frame.planned
        try:
            results = self.call(
                [planned[s] if w else None for s, w in zip(self.out_slots, self.wanted)], *args
            )
        except Exception:
            return self.kernel.run(frame)
        for slot, wanted, value in zip(self.out_slots, self.wanted, results):
            if wanted:
                frame[slot] = value
        return None

    def info(self) -> StepInfo:
        return self.kernel.info()


def _prepared_outputs(m: Method, kernel: _KernelStep, specs: list, outs: dict) -> _PreparedOutputsStep | None:
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


def _prepare_outputs_steps(m: Method) -> None:
    """Kernel steps of ops with several outputs (``kernels.prepared_outputs``) whose inputs and
    outputs have static types here become _PreparedOutputsSteps; and the ones before the first
    jump whose outputs follow from the input shapes and have one writer each go to
    ``m._shape_plan_outputs`` (what a shape plan may prepare, as _find_shape_plan_steps does for
    ops of one output)."""
    limit, writers, _ = _straight_line(m)
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
            and all(
                m._planned[o] is None and o in m._shaped and writers.get(o) == 1 and o not in inputs
                for o in outs_free
            )
            and all(i == 0 or _plan_input(m, i) for i in step.in_slots)
        ):
            found.append(pc)
    m._shape_plan_outputs = found


def _static_spec(m: Method, i: int):
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


class _KernelPair:
    """The kernel steps of a fused pair (``_fuse_epilogues``), run one after the other where the
    fused call cannot run; it reads and writes as the first one (the second's step stays in
    place, ``_FusedAway``)."""

    __slots__ = ("first", "in_slots", "op_name", "second", "what")

    def __init__(self, first: _KernelStep, second: _KernelStep):
        self.first, self.second = first, second
        self.op_name = first.op_name
        self.in_slots = list(first.in_slots) + list(second.in_slots[1:])
        self.what = f"{first.what} with {second.what}"

    def run(self, frame: list) -> None:
        self.first.run(frame)
        self.second.run(frame)

    def info(self) -> StepInfo:
        return self.first.info()


class _FusedAway:
    """The place of a step whose op a fused call before it runs (``_fuse_epilogues``): nothing
    to run; it lists what the op reads and writes, as the instruction does."""

    __slots__ = ("kernel",)

    def run(self, frame: list) -> None:
        return None

    def info(self) -> StepInfo:
        return self.kernel.info()


def _fusion_context(m: Method, steps: list) -> tuple[dict[int, int], set[int], set[int]]:
    """What a load-time fusion checks: how many steps read each slot, the method's results, and
    the steps jumps land on."""
    readers: dict[int, int] = {}
    for step in steps:
        for slot in step.info().reads:
            readers[slot] = readers.get(slot, 0) + 1
    return readers, set(m._output_slots), {s.dest for s in steps if isinstance(s, _JumpStep)}


def _fuse_epilogues(m: Method, steps: list) -> None:
    """Pair a prepared Conv with the prepared elementwise op right after it (Relu, Clip,
    HardSwish, HardSigmoid: ``conv._Epilogue``) where that op is the only reader of the conv's
    result, which is not a result of the method, and the op is no jump's target: the conv's
    plan applies the op to each part of its output as it writes it, into the op's arena view
    (``_ConvCall.with_epilogue``), and the op's own step runs nothing (``_FusedAway``). The
    conv's result is then never written: nothing reads it. Only the CPU executor pairs them;
    the graph and the .pte keep both ops. The op's other inputs (Clip's bounds) must be
    constants, so that no arena view the conv writes is one they are read from. ``steps`` are the
    method's, or a shape plan's (``_ShapePlan``), changed in place."""
    readers, results, targets = _fusion_context(m, steps)
    for pc in range(len(steps) - 1):
        conv, op = steps[pc], steps[pc + 1]
        if type(conv) is not _PreparedStep or type(op) is not _PreparedStep:
            continue
        with_epilogue = getattr(conv.call, "with_epilogue", None)
        mid, extras = conv.out_slot, op.in_slots[1:]
        if (
            with_epilogue is None
            or not op.in_slots
            or op.in_slots[0] != mid
            or readers.get(mid) != 1
            or mid in results
            or pc + 1 in targets
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
        steps[pc] = fused
        steps[pc + 1] = away = _FusedAway()
        away.kernel = op.kernel


def _fuse_depthwise_pointwise(m: Method, steps: list) -> None:
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
    read from). Only the CPU executor fuses them, in the method's own steps and in shape plans
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


class _KernelChain:
    """The kernel steps of a fused run of steps (``_fuse_depthwise_pointwise``,
    ``_fuse_channel_shuffles``), run one after the other where the fused call cannot run; it
    reads as the first one (the others' steps stay in place, ``_FusedAway``)."""

    __slots__ = ("in_slots", "kernels", "op_name", "what")

    def __init__(self, kernels_: list):
        self.kernels = kernels_
        self.in_slots = list(kernels_[0].in_slots)
        self.op_name = kernels_[0].op_name  # the first op's, where the fused step stands
        self.what = " then ".join(k.what for k in kernels_)

    def run(self, frame: list) -> None:
        for k in self.kernels:
            k.run(frame)

    def info(self) -> StepInfo:
        return self.kernels[0].info()


def _step_kernel(step) -> _KernelStep | None:
    """The kernel step of a kernel or prepared step; None for any other step."""
    if type(step) is _PreparedStep:
        return step.kernel if type(step.kernel) is _KernelStep else None
    return step if type(step) is _KernelStep else None


def _declared_spec(m: Method, slot: int) -> tuple | None:
    """(dtype, shape) of a value with a static declared tensor type, or None."""
    declared = value_type(m._values[slot]) if slot else None
    if not isinstance(declared, TensorType) or not declared.is_static:
        return None
    return np.dtype(declared.dtype.numpy), tuple(declared.shape)


def _fuse_channel_shuffles(m: Method, steps: list) -> None:
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
    executor fuses them, and only in the method's own steps (shape plans keep the four: their
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


def _channel_slices(m: Method, steps: list, pc: int, y: int, shape: tuple, readers, results, targets) -> list:
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


class _ShuffleSlices:
    """A channel shuffle whose result only channel Slices read, writing the Slices' results
    (``_fuse_channel_shuffles``): never bound (two results), it runs its call on the arena views
    of its results; where the call cannot run (inputs not C-contiguous arrays of the declared
    types), the ops' kernels one after the other."""

    __slots__ = ("call", "in_slots", "kernel", "out_slots")

    def run(self, frame: list) -> None:
        args = [frame[i] for i in self.in_slots]
        outs = [frame.planned[i] for i in self.out_slots]
        if all(type(a) is np.ndarray and a.flags.c_contiguous for a in args):
            try:
                self.call.write(outs, args)
            except TypeError:  # another type or shape than declared
                self.kernel.run(frame)
                return
            for slot, out in zip(self.out_slots, outs):
                frame[slot] = out
            return
        self.kernel.run(frame)

    def info(self) -> StepInfo:
        return self.kernel.info()


class _BoundRun:
    """Prepared steps ``steps`` (instructions start .. end - 1) whose inputs are all certain to
    be C-contiguous arrays of their declared types: each one's call bound to its arrays once per
    arena set (``Method._bind``), called back to back with no checks (``_bind_runs``)."""

    __slots__ = ("end", "k", "steps")

    def run(self, frame: list) -> int:
        if frame.bound is None:  # a prepared step's result was not of its declared type
            for step in self.steps:
                step.run(frame)
            return self.end
        calls = iter(frame.bound[self.k])
        try:
            for call in calls:
                call()
        except Exception as e:  # the failed call is the one before those the iterator has left
            kernel = self.steps[len(self.steps) - 1 - operator.length_hint(calls)].kernel
            raise kernels.failure(kernel.what, [frame[j] for j in kernel.in_slots], e) from e
        return self.end

    def info(self) -> StepInfo:
        return StepInfo("bound", "", (), (), None)


class _LoadTimeStep:
    """A kernel step computed once, at the method's first run (``_find_load_time``)."""

    __slots__ = ("kernel",)

    def run(self, frame: list) -> None:
        return None

    def info(self) -> StepInfo:
        return StepInfo("load", self.kernel.op_name, (), (), None)


def _straight_line(m: Method) -> tuple[int, dict[int, int], set[int]]:
    """What _find_load_time and _find_shape_steps start from: the first instruction a jump may
    reach or leave from (the steps before it run once, in order), how many steps write each
    slot, and the constants (arrays no step writes that are neither planned nor inputs)."""
    jumps = [pc for pc, s in enumerate(m._steps) if isinstance(s, _JumpStep)]
    limit = min([*jumps, *(m._steps[pc].dest for pc in jumps), len(m._steps)])
    writers: dict[int, int] = {}
    for step in m._steps:
        for slot in step.info().writes:
            writers[slot] = writers.get(slot, 0) + 1
    inputs = set(m._input_slots)
    constants = {
        i
        for i, v in enumerate(m._initial)
        if m._planned[i] is None and isinstance(v, np.ndarray) and i not in inputs and i not in writers
    }
    return limit, writers, constants


def _kernel_steps(m: Method, limit: int):
    """(pc, step, its kernel step, domain, op type) of the kernel steps (prepared or not) before
    ``limit``."""
    for pc in range(limit):
        step = m._steps[pc]
        kernel = step.kernel if isinstance(step, _PreparedStep) else step
        if isinstance(kernel, _KernelStep):
            domain, _, op_type = kernel.op_name.partition("::")
            yield pc, step, kernel, domain, op_type


class _ShapeStep:
    """A kernel step whose results depend only on the shapes of the method's inputs: Shape or
    Size of an input, then deterministic ops of such results and constants (the batch and
    sequence sizes an exported model computes its initial states and reshapes from). It keeps
    its results, read-only, for the input shapes of the run that made them, and while a run's
    inputs have those shapes stores them again instead of running the kernel (5-15 us a step)."""

    __slots__ = ("kept", "kernel")

    def __init__(self, kernel: _KernelStep):
        self.kernel = kernel
        self.kept: tuple | None = None  # (input shapes, ((slot, result), ...)); replaced whole

    def run(self, frame: list) -> None:
        kept = self.kept
        if kept is not None and kept[0] == frame.shapes:
            store = self.kernel.method._store
            for slot, value in kept[1]:
                store(frame, slot, value)
            return None
        self.kernel.run(frame)
        if frame.shapes is not None:
            results = []
            for slot in self.kernel.out_slots:
                if slot:
                    value = np.array(frame[slot], copy=True)  # its own memory: the arena is reused
                    value.flags.writeable = False
                    results.append((slot, value))
            self.kept = (frame.shapes, tuple(results))
        return None

    def info(self) -> StepInfo:
        return self.kernel.info()


_SHAPE_OF = {"onnx::Shape", "onnx::Size"}


def _find_shape_steps(m: Method) -> None:
    """The kernel steps (prepared or not) before the first jump whose results depend only on
    the input shapes (``_ShapeStep``). A value's *shape* is known from the input shapes when it
    is a method input no step writes, a constant, or the result of an op whose output shapes
    follow from its inputs' shapes (``ir.SHAPE_FROM_SHAPES``), or from their shapes and the
    values at some positions that are themselves known (``ir.SHAPE_FROM_VALUES``). A value is
    *known* from the input shapes when it is Shape or Size of such a value, or the result of a
    deterministic ONNX op (``ir.computed_once``) of constants and known values; a prepared step
    of known values stays one (a bound call costs less than storing a kept result), its results
    known all the same (the exported transformer's sizes are products of them). Known results
    are neither inputs nor results of the method, and have one writer each. The values whose
    shape is known go to ``m._shaped`` (what shape plans hold, ``_ShapePlan``)."""
    limit, writers, known = _straight_line(m)
    inputs, results = set(m._input_slots), set(m._output_slots)
    if m._load_time:
        known.update(o for k in m._load_time for o in k.out_slots if o)
    shaped = known | {i for i in inputs if i not in writers}
    for pc, step, kernel, domain, op_type in _kernel_steps(m, limit):
        onnx_op = op_type if domain == "onnx" else None
        ins = [i for i in kernel.in_slots if i]
        outs = [o for o in kernel.out_slots if o]
        single = all(writers.get(o) == 1 and o not in inputs for o in outs)
        if onnx_op in SHAPE_FROM_SHAPES:
            shape_follows = all(i in shaped for i in ins)
        elif onnx_op in SHAPE_FROM_VALUES:
            by_value = SHAPE_FROM_VALUES[onnx_op]
            shape_follows = all(
                i == 0 or (i in known if k in by_value else i in shaped)
                for k, i in enumerate(kernel.in_slots)
            )
        else:
            shape_follows = False
        if shape_follows and single:
            shaped.update(outs)
        if type(step) not in (_KernelStep, _PreparedStep) or not ins or not outs or not single:
            continue
        if kernel.op_name in _SHAPE_OF:
            derived = ins[0] in shaped
        else:
            derived = all(i in known for i in ins) and computed_once(
                "" if domain == "onnx" else domain, op_type
            )
        if (
            not derived
            or any(isinstance(a, SubPlan) for a in kernel.attrs.values())
            or any(o in results for o in outs)
        ):
            continue
        known.update(outs)
        shaped.update(outs)
        if type(step) is _KernelStep:
            m._steps[pc] = _ShapeStep(kernel)
            m._shape_steps = True
    m._shaped = shaped


# ---- shape plans ---------------------------------------------------------------------------------
#
# An exported model with a symbolic batch, image size or sequence length declares most values
# without static shapes, so they get no arena place and their kernels run as kernels: each
# allocates its result and a Conv makes its plan's calls again for the new arrays (about 50 us of
# Python a call on the exported convnets, more than the arithmetic of a 32 x 32 image). But a
# value whose shape follows from the input shapes (``_find_shape_steps``) has the same shape at
# every run with the same input shapes. A *shape plan* is the method for one tuple of input
# shapes: the run that first meets them notes the dtype and shape of each such value; the next
# run with them makes the plan, in which every kernel step that has a prepared call for those
# types becomes one (``_PreparedStep``), writing into a place of the plan's own arena (placed by
# the values' lifetimes, as the file's arenas are), its runs bound as the method's are. Runs with
# those shapes then take arena sets of the plan.

# Shape plans a method keeps (the most recently used): each holds an arena set per concurrent run.
SHAPE_PLANS = 8
_ALIGNMENT = 64


def _find_shape_plan_steps(m: Method) -> None:
    """The kernel steps before the first jump that a shape plan may prepare: an op with a
    prepared call and one output, which has no arena place, follows from the input shapes
    (``m._shaped``), has one writer and is not a method input; each input a planned value, a
    constant, or a value that follows from the input shapes. And the outputs of the other kernel
    steps there that a shape plan may give a place (the same conditions, not a method result): a
    kernel writes its result there, or the method copies it in, so that the prepared call that
    reads it sees the same array at every run (a Conv's calls are made for its arrays)."""
    limit, writers, _ = _straight_line(m)
    inputs, results = set(m._input_slots), set(m._output_slots)
    found, held = [], []
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
        if (
            type(step) is not _KernelStep
            or out is None
            or not kernel.in_slots
            or kernels.find_prepared("" if domain == "onnx" else domain, op_type) is None
            or m._planned[out] is not None
            or out not in m._shaped
            or writers.get(out) != 1
            or out in inputs
            or any(isinstance(a, SubPlan) for a in kernel.attrs.values())
        ):
            continue
        if all(i and _plan_input(m, i) for i in kernel.in_slots):
            found.append(pc)
    m._shape_plan_steps = found
    m._shape_plan_held = held
    m._shape_plan_limit = limit
    m._shape_plan_notes = [tuple(v for v in s.info().writes if v in m._shaped) for s in m._steps]


def _plan_input(m: Method, i: int) -> bool:
    """Whether slot ``i`` is an input a shape plan's prepared call may read: a planned value, a
    constant, or a value whose shape follows from the input shapes."""
    return (
        m._planned[i] is not None
        or isinstance(m._initial[i], np.ndarray)
        or (m._initial[i] is None and i in m._shaped)
    )


def _note(seen: dict, slot: int, value) -> None:
    if type(value) is np.ndarray:
        seen[slot] = (value.dtype, value.shape)


class _ShapePlans:
    """A method's shape plans by input shapes, the most recently used last. An entry is what the
    first run with those shapes noted (the next run makes the plan from it), the plan, or None
    where the plan would hold no value (the method's own steps run)."""

    __slots__ = ("entries", "lock")

    def __init__(self):
        self.entries: dict[tuple, dict | _ShapePlan | None] = {}
        self.lock = threading.Lock()

    def find(self, m: Method, shapes: tuple | None) -> tuple[_ShapePlan | None, dict | None]:
        """(the plan for ``shapes`` or None, a dict for the run to note its values in or None)."""
        if shapes is None or None in shapes:  # a sequence input: its shape says nothing
            return None, None
        with self.lock:
            if shapes not in self.entries:
                return None, {}
            entry = self.entries.pop(shapes)
            self.entries[shapes] = entry  # the most recently used last
        if not isinstance(entry, dict):
            return entry, None
        plan = _ShapePlan(m, entry)
        if not plan.layout:
            plan = None
        with self.lock:
            if shapes in self.entries:
                self.entries[shapes] = plan
        return plan, None

    def seen(self, shapes: tuple, noted: dict) -> None:
        with self.lock:
            if shapes not in self.entries:
                self.entries[shapes] = noted
                while len(self.entries) > SHAPE_PLANS:
                    del self.entries[next(iter(self.entries))]


class _ShapePlan:
    """A method's steps for one tuple of input shapes: ``steps`` with the kernel steps that have
    prepared calls for the noted types made _PreparedSteps, ``fast_steps`` with their runs bound
    (``_bind_runs``), and ``layout``, the place in the plan's arena of each value they write and of
    each method input they read (slot → (offset, dtype, shape)). Arena sets (the file's arenas and
    one of the plan's) are made as runs need them and kept in ``pool``."""

    __slots__ = ("bound_runs", "fast_steps", "layout", "method", "nbytes", "pool", "steps")

    def __init__(self, m: Method, seen: dict):
        self.method = m
        self.pool: list[tuple[list, list, list]] = []
        steps = list(m._steps)
        inputs = set(m._input_slots)
        held: dict[int, tuple] = {}  # slot → (dtype, shape) of the values the plan's arena holds
        for pc in m._shape_plan_steps:
            kernel = steps[pc]
            out = kernel.out_slots[0]
            specs = [_known_spec(m, i, seen) for i in kernel.in_slots]
            if out not in seen or None in specs:
                continue
            domain, _, op_type = kernel.op_name.partition("::")
            factory = kernels.find_prepared("" if domain == "onnx" else domain, op_type)
            call = factory(kernel.attrs, specs, seen[out])
            if call is None:
                continue
            step = steps[pc] = _PreparedStep()
            step.call, step.in_slots, step.kernel, step.out_slot = call, list(kernel.in_slots), kernel, out
            held[out] = seen[out]
            held.update((i, seen[i]) for i in kernel.in_slots if i in inputs and m._planned[i] is None)
        for pc in m._shape_plan_outputs:
            kernel = steps[pc]
            specs = [None if i == 0 else _known_spec(m, i, seen) for i in kernel.in_slots]
            outs = {o: seen[o] for o in kernel.out_slots if o in seen}
            if any(s is None for i, s in zip(kernel.in_slots, specs) if i):
                continue
            step = _prepared_outputs(m, kernel, specs, outs)
            if step is None:
                continue
            steps[pc] = step
            held.update((o, outs[o]) for o, w in zip(step.out_slots, step.wanted) if w)
        held.update((o, seen[o]) for o in m._shape_plan_held if o in seen and o not in held)
        _fuse_epilogues(m, steps)
        _fuse_depthwise_pointwise(m, steps)
        self.steps = steps
        self.fast_steps, self.bound_runs = _bind_runs(m, steps, _static_inputs(m) | (inputs & set(held)))
        spans = _spans(m, steps, held)
        sizes = {v: int(np.dtype(d).itemsize) * prod(s) for v, (d, s) in held.items()}
        offsets, self.nbytes = _place(sizes, spans)
        self.layout = {v: (offsets[v], np.dtype(d), tuple(s)) for v, (d, s) in held.items()}

    def acquire(self) -> tuple[list, list, list]:
        """An arena set of this plan that no other run holds (a new one when all are taken)."""
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
        return planned, initial, m._bind(planned, initial, self.bound_runs)


def _known_spec(m: Method, i: int, seen: dict) -> tuple | None:
    """(dtype, shape) of input slot ``i`` of a prepared call in a shape plan, or None."""
    known = m._planned[i] if m._planned[i] is not None else m._initial[i]
    if isinstance(known, np.ndarray):
        return known.dtype, known.shape
    return seen.get(i) if known is None else None


def _spans(m: Method, steps: list, held: dict) -> dict[int, tuple[int, int]]:
    """Each held value's lifetime, (first write, last read) with both ends inclusive so that a
    step's output never shares bytes with its inputs: method inputs from before the first step,
    method results and values read from the first jump on (in a loop, perhaps again) to the end."""
    n, limit, inputs = len(steps), m._shape_plan_limit, set(m._input_slots)
    first = {v: -1 for v in held if v in inputs}
    last: dict[int, int] = {}
    for pc, step in enumerate(steps):
        info = step.info()
        for v in info.reads:
            if v in held:
                last[v] = max(last.get(v, -1), pc if pc < limit else n)
        for v in info.writes:
            if v in held:
                first.setdefault(v, pc)
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


def _find_load_time(m: Method) -> None:
    """The kernel steps whose inputs are all constants (or their results): deterministic ONNX
    ops (``ir.computed_once``) before the first jump, whose outputs have no arena place (the
    writer leaves them out, emit/plan.py), are tensors and are not results of the method. Such
    a step runs once, at the first run, and its results become constants: the light models'
    fully connected weights (ConstantOfShape, 151 MB) are made once, not at every run."""
    limit, writers, known = _straight_line(m)
    results = set(m._output_slots)
    found = []
    for pc, _, kernel, domain, op_type in _kernel_steps(m, limit):
        outs = [o for o in kernel.out_slots if o]
        if (
            not any(kernel.in_slots)
            or not all(i == 0 or i in known for i in kernel.in_slots)
            or not computed_once("" if domain == "onnx" else domain, op_type)
            or any(isinstance(a, SubPlan) for a in kernel.attrs.values())
            or not outs
            or any(
                m._planned[o] is not None
                or o in results
                or writers.get(o) != 1
                or not isinstance(value_type(m._values[o]), TensorType)
                for o in outs
            )
        ):
            continue
        found.append(kernel)
        known.update(outs)
        m._steps[pc] = placeholder = _LoadTimeStep()
        placeholder.kernel = kernel
    m._load_time = found or None


def _static_inputs(m: Method) -> set[int]:
    """The method inputs with arena views of their declared static type: every run copies the
    input into its view (``_call``), so the view holds an array of that type."""
    certain = set()
    for i in m._input_slots:
        view, declared = m._planned[i], value_type(m._values[i])
        if (
            view is not None
            and isinstance(declared, TensorType)
            and declared.is_static
            and declared.dtype.numpy == view.dtype
            and tuple(declared.shape) == view.shape
        ):
            certain.add(i)
    return certain


def _bind_runs(m: Method, steps: list, certain_inputs: set[int]) -> tuple[list, list[list[_PreparedStep]]]:
    """Group the prepared steps whose inputs are certain: constants, the method inputs of
    ``certain_inputs`` (with arena views, copied into them whatever their layout, ``_call``), and
    the outputs of prepared steps before them (always in their arena views). Runs do not span a
    jump target. Returns ``steps`` with each run replaced by a _BoundRun at its first index, and
    the runs' steps."""
    writers: dict[int, int] = {}
    for step in steps:
        for slot in step.info().writes:
            writers[slot] = writers.get(slot, 0) + 1
    inputs = set(m._input_slots)
    certain = set()
    for i, value in enumerate(m._initial):
        if m._planned[i] is None and type(value) is np.ndarray and value.flags.c_contiguous:
            certain.add(i)
    certain -= inputs
    certain |= certain_inputs
    certain -= set(writers)
    targets = {s.dest for s in steps if isinstance(s, _JumpStep)}
    fast_steps, bound_runs = list(steps), []
    run: list[int] = []
    for pc, step in enumerate([*steps, None]):
        if isinstance(step, _FusedAway):  # nothing to run: a run goes on past it
            continue
        ok = (
            isinstance(step, _PreparedStep)
            and all(i in certain for i in step.in_slots)
            and writers.get(step.out_slot) == 1
            and step.out_slot not in inputs
        )
        if run and (not ok or pc in targets):
            bound = _BoundRun()
            bound.k, bound.end, bound.steps = len(bound_runs), run[-1] + 1, [steps[j] for j in run]
            bound_runs.append(bound.steps)
            fast_steps[run[0]] = bound
            run = []
        if isinstance(step, _PreparedStep) and writers.get(step.out_slot) == 1:
            certain.add(step.out_slot)
        if ok:
            run.append(pc)
    return fast_steps, bound_runs


def _missing_kernel(name: str, where: str):
    def fn(ctx, *args, **attrs):
        raise UnsupportedOpError(f"{where}: no CPU kernel for {name}")

    return fn


def _prepare_kernel(m: Method, call, pc: int, where: str, label: str, operators, n: int) -> _KernelStep:
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


class _MoveStep:
    __slots__ = ("dst", "method", "src")

    def run(self, frame: list) -> None:
        self.method._store(frame, self.dst, frame[self.src])

    def info(self) -> StepInfo:
        return StepInfo("move", "", (self.src,), (self.dst,), None)


def _prepare_move(m: Method, call, pc: int, where: str, label: str, operators, n: int) -> _MoveStep:
    step = _MoveStep()
    step.method = m
    step.src = m._index(call.moveFrom, where, "move_from")
    step.dst = m._index(call.moveTo, where, "move_to")
    return step


class _JumpStep:
    __slots__ = ("cond", "dest", "where")

    def run(self, frame: list) -> int | None:
        v = frame[self.cond]
        if isinstance(v, (bool, np.bool_)):
            return None if v else self.dest
        a = np.asarray(v)
        if a.size != 1:
            raise ShapeError(f"{self.where}: the jump condition has {a.size} elements, expected one")
        return None if bool(a.reshape(-1)[0]) else self.dest

    def info(self) -> StepInfo:
        return StepInfo("jump", "", (self.cond,), (), self.dest)


def _prepare_jump(m: Method, call, pc: int, where: str, label: str, operators, n: int) -> _JumpStep:
    step = _JumpStep()
    step.where = where
    step.cond = m._index(call.condValueIndex, where, "the condition")
    if not 0 <= call.destinationInstruction <= n:
        raise ModelFormatError(
            f"{where}: jump to instruction {call.destinationInstruction}; the chain has {n}"
        )
    step.dest = int(call.destinationInstruction)
    return step


class _FreeStep:
    __slots__ = ("method", "slot")

    def run(self, frame: list) -> None:
        if frame.planned[self.slot] is None:
            frame[self.slot] = None

    def info(self) -> StepInfo:
        return StepInfo("free", "", (), (), None)


def _prepare_free(m: Method, call, pc: int, where: str, label: str, operators, n: int) -> _FreeStep:
    step = _FreeStep()
    step.method = m
    step.slot = m._index(call.valueIndex, where, "value_index")
    return step


class _DelegateStep:
    """A prepared DelegateCall: the delegate's inputs in, its outputs stored into their slots;
    ``keep`` (set by ``_keep_on_device``) marks outputs that stay in device memory, bound to
    their slots as the backend's device tensors."""

    __slots__ = ("declared", "delegate", "in_slots", "keep", "method", "out_slots")

    def run(self, frame: list) -> None:
        outputs = self.delegate.run(
            [frame[i] for i in self.in_slots], self.declared, frame.options, self.keep
        )
        for slot, value in zip(self.out_slots, outputs):
            if not slot:
                continue
            if isinstance(value, DeviceTensor):
                frame[slot] = value
            else:
                self.method._store(frame, slot, value)

    def info(self) -> StepInfo:
        writes = tuple(i for i in self.out_slots if i)
        return StepInfo("delegate", self.delegate.backend, tuple(self.in_slots), writes, None)


def _keep_on_device(m: Method) -> None:
    """Mark the delegate outputs that stay in device memory: those written once, read only by
    delegates that take this backend's device tensors, and not a result of the method. A
    consumer that falls back to the CPU at run time copies them to the host then."""
    readers: dict[int, list] = {}
    writers: dict[int, int] = {}
    for step in m._steps:
        info = step.info()
        for slot in info.reads:
            readers.setdefault(slot, []).append(step)
        for slot in info.writes:
            writers[slot] = writers.get(slot, 0) + 1
    results = set(m._output_slots)
    for step in m._steps:
        if not isinstance(step, _DelegateStep) or not step.delegate.keeps_on_device():
            continue
        keep = [
            bool(slot)
            and slot not in results
            and writers.get(slot) == 1
            and bool(readers.get(slot))
            and all(
                isinstance(r, _DelegateStep) and r.delegate.reads_device_tensors_of(step.delegate)
                for r in readers[slot]
            )
            for slot in step.out_slots
        ]
        if any(keep):
            step.keep = keep


def _prepare_delegate(m: Method, call, pc: int, where: str, label: str, operators, n: int) -> _DelegateStep:
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
    step.method, step.delegate, step.keep = m, delegate, None
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
