"""The step kinds of a prepared chain: what each instruction runs, and what it reads and writes."""

from __future__ import annotations

import operator
from typing import Any, NamedTuple, Protocol

import numpy as np

from offload.delegates.backend import DeviceTensor
from offload.errors import DTypeError, ModelFormatError, OffloadError, ShapeError, UnsupportedOpError

from . import kernels


class MethodState(Protocol):
    """A loaded method as its load-time preparation sees it (``module.Method``): the slots, steps,
    arenas and shape specializations that the preparation modules read and set. Named here, below
    ``module.py``, so that those modules need not import the class that imports them."""

    def __getattr__(self, name: str) -> Any: ...


class StepInfo(NamedTuple):
    """One prepared instruction: what it reads and writes (value indices) and where it may jump."""

    kind: str  # kernel | move | jump | free | delegate
    name: str  # the operator, for kernel calls
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    jump: int | None
    label: str = ""  # the instruction's label (its node's name), for kernel calls


class SubPlan:
    """A graph attribute's value as kernels see it: a block to pass to ``ctx.run_block``.

    ``inputs`` / ``outputs`` carry ``name`` and ``type`` like IR values do (the Scan and Loop
    kernels read the outputs' declared types for zero-iteration results).
    """

    def __init__(self, method: MethodState, captured: list[int]):
        self.method = method
        self.captured = captured
        self.name = method.name
        n_params = len(method.input_names) - len(captured)
        self.inputs = method.inputs[:n_params]
        self.outputs = method.outputs


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


class _Frame(list):
    """The values of one run of a Method by slot, with the arena views of the set it holds, and
    the shapes of the run's inputs (what ``_ShapeStep`` results depend on), and whether the run
    returns delegate results as device arrays."""

    __slots__ = ("bound", "device_outputs", "options", "planned", "profile", "shapes")


def _describe(step) -> tuple[str, str, dict]:
    """(name, category, arguments) of a step's profile event, from what the step tells of itself
    (``info``): a fused run's or a pair's time is its first op's (onnxruntime's fused Conv)."""
    info = step.info()
    if info.kind == "kernel":
        return info.label or info.name, "kernel", {"op": info.name}
    if info.kind == "delegate":
        return f"delegate {info.name}", "delegate", {}
    return info.kind, info.kind, {}


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
        writes = tuple(i for i in self.out_slots if i)
        return StepInfo("kernel", self.op_name, reads, writes, None, self.label)


class _PreparedStep:
    """A kernel call prepared at load (``kernels.prepared``): its inputs go straight into the
    op's call writing into the output's arena view. An input that is not a C-contiguous array
    (unless the call says ``any_layout``; None, an omitted input, where it says
    ``omitted_inputs``), or not of the declared type (the call raises before
    writing), takes the kernel's way. Its
    result is always in the arena view, which bound calls read (``_bind_runs``); a kernel result
    of another type than declared unbinds the rest of the run."""

    __slots__ = ("call", "in_slots", "kernel", "out_slot")
    # Whether the steps after it read a kernel result of another layout in that layout (as
    # evaluate's kernels do; bound calls read the view), or the view (loop_steps._LoopStep).
    keeps_layout = True

    def run(self, frame: list) -> None:
        args = [frame[i] for i in self.in_slots]
        out = frame.planned[self.out_slot]
        for a in args:
            if type(a) is not np.ndarray or not a.flags.c_contiguous:
                if type(a) is np.ndarray and getattr(self.call, "any_layout", False):
                    continue  # a call whose bits are the kernel's on any layout (elementwise, MatMul)
                if a is None and getattr(self.call, "omitted_inputs", False):
                    continue  # an omitted optional input, which the call takes as the kernel does
                return self._by_kernel(frame, out)
        try:
            self.call(out, *args)
        except Exception:  # another type or shape than declared, or a failure the kernel names
            return self._by_kernel(frame, out)
        frame[self.out_slot] = out
        return None

    def bound(self, planned: list, initial: list):
        """The call with one arena set's arrays fixed in it (``_BoundRun``)."""
        return kernels.bind(self.call, planned[self.out_slot], [initial[i] for i in self.in_slots])

    def _by_kernel(self, frame: list, out: np.ndarray) -> None:
        self.kernel.run(frame)
        value = frame[self.out_slot]
        if value is out:
            return
        if _layout_only(value, out):
            # Kernels read the result in its layout, as evaluate's do; bound calls read the view.
            np.copyto(out, value, casting="no")
            if not self.keeps_layout:
                frame[self.out_slot] = out
        else:  # another type than declared (lenient, not strict): no call is bound from here on
            frame.bound = None

    def info(self) -> StepInfo:
        return self.kernel.info()


