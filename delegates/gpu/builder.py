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

from offload.errors import KernelError, ModelFormatError, OffloadError, UnsupportedOpError

from .api import Buf, Scratch, storage_dtype
from .ops import LAUNCH
from .plan import PRECISIONS, check_step


def host_weights(plan: dict, weights, backend: str) -> dict[int, np.ndarray]:
    """The plan's weights by value id, from the tensors init was given by name."""
    missing = sorted(set(plan["weights"].values()) - set(weights))
    if missing:
        raise ModelFormatError(f"{backend} backend: weights not given: {', '.join(missing)}")
    return {int(i): np.asarray(weights[name]) for i, name in plan["weights"].items()}


class PlanValues:
    backend = "gpu"  # names the backend in error messages
    launches: list  # what the subclass records, in order; each has ``args``

    def __init__(self, plan: dict, host: dict[int, np.ndarray]):
        self.shapes = {int(i): tuple(s) for i, s in plan["shapes"].items()}
        dtypes = plan.get("dtypes") or {}
        self.dtypes = {i: np.dtype(dtypes.get(str(i), "float32")) for i in self.shapes}
        # How float32 values are stored on the device ("fp16": as half; kernels compute in float).
        self.precision = plan.get("precision", "fp32")
        if self.precision not in PRECISIONS:
            raise ModelFormatError(
                f"{self.backend} backend: plan precision {self.precision!r} (takes fp32, fp16)"
            )
        self.host = host  # weights, then init-time constants: uploaded once
        self.alias_of: dict[int, int] = {}
        self.step = 0  # the plan step whose launcher runs (scratch buffers are per step)
        self._scratch: dict[tuple[int, str], int] = {}
        self.scratch_bytes: dict[int, int] = {}  # scratch id (negative) → bytes

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

    def alias(self, out: int, src: int) -> None:
        if self.shapes.get(out) is None or out in self.alias_of:
            raise ModelFormatError(f"{self.backend} backend: value {out} aliased twice")
        self.alias_of[out] = self.root(src)

    def root(self, v: int) -> int:
        while v in self.alias_of:
            v = self.alias_of[v]
        return v

    def check_options(self, options: str) -> None:
        """Refuse a program built without -DOFFLOAD_FP16 under fp16: its kernels would read the
        half buffers as float (past their ends). Every launcher passes ``api.float_options``."""
        if self.precision == "fp16" and "-DOFFLOAD_FP16" not in options.split():
            raise KernelError(f"{self.backend} backend: a kernel built without -DOFFLOAD_FP16 in a fp16 plan")

    # -- recording --
    def record(self, plan: dict) -> tuple[list[int], list[int], set[int]]:
        """Every step's launcher run on this builder, each step's shapes checked first; gives the
        partition's inputs, outputs, and the values whose buffers are pinned (never pooled)."""
        for i, w in self.host.items():
            if w.shape != self.shapes[i]:
                raise ModelFormatError(
                    f"{self.backend} backend: weight {i} has shape {w.shape}, expected {self.shapes[i]}"
                )
        for k, step in enumerate(plan["ops"]):
            launcher = LAUNCH.get(step["type"])
            if launcher is None:
                raise UnsupportedOpError(f"{self.backend} backend: no kernel for plan step {step['type']!r}")
            self.step = k
            try:
                check_step(step, self.shapes, self.dtypes, self.host, self.backend)
                launcher(self, step)
            except OffloadError:
                raise
            except Exception as e:  # whatever a damaged step makes a launcher trip on
                name = step.get("name") or step["type"]
                raise ModelFormatError(
                    f"{self.backend} backend: plan step {k} ({name}) is malformed: {e!r}"
                ) from None
        inputs, outputs = [int(i) for i in plan["inputs"]], [int(i) for i in plan["outputs"]]
        if any(i in self.alias_of for i in inputs):  # never rebind a buffer the caller fills
            raise ModelFormatError(f"{self.backend} backend: a view op writes a partition input")
        return inputs, outputs, {self.root(v) for v in (*inputs, *outputs, *self.host)}

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
        """The dtype of value ``v`` in device memory (float16 for float32 under fp16)."""
        return storage_dtype(self.dtypes[v], self.precision)

    def nbytes(self, v: int) -> int:
        if v < 0:
            return self.scratch_bytes[v]
        return math.prod(self.shapes[v]) * self.storage(v).itemsize

    def place(self, pinned: set[int], alloc: Callable[[int], object] | None = None) -> dict[int, object]:
        """A buffer for every value, from the arguments of the recorded ``self.launches`` (each has
        ``args``), allocated by ``alloc`` (default: the builder's device allocator)."""
        alloc = alloc or self.device.allocator.alloc
        uses = [launch.args for launch in self.launches]
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for k, args in enumerate(uses):
            for a in args:
                if isinstance(a, Buf) and a.id not in pinned:
                    first.setdefault(a.id, k)
                    last[a.id] = k
        placed: dict[int, object] = {v: alloc(self.nbytes(v)) for v in pinned}
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
        for v in self.shapes:  # values no launch touches (e.g. empty tensors)
            r = self.root(v)
            if r not in placed:
                placed[r] = alloc(self.nbytes(r))
            placed[v] = placed[r]
        return placed
