"""Loading and running .pte files: a Module of Methods, each an executor over one plan's chain.

``load`` maps the file, parses it, and prepares every plan once: constants become read-only
views into the mapped constant segment, planned tensors views into one arena per memory id,
and each instruction a step with its arguments already split and decoded (docs/pte.md).
Kernels are the same CPU kernels ``offload.evaluate`` calls, called the same way, so results
match it bit for bit. A Module may be run from several threads at once: each run of a Method
takes a set of arenas from the Method's pool (a new set is allocated when every set is in use, so
a Method holds as many as it has had concurrent runs) and gives it back when its outputs are
copied out; backends serialize the runs of a delegate handle themselves. A Method with symbolic
shapes keeps a plan for each of its last input shapes (``_ShapeSpecialization``), with a pool of its own.
"""

from __future__ import annotations

import json
import mmap
import os
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from offload.delegates.backend import DeviceTensor
from offload.errors import (
    DTypeError,
    ModelFormatError,
    OffloadError,
    ShapeError,
    UnsupportedOpError,
)
from offload.ir import TensorType
from offload.ir.budget import ARENAS as ARENA_BUDGET
from offload.profile import Profile, now, profiling
from offload.schemas import pte as pte_format
from offload.schemas.generated.executorch_flatbuffer.KernelTypes import KernelTypes

from . import delegates as dl
from .bound_runs import _bind_runs, _new_input_places, _place_inputs, _static_inputs
from .concat_fusions import _fuse_concat_sources
from .decided_paths import run_key
from .device_inputs import DeviceInput, place
from .folded_values import note_known
from .fusions import _fuse_channel_shuffles, _fuse_depthwise_pointwise, _fuse_epilogues
from .inputs import check_inputs, plain_array_ports, plain_arrays
from .instructions import _PREPARE, _keep_on_device, _label
from .int8_fusions import _fuse_nhwc_int8_convs
from .load_time import _find_load_time
from .ml_chains import fuse_classifier_chains
from .options import RunOptions
from .pte_values import (
    constant_array,
    planned_view,
    scalar_value,
    tensor_decl,
    tensor_name,
    value_type,
)
from .quantize_pairs import _fuse_quantize_pairs
from .shape_specializations import (
    _find_shape_steps,
    _find_specializable_steps,
    _note,
    _prepare_outputs_steps,
    _ShapeSpecializations,
)
from .steps import (
    StepInfo,
    SubPlan,
    _DelegateStep,
    _describe,
    _fits,
    _Frame,
    _KernelStep,
    _layout_only,
    _PreparedStep,
)
from .table_fusions import _fuse_8bit_tables

