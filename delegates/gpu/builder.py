"""The device-independent half of every ``api.Builder``: a plan's values and where their buffers go.

A backend's builder adds ``program`` and ``launch`` (and ``gemm`` where it has a BLAS); this class
keeps what launchers read (shapes, dtypes, constants), what they declare (views, init-time
constants, step scratch buffers), and places buffers once every launch is recorded: pinned values
(inputs, outputs, weights) get their own, the others share pooled buffers whose lifetimes (first
to last launch reading or writing them) do not overlap. A launch is enqueued after the previous
one on one queue/stream, so a buffer can pass to the next value right after its last reader.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from offload.errors import (
    KernelError,
    ModelFormatError,
    OffloadError,
    SpecializationError,
    UnsupportedOpError,
)

from .api import Buf, Scratch, source, storage_dtype
from .control import RECORD, loop_lifetimes
from .ops import LAUNCH
from .plan import MAX_ELEMENTS, PRECISIONS, attribute, step_shapes
from .slices import concat_slots


def host_weights(plan: dict, weights, backend: str) -> dict[int, np.ndarray]:
    """The plan's weights by value id, from the tensors init was given by name, and the small
    constants of its branches and loop bodies, which the plan holds itself."""
    missing = sorted(set(plan["weights"].values()) - set(weights))
    if missing:
        raise ModelFormatError(f"{backend} backend: weights not given: {', '.join(missing)}")
    host = {int(i): np.asarray(weights[name]) for i, name in plan["weights"].items()}
    for i, w in host.items():
        if list(w.shape) != plan["shapes"][str(i)]:
            raise ModelFormatError(
                f"{backend} backend: weight {i} has shape {list(w.shape)}, the plan says {plan['shapes'][str(i)]}"
            )
    for i, value in plan.get("constants", {}).items():
        host[int(i)] = attribute(value)
    return host


class PlanValues:
    backend = "gpu"  # names the backend in error messages
    launches: list  # what the subclass records, in order; each has ``args``

    def __init__(self, plan: dict, host: dict[int, np.ndarray], inputs: dict[int, tuple] | None = None):
        """``inputs``: the concrete shapes of the plan's inputs (a symbolic plan's specialization);
        ``host`` also holds the host inputs' values then."""
        # None: a rank the plan does not know, learnt when a step (or an input) gives the value
        self.shapes = {int(i): None if s is None else tuple(s) for i, s in plan["shapes"].items()}
        self.shapes.update(inputs or {})
        dtypes = plan.get("dtypes") or {}
        self.dtypes = {i: np.dtype(dtypes.get(str(i), "float32")) for i in self.shapes}
        # How float32 values are stored on the device ("fp16": as half; kernels compute in float),
        # except the values ``kept`` as float32 (mixed precision: plan "fp32"). ``precision`` is
        # the storage the step being recorded runs on: the plan's, or fp32 for a step marked so.
        self.plan_precision = plan.get("precision", "fp32")
        if self.plan_precision not in PRECISIONS:
            raise ModelFormatError(
                f"{self.backend} backend: plan precision {self.plan_precision!r} (takes fp32, fp16)"
            )
        self.precision = self.plan_precision
        self.kept = {int(i) for i in plan.get("fp32", {})}
        self.host = host  # weights, then init-time constants: uploaded once
        self.alias_of: dict[int, int] = {}
        self.written_in_place: set[int] = set()  # Conv outputs aliased to their residual (ops/conv.py)
        # Conv outputs that may be stored into their slice of a Concat's output (``slices.py``),
        # and those whose Conv did: the Concat copies only the others
        self.concat_slots: dict = {}
        self.sliced: set[int] = set()
        self.step = 0  # counts the steps recorded (nested ones too): scratch buffers are per step
        self.pinned: set[int] = set()  # values a control step keeps in buffers of their own
        self._scratch: dict[tuple[int, str], int] = {}
        self.scratch_bytes: dict[int, int] = {}  # scratch id (negative) → bytes
        self._host_made: dict[tuple, int] = {}  # host_constant's values by key

    # -- what launchers ask --
    def shape(self, v: int) -> tuple[int, ...]:
        return self.shapes[v]

    def dtype(self, v: int) -> np.dtype:
        return self.dtypes[v]

    def const(self, v: int) -> np.ndarray | None:
        return self.host.get(self.root(v))

    def constant(self, out: int, value: np.ndarray) -> None:
        value = np.asarray(value, self.dtypes[out])
        if value.shape != self.shapes[out] or out in self.host or out in self.alias_of:
            raise ModelFormatError(
                f"{self.backend} backend: value {out} cannot be the constant {value.shape}"
            )
        self.host[out] = value

    def host_constant(self, key: tuple, make: Callable[[], np.ndarray]) -> int:
        """A new flat float32 value computed on the host by ``make()`` once per ``key`` and
        uploaded with the init-time constants, stored as float32 whatever the plan's precision
        (a launcher's own layout of a weight: the packed GEMM panels of ``linalg``)."""
        if key not in self._host_made:
            value = np.ascontiguousarray(make(), np.float32).reshape(-1)
            t = max(self.shapes) + 1
            self.shapes[t], self.dtypes[t] = value.shape, np.dtype(np.float32)
            self.kept.add(t)
            self.host[t] = value
            self._host_made[key] = t
        return self._host_made[key]

    def alias(self, out: int, src: int) -> None:
        if self.shapes.get(out) is None or out in self.alias_of:
            raise ModelFormatError(f"{self.backend} backend: value {out} aliased twice")
        self.alias_of[out] = self.root(src)

    def root(self, v: int) -> int:
        while v in self.alias_of:
            v = self.alias_of[v]
        return v

    def check_options(self, options: str) -> None:
        """Refuse a program built without -DOFFLOAD_FP16 for a step on half storage: its kernels
        would read the half buffers as float (past their ends). Every launcher passes
        ``api.float_options``."""
        if self.precision == "fp16" and "-DOFFLOAD_FP16" not in options.split():
            raise KernelError(f"{self.backend} backend: a kernel built without -DOFFLOAD_FP16 in a fp16 plan")

    # -- recording --
    def record(self, plan: dict) -> tuple[list[int], list[int], set[int]]:
        """Every step's launcher run on this builder, each step's shapes checked first; gives the
        partition's inputs, outputs, and the values whose buffers are pinned (never pooled)."""
        self.concat_slots = concat_slots(plan)
        self.record_steps(plan["ops"])
        inputs, outputs = [int(i) for i in plan["inputs"]], [int(i) for i in plan["outputs"]]
        if any(i in self.alias_of for i in inputs):  # never rebind a buffer the caller fills
            raise ModelFormatError(f"{self.backend} backend: a view op writes a partition input")
        pinned = (*inputs, *outputs, *self.host, *self.pinned)
        return inputs, outputs, {self.root(v) for v in pinned}

    def record_steps(self, steps: list[dict]) -> None:
        """``steps`` recorded in order: If / Loop by ``control``, a step whose inputs are all known
        on the host folded into a constant, any other by its launcher."""
        for step in steps:
            self.step += 1
            self.precision = "fp32" if step.get("fp32") else self.plan_precision
            try:
                step = self._converted(step)
                control = RECORD.get(step["type"])
                if control is not None:
                    control(self, step)
                    continue
                launcher = LAUNCH.get(step["type"])
                if launcher is None:
                    raise UnsupportedOpError(
                        f"{self.backend} backend: no kernel for plan step {step['type']!r}"
                    )
                for v, shape in zip(
                    step["outputs"], step_shapes(step, self.shapes, self.dtypes, self.host, self.backend)
                ):
                    if v is not None:
                        self._shaped(v, shape)
                value = self._fold(step)
                if value is not None:
                    self.constant(step["outputs"][0], value)
                else:
                    launcher(self, step)
            except OffloadError:
                raise
            except Exception as e:  # whatever a damaged step makes a launcher trip on
                name = step.get("name") or step["type"]
                raise ModelFormatError(
                    f"{self.backend} backend: plan step {self.step} ({name}) is malformed: {e!r}"
                ) from None
            finally:
                self.precision = self.plan_precision

    def _converted(self, step: dict) -> dict:
        """``step`` reading each float32 input in the storage it runs on: under mixed precision, an
        input stored otherwise is converted first (half → float exactly; float → half rounding
        to nearest even) into a new value only this step reads. A constant is converted on the
        host. Control steps convert nothing themselves (their sub-steps do)."""
        if self.plan_precision != "fp16" or step["type"] in RECORD:
            return step
        half = self.precision == "fp16"
        inputs = list(step["inputs"])
        for j, i in enumerate(inputs):
            if i is None or self.dtypes[i] != np.float32 or (self.storage(i) == np.float16) == half:
                continue
            inputs[j] = self._convert(i, half)
        return step if inputs == step["inputs"] else {**step, "inputs": inputs}

    def _convert(self, v: int, half: bool) -> int:
        """A new value holding ``v`` stored as half (``half``) or as float32."""
        t = max(self.shapes) + 1
        self.shapes[t], self.dtypes[t] = self.shapes[v], self.dtypes[v]
        if not half:
            self.kept.add(t)
        value = self.const(v)
        if value is not None:
            self.host[t] = np.asarray(value, np.float32)
            return t
        n = math.prod(self.shapes[v])
        if n:
            program = self.program(source("convert.cl"), "-DOFFLOAD_FP16")
            self.launch(program, "to_half" if half else "to_float", (n,), None, [Buf(v), Buf(t), np.int64(n)])
        return t

    def _shaped(self, v: int, shape: tuple) -> None:
        if math.prod(shape) > MAX_ELEMENTS:
            raise SpecializationError(
                f"{self.backend} backend: value {v} of shape {list(shape)} has more than "
                f"{MAX_ELEMENTS} elements (kernels index with int32)"
            )
        self.shapes[v] = shape

    def _fold(self, step: dict) -> np.ndarray | None:
        """The value of a step whose inputs are all known on the host and whose result is small
        (shape arithmetic: ``ir.infer_fold.fold_op``), or None: it then runs as kernels."""
        from offload.ir import DataType, TensorType
        from offload.ir.infer_fold import fold_values

        outs = [v for v in step["outputs"] if v is not None]
        fused = step.get("epilogue") or step.get("shuffle")
        if fused or len(outs) != 1 or step["outputs"][0] is None or outs[0] in self.host:
            return None
        leaves = [None if i is None else self.const(i) for i in step["inputs"]]
        if any(x is None for i, x in zip(step["inputs"], leaves) if i is not None):
            return None

        def fold(op_type: str, attrs: dict, args: list, out: int) -> np.ndarray | None:
            out_type = TensorType(DataType.from_numpy(self.dtypes[out]), self.shapes[out])
            return fold_values(op_type, args, {k: attribute(a) for k, a in attrs.items()}, out_type)

        (out,) = outs
        if step["type"] != "Fused":
            value = fold(step["type"], step.get("attributes", {}), leaves, out)
        else:  # the tree node by node (elementwise: no node reads its output's type)
            nodes: list = []
            for node in step["nodes"]:
                refs = node["args"]
                args = [None if r is None else (leaves[r[1]] if r[0] == "in" else nodes[r[1]]) for r in refs]
                if any(a is None for a, r in zip(args, refs) if r is not None):
                    return None
                nodes.append(fold(node["type"], node.get("attributes", {}), args, out))
            value = nodes[-1] if nodes else None
        if value is None or value.shape != self.shapes[out] or value.dtype != self.dtypes[out]:
            return None
        return value

    def ref(self, a):
        """A launch argument as recorded: a view's buffer is its root's, a Scratch gets a
        negative id of its own (per step and key); anything else as given."""
        if isinstance(a, Buf):
            return Buf(self.root(a.id))
        if isinstance(a, Scratch):
            sid = self._scratch.setdefault((self.step, a.key), -1 - len(self._scratch))
            self.scratch_bytes[sid] = max(self.scratch_bytes.get(sid, 0), a.nbytes)
            return Buf(sid)
        return a

    # -- placing buffers --
    def storage(self, v: int) -> np.dtype:
        """The dtype of value ``v`` in device memory (float16 for float32 under fp16, unless kept)."""
        if v in self.kept or self.root(v) in self.kept:
            return self.dtypes[v]
        return storage_dtype(self.dtypes[v], self.plan_precision)

    def nbytes(self, v: int) -> int:
        if v < 0:
            return self.scratch_bytes[v]
        return math.prod(self.shapes[v]) * self.storage(v).itemsize

    def place(
        self, pinned: set[int], alloc: Callable[[int], object] | None = None, given: dict | None = None
    ) -> dict[int, object]:
        """A buffer for every value, from the arguments of the recorded ``self.launches`` (each has
        ``args``), allocated by ``alloc`` (default: the builder's device allocator); ``given``
        holds buffers placed already (the weights, shared by every specialization of a plan)."""
        alloc = alloc or self.device.allocator.alloc
        given = given or {}
        uses = [launch.args for launch in self.launches]
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for k, args in enumerate(uses):
            for a in args:
                if isinstance(a, Buf) and a.id not in pinned:
                    first.setdefault(a.id, k)
                    last[a.id] = k
        loop_lifetimes(self.launches, first, last)
        placed: dict[int, object] = {v: given[v] if v in given else alloc(self.nbytes(v)) for v in pinned}
        starts: dict[int, list[int]] = {}
        ends: dict[int, list[int]] = {}
        for v in first:
            starts.setdefault(first[v], []).append(v)
            ends.setdefault(last[v], []).append(v)
        pool: list[tuple[int, object]] = []  # (bytes, buffer) of every pooled buffer
        free: list[int] = []  # pool entries no live value holds, smallest first
        slot: dict[int, int] = {}
        for k in range(len(uses)):
            for v in starts.get(k, ()):
                need = max(self.nbytes(v), 4)
                j = next((j for j, p in enumerate(free) if pool[p][0] >= need), None)
                if j is None:
                    pool.append((need, alloc(need)))
                    slot[v] = len(pool) - 1
                else:
                    slot[v] = free.pop(j)
                placed[v] = pool[slot[v]][1]
            for v in ends.get(k, ()):
                free.append(slot[v])
                free.sort(key=lambda p: pool[p][0])
        for v, shape in self.shapes.items():  # values no launch touches (e.g. empty tensors)
            if shape is None or not all(type(d) is int for d in shape):
                continue  # in an If branch this specialization does not take: never shaped
            r = self.root(v)
            if r not in placed:
                placed[r] = alloc(self.nbytes(r))
            placed[v] = placed[r]
        return placed