class _PreparedOutputsStep:
    """A kernel call of an op with several outputs prepared for its types (``kernels.
    prepared_outputs``): its inputs go straight into the op's call, which writes the outputs that
    steps or the method's results read (``wanted``) into their arena views and leaves the others.
    An input that is not an array (of any layout) or None, or a call that raises (another type or
    shape than declared, or a value the kernel's checks refuse), takes the kernel's way. A call
    with a ``bind`` (one that always returns the arena views it got) may join a _BoundRun: its
    wanted results are then always in their arena views, as a _PreparedStep's is."""

    __slots__ = ("call", "in_slots", "kernel", "out_slots", "wanted")

    def run(self, frame: list) -> None:
        args = [frame[i] for i in self.in_slots]
        for a in args:
            if a is not None and type(a) is not np.ndarray:
                return self._by_kernel(frame)
        planned = frame.planned
        try:
            results = self.call(
                [planned[s] if w else None for s, w in zip(self.out_slots, self.wanted)], *args
            )
        except Exception:
            return self._by_kernel(frame)
        for slot, wanted, value in zip(self.out_slots, self.wanted, results):
            if wanted:
                frame[slot] = value
        return None

    @property
    def bindable(self) -> bool:
        return hasattr(self.call, "bind")

    def bound(self, planned: list, initial: list):
        """The call with one arena set's arrays fixed in it (``_BoundRun``; ``bindable`` only)."""
        outs = [planned[s] if w else None for s, w in zip(self.out_slots, self.wanted)]
        return self.call.bind(outs, *[initial[i] for i in self.in_slots])

    def _by_kernel(self, frame: list) -> None:
        self.kernel.run(frame)
        if not self.bindable:
            return
        planned = frame.planned
        for slot, wanted in zip(self.out_slots, self.wanted):
            value, out = frame[slot], planned[slot]
            if not wanted or value is out:
                continue
            if _layout_only(value, out):  # bound calls read the view
                np.copyto(out, value, casting="no")
            else:  # another type than declared (lenient, not strict): no call is bound from here on
                frame.bound = None

    def info(self) -> StepInfo:
        return self.kernel.info()


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
            except DTypeError:  # the kernel's own error to report, not a layout to take another path for
                raise
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


class _MoveStep:
    __slots__ = ("dst", "method", "src")

    def run(self, frame: list) -> None:
        self.method._store(frame, self.dst, frame[self.src])

    def info(self) -> StepInfo:
        return StepInfo("move", "", (self.src,), (self.dst,), None)


class _JumpStep:
    __slots__ = ("cond", "dest", "where")

    def run(self, frame: list) -> int | None:
        v = frame[self.cond]
        if isinstance(v, (bool, np.bool_)) or (type(v) is np.ndarray and v.size == 1):
            return None if v else self.dest
        a = np.asarray(v)
        if a.size != 1:
            raise ShapeError(f"{self.where}: the jump condition has {a.size} elements, expected one")
        return None if bool(a.reshape(-1)[0]) else self.dest

    def info(self) -> StepInfo:
        return StepInfo("jump", "", (self.cond,), (), self.dest)


class _FreeStep:
    __slots__ = ("method", "slot")

    def run(self, frame: list) -> None:
        if frame.planned[self.slot] is None:
            frame[self.slot] = None

    def info(self) -> StepInfo:
        return StepInfo("free", "", (), (), None)


class _DelegateStep:
    """A prepared DelegateCall: the delegate's inputs in, its outputs stored into their slots;
    ``keep`` (set by ``_keep_on_device``) marks outputs that stay in device memory, bound to
    their slots as the backend's device tensors; ``keep_results`` marks those and the method
    results, for runs that return device arrays (``frame.device_outputs``)."""

    __slots__ = ("declared", "delegate", "in_slots", "keep", "keep_results", "method", "out_slots")

    def run(self, frame: list) -> None:
        keep = self.keep_results if frame.device_outputs and self.keep_results else self.keep
        outputs = self.delegate.run([frame[i] for i in self.in_slots], self.declared, frame.options, keep)
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