MAX_FILE_BYTES = 1 << 40
HOST, DEVICE = "host", "device"  # where a run's delegate results go (``Method.run``'s output_device)
# The arenas one plan's run uses, all together: the machine's arena budget (ir/budget.py;
# environment OFFLOAD_MAX_ARENA_BYTES).
MAX_ARENA_BYTES = ARENA_BUDGET.value


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
        self,
        inputs: Mapping[str, Any],
        options: RunOptions | None = None,
        profile: Profile | None = None,
        output_device: str = HOST,
    ) -> dict[str, Any]:
        return self._plans[0].run(inputs, options, profile, output_device)

    def array_device(self, backend: str):
        """What a caller makes input arrays on so that delegates of ``backend`` read them where
        they are (the opencl backend's ``pyopencl.CommandQueue``: its ``.context`` and ``.device``;
        the cuda backend's ``cupy.cuda.Device``); None when no delegate of it runs on its backend."""
        found = (d.array_device() for m in self._plans for d in m._delegates.values() if d.backend == backend)
        return next((a for a in found if a is not None), None)

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
        sets of a shape specialization go with the plan)."""
        self._arena_ids.add(id(arena))
        weakref.finalize(arena, self._arena_ids.discard, id(arena))

    def _detach(self, value):
        """``value`` with any array that lives in an arena copied out (arenas are reused)."""
        if isinstance(value, np.ndarray):
            if value.base is None:  # owns its memory: no arena's
                return value
            root = value
            while isinstance(root.base, np.ndarray):
                root = root.base
            return value.copy(order="K") if id(root) in self._arena_ids else value
        if isinstance(value, list):
            for x in value:  # a loop, not any(): ZipMap's maps come here every run
                if isinstance(x, (np.ndarray, list)):
                    break
            else:  # ZipMap's dicts, strings
                return value
            out = [self._detach(x) for x in value]
            return value if all(a is b for a, b in zip(out, value)) else out
        return value


def _kept(value, into: np.ndarray):
    """``value`` copied into ``into`` where it is an array of its dtype and shape (``into``
    returned), else ``value`` as it is (a copy of arena memory: the run's arena set is reused)."""
    if type(value) is np.ndarray and value.dtype == into.dtype and value.shape == into.shape:
        np.copyto(into, value)
        return into
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _state_places(m: Method) -> list:
    """The input slot of each state (in ``_states``' order) whose place of its own (``_place_inputs``:
    no step writes it) a run may keep the state's new value in, for the next run to read where it
    lies (no copy in); None where the input has none, and for all where a state's new value is an
    input's value itself (copied into one place, it could overwrite another state's value before
    that is copied out)."""
    n = len(m._states)
    updates = m._output_slots[len(m._output_slots) - n :]
    if set(updates) & set(m._input_slots):
        homes = [None] * n
    else:
        slots = [m._input_slots[position] for position, _ in m._states]
        homes = [s if s in m._input_places else None for s in slots]
    m._state_homes = homes
    return homes


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
        self._state_homes: list | None = None  # _call's: the input slot each state may be kept in
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
        # a shape specialization may prepare (_find_specializable_steps); the plans by input shapes.
        self._shaped: set[int] = set()
        # positions of the inputs whose values join their shapes in a run's key (decided_paths)
        self._deciding: tuple[int, ...] = ()
        self._specializable_steps: list[int] = []
        self._specialization_held: list[int] = []
        self._specialization_limit = 0
        self._specialization_notes: list[tuple[int, ...]] = []  # by instruction: what a first run notes
        self._known: set[int] = set()  # values known from a run's key (folded_values)
        self._known_notes: list[tuple[int, ...]] = []  # by instruction: the known values a first run notes
        self._specialized_outputs: list[int] = []  # kernel steps of several outputs (_prepare_outputs_steps)
        self._read_slots: set[int] = set()  # what any step or the method's results read
        self._specializations = _ShapeSpecializations()
        self._callees: set[int] = set()
        self._fallbacks: set[int] = set()  # fallback plans of delegates that run on a backend
        self._delegates: dict[int, dl.Delegate] = {}
        # Input slot → the delegates that read it, where only delegates that take device tensors
        # do (_keep_on_device): an input in device memory may stay there for them.
        self._device_readers: dict[int, list[dl.Delegate]] = {}
        # Small static inputs' places of their own in each arena set (bound_runs._place_inputs):
        # slot → (dtype, shape). They are not arena views of the file's plan (``planned``).
        self._input_places: dict[int, tuple] = {}
        self._unsupported: list[str] = []
        self._missing_cache: list[str] | None = None
        self._plain_ports: tuple | None = None  # inputs.plain_array_ports of the inputs, () if none
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
        return sum(
            v.nbytes for i, v in enumerate(self._planned) if v is not None and i not in self._input_places
        )

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
        return {i: v for i, v in enumerate(self._planned) if v is not None and i not in self._input_places}

    # ---- loading -----------------------------------------------------------------------------

    def _value_where(self, i: int) -> str:
        name = tensor_name(self._values[i])
        return f"{self.where}: value {i}" + (f" '{name}'" if name else "")

    def _decode_values(self) -> None:
        sizes = self.plan.nonConstBufferSizes
        buffer_sizes = [int(s) for s in sizes] if sizes is not None else []
        if any(s < 0 for s in buffer_sizes):
            raise ModelFormatError(f"{self.where}: negative non_const_buffer_sizes {buffer_sizes}")
        total, limit = sum(buffer_sizes[1:]), MAX_ARENA_BYTES
        if total > limit:  # refused before any arena is allocated
            raise ModelFormatError(
                f"{self.where}: its arenas (non_const_buffer_sizes) take {total} bytes, over the {limit}-byte "
                f"arena budget ({ARENA_BUDGET.explain(limit)})"
            )
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
        except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than the parser goes
            raise ModelFormatError(f"{self.where}: the {stem} names are not JSON: {e}") from None
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
        _find_specializable_steps(self)
        _prepare_outputs_steps(self)
        _fuse_epilogues(self, self._steps)
        _fuse_depthwise_pointwise(self, self._steps)
        _fuse_channel_shuffles(self, self._steps)
        _fuse_nhwc_int8_convs(self, self._steps)
        _fuse_concat_sources(self, self._steps)
        _fuse_8bit_tables(self, self._steps)
        _fuse_quantize_pairs(self, self._steps)
        fuse_classifier_chains(self, self._steps)
        _keep_on_device(self)
        _place_inputs(self)
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
        self,
        inputs: Mapping[str, Any],
        options: RunOptions | None = None,
        profile: Profile | None = None,
        output_device: str = HOST,
    ) -> dict[str, Any]:
        """Run the method on named inputs (checked against the declared dtypes and shapes; numpy
        arrays, DLPack exporters, or arrays in device memory: ``runtime.device_inputs``);
        ``options`` bound it by a deadline or a stop flag (``RunTerminated``); ``profile``
        records where its time goes (``runtime.profile``). ``output_device="device"`` returns
        each result a delegate computed on its backend as that device's array (a
        ``pyopencl.array.Array``, a CuPy array) instead of copying it to the host; results
        computed on the CPU are numpy arrays either way."""
        if output_device not in (HOST, DEVICE):
            raise OffloadError(f"output_device must be '{HOST}' or '{DEVICE}', not {output_device!r}")
        if self._missing_cache is None:
            self._missing_cache = self._missing()
        missing = self._missing_cache
        if missing:
            raise UnsupportedOpError(
                f"{self.where}: no CPU kernel for {', '.join(missing)}; these ops cannot run in this version of offload"
            )
        if self._plain_ports is None:
            self._plain_ports = plain_array_ports([(p.name, p.type) for p in self.inputs]) or ()
        args = plain_arrays(self._plain_ports, inputs) if self._plain_ports else None
        if args is None:
            args = check_inputs([(p.name, p.type) for p in self.inputs], inputs, device=True)
        options = options.start() if options else None
        on_device = output_device == DEVICE
        if self._states:
            return self._run_with_states(args, options, profile, on_device)
        if profile is None:
            return dict(zip(self.output_names, self._call(args, options, None, on_device)))
        with profiling(profile):
            return dict(zip(self.output_names, self._call(args, options, profile, on_device)))

    def _run_with_states(self, args: list, options, profile, on_device: bool = False) -> dict[str, Any]:
        """One run of a method with state: runs of it take turns, each sees the last one's states."""
        with self._state_lock:
            states = self._current_states()
            full = list(args)
            for position, port in sorted(self._states, key=lambda s: s[0]):
                full.insert(position, states[port.name])
            # The new states are copied straight into the arrays that hold them (_call's
            # ``states_into``, which may swap in their inputs' places), read by no one but the next run.
            into = [states[port.name] for _, port in self._states]
            if profile is None:
                results = self._call(full, options, None, on_device, into)
            else:
                with profiling(profile):
                    results = self._call(full, options, profile, on_device, into)
            n = len(self._states)
            for (_, port), value, kept in zip(self._states, results[len(results) - n :], into):
                if value is kept:
                    states[port.name] = kept
                else:  # not of the declared type: converted, as a new array
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

    def _call(
        self,
        args: list,
        options: RunOptions | None = None,
        profile: Profile | None = None,
        device_outputs: bool = False,
        states_into: list | None = None,
    ) -> list:
        """The method's results for ``args``; with ``states_into`` (arrays, one for each of the
        last results), each of those results that is an array of its array's dtype and shape is
        copied into it and returned as it, while the run still holds its arena set."""
        if self._load_time is not None:
            self._compute_load_time()
        self.allocated_results = 0
        # (a sequence input has no shape: no op that shape steps follow reads one)
        shapes = run_key(args, self._deciding) if self._shape_steps or self._specializable_steps else None
        plan, seen = self._specializations.find(self, shapes) if self._specializable_steps else (None, None)
        arena_set = plan.acquire() if plan is not None else self._acquire()
        planned, initial, bound = arena_set
        start = now() if profile is not None else 0
        try:
            frame = _Frame(initial)
            frame.planned, frame.bound, frame.options, frame.profile = planned, bound, options, profile
            frame.shapes = shapes if self._shape_steps else None
            frame.device_outputs = device_outputs
            for slot, value in zip(self._input_slots, args):
                view = planned[slot]
                if value is view:  # a state the last run left in its input's place (_state_places)
                    continue
                if (  # the common case, first
                    type(value) is np.ndarray
                    and view is not None
                    and value.shape == view.shape
                    and value.dtype == view.dtype
                ):
                    np.copyto(view, value, casting="no")  # whatever its layout (_bind_runs counts on it)
                    continue
                if isinstance(value, DeviceInput):
                    value = place(value, self._device_readers.get(slot), profile)
                if view is None or isinstance(value, DeviceTensor):
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
                self._specializations.seen(shapes, seen)
            detach = self.module._detach
            # a result in its planned view is in an arena: copied out (C-contiguous, as the view)
            n = len(self._output_slots) - len(states_into) if states_into else len(self._output_slots)
            results = [
                frame[i].copy() if frame[i] is planned[i] else detach(frame[i])
                for i in self._output_slots[:n]
            ]
            if states_into:
                homes = self._state_homes if self._state_homes is not None else _state_places(self)
                for k, i in enumerate(self._output_slots[n:]):
                    if homes[k] is not None:
                        states_into[k] = planned[homes[k]]
                    results.append(_kept(frame[i], states_into[k]))
            if device_outputs:
                results = [r.as_array() if isinstance(r, DeviceTensor) else r for r in results]
            return results
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
        each value a shape specialization may hold go into it as the steps write them (_ShapeSpecializations)."""
        pc, n = 0, len(steps)
        if seen is not None:
            for slot in self._input_slots:
                _note(seen, slot, frame[slot])
            notes, known = self._specialization_notes, self._known_notes
        while pc < n:
            if options is not None:
                options.check(self.where)
            step = steps[pc]
            start = now() if profile is not None else 0
            nxt = step.run(frame)
            if profile is not None:
                end = now()
                name, cat, args = _describe(step)
                profile.add(name, cat, start, end, pc=pc, **args)
            if seen is not None:
                for slot in notes[pc]:
                    _note(seen, slot, frame[slot])
                for slot in known[pc]:
                    note_known(seen, slot, frame[slot])
            pc = pc + 1 if nxt is None else nxt

    def _compute_load_time(self) -> None:
        """Run the load-time steps once and keep their results as constants (read-only): in the
        initial frame every arena set copies, and in the sets made before (the first one)."""
        with self._load_time_lock:
            if self._load_time is None:
                return
            frame = _Frame(self._initial)
            frame.planned, frame.bound, frame.options, frame.profile = [None] * len(frame), None, None, None
            frame.shapes, frame.device_outputs = None, False
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
        _new_input_places(self, planned, initial)
        return planned, initial

    def _bind(self, planned: list, initial: list, bound_runs: list | None = None) -> list[list] | None:
        """Each _BoundRun's calls (the method's, or ``bound_runs``) with the arrays of one arena
        set fixed in them; None where a call refuses its arrays (a file whose declared shapes do
        not fit its op, as a Gemm of [3, 4] by [2, 3]): the runs then take their steps one by
        one, and the op's kernel names what is wrong when it runs."""
        try:
            return [
                [s.bound(planned, initial) for s in run]
                for run in (self._bound_runs if bound_runs is None else bound_runs)
            ]
        except (TypeError, ValueError):
            return None

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
