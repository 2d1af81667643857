"""If and Loop on the GPU backends: branches and loop bodies run as device plans, conditions are
read on the host.

Compile half (``CAPS`` / ``CHECKS``, used like an op family's). An If or a Loop is taken when
every op of its branches or body is (``GPUCompiler.supports`` recurses into them) and nothing in
it needs a value of the data on the host: a Loop's trip count M is read on the host when the
runtime specializes (``host.LAUNCH_INPUTS``, like a Reshape's shape), a body must not read its iteration
number or a carried value as a shape, and scan outputs (one row per iteration) need a trip count
that no condition can cut short. The plan holds a branch or a body as a sub-plan
``{"inputs", "ops", "outputs"}`` over the value ids of the whole plan: a nested step reads outer
values by id.

Runtime half. ``record_if`` / ``record_loop`` record a sub-plan's launches with the same builder,
between control items that a backend's run loop hands to ``run``:

- an If whose condition is known on the host at specialization (folded from shapes, or a
  constant) records only the branch it takes, its results aliased: no control item at all;
- otherwise: ``Branch`` (to the else part when the condition is false), the then-branch, copies
  into the If's results, ``Jump`` past the else part, the else-branch, copies. The condition
  (one byte) is read when the run reaches it;
- a Loop: copies of the initial values into the body's parameters (buffers of their own), then
  ``LoopHead`` (the host counts iterations; the condition is read each iteration when the body
  computes it), the body, copies of its results into the parameters (staged where a result is a
  parameter itself: ``a, b = b, a``), scan results into their rows, ``LoopBack``. The Loop's
  results are the parameters' buffers.

Carried values keep their shape across iterations, and both branches of an If decided on the
device give the same shapes; otherwise that call runs on the CPU (``SpecializationError``).
A value made before a loop and read in its body stays live until the loop ends (``loop_lifetimes``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from offload.errors import ModelFormatError, RunTerminated, SpecializationError
from offload.ir import Block, DataType, Operation, TensorType, Value

from ..backend import OpCapability, Support
from .api import MAX_RANK, Buf, Scratch
from .host import check_host_inputs, host_input_names, host_reason
from .plan import DTYPES

_TYPES = frozenset(DataType.from_numpy(t) for t in DTYPES)
CAPS = {op: OpCapability(_TYPES, max_rank=MAX_RANK) for op in ("If", "Loop")}
MULTI_OUTPUT = ("If", "Loop")
MARK_EVERY = 256  # commands a device loop enqueues between two waits of an unbounded run
LOCK_POLL = 0.01  # seconds between checks of a waiting run's options
MAX_BODY_CONSTANT = 4096  # elements of a constant held by a branch or body (stored in the plan)


def _tensor(v: Value | None) -> bool:
    return v is not None and isinstance(v.type, TensorType) and v.type.shape is not None


def _single(v: Value) -> bool:
    return not v.type.is_static or math.prod(v.type.shape) == 1


def _constants(block: Block) -> Support | None:
    for b in [block, *(inner for op in block.walk() for inner in op.blocks)]:
        for v in b.constants.values():
            if v.const_value.size > MAX_BODY_CONSTANT:
                return Support(
                    False,
                    f"a branch or body holds constant '{v.name}' of {v.const_value.size} elements "
                    f"(at most {MAX_BODY_CONSTANT}; larger weights belong to the outer graph)",
                )
    return None


def _reads_parameter_as_shape(op: Operation) -> str | None:
    """The name of a nested block parameter (a Loop's iteration number or carried value) that an
    op inside ``op`` reads as a shape-deciding input: it changes per iteration, the plan cannot."""
    params = {
        id(v): v
        for b in op.blocks
        for blk in [b, *(x for o in b.walk() for x in o.blocks)]
        for v in blk.inputs
    }
    for inner in (o for b in op.blocks for o in b.walk()):
        for i in host_input_names(inner.op_type) if inner.domain == "" else ():
            stack = [inner.inputs[i] if i < len(inner.inputs) else None]
            while stack:
                v = stack.pop()
                if v is None or v.is_constant:
                    continue
                if id(v) in params:
                    return v.name
                if v.producer is not None and v.producer.op_type not in ("Shape", "Size"):
                    stack.extend(v.producer.inputs)
    return None


def _check_if(op: Operation) -> Support | None:
    """An If whose condition is known on the host at specialization (``host_reason``: computed
    from shapes, constants and scalar inputs) records only the branch it takes, so its branches may
    give results of different or unknown ranks (PyTorch's ``squeeze(dim)`` exports as an If on
    ``dim == 1``). A condition read on the device needs both branches to give each output's rank."""
    cond = op.inputs[0]
    if not _single(cond):
        return Support(False, "If condition has more than one element")
    on_host = host_reason(cond, largest=1) is None
    for name in ("then_branch", "else_branch"):
        branch = op.attributes.get(name)
        if not isinstance(branch, Block) or len(branch.outputs) != len(op.outputs):
            return Support(False, f"If {name} does not give one result per output")
        for v, out in zip(branch.outputs, op.outputs):
            if not isinstance(v.type, TensorType):
                return Support(False, f"If {name} result '{v.name}' is not a tensor")
            if not on_host and (not _tensor(v) or not _tensor(out) or v.type.rank != out.type.rank):
                return Support(
                    False,
                    f"If {name} result '{v.name}' is not a tensor of the output's rank, and the "
                    f"condition is read on the device ({host_reason(cond, largest=1)})",
                )
        found = _constants(branch)
        if found is not None:
            return found
    return None


def _passes_condition_through(body: Block) -> bool:
    """Whether the body's condition result is its condition parameter (through Identity ops)."""
    v = body.outputs[0]
    while v.producer is not None and v.producer.op_type == "Identity":
        v = v.producer.inputs[0]
    return v is body.inputs[1]


def _check_loop(op: Operation) -> Support | None:
    body = op.attributes.get("body")
    n = len(op.inputs) - 2
    if not isinstance(body, Block) or len(body.inputs) != 2 + n or len(body.outputs) < 1 + n:
        return Support(False, "Loop body does not match its inputs")
    M, cond = op.inputs[0], op.inputs[1]
    if M is None and cond is None:
        return Support(False, "Loop with neither a trip count nor a condition")
    if M is None:
        return Support(False, "Loop without a trip count M (a condition alone may never end)")
    for v in [*body.inputs, *body.outputs]:
        if not _tensor(v):
            return Support(False, f"Loop body value '{v.name}' is not a tensor of known rank")
    if any(not _single(v) for v in (M, cond) if v is not None):
        return Support(False, "Loop trip count or condition has more than one element")
    for init, param, result in zip(op.inputs[2:], body.inputs[2:], body.outputs[1:]):
        if init.type.rank != param.type.rank or result.type.rank != param.type.rank:
            return Support(False, f"Loop carried value '{param.name}' changes rank")
    name = _reads_parameter_as_shape(op)
    if name is not None:
        return Support(False, f"Loop body reads '{name}' (it changes per iteration) as a shape")
    scans = len(body.outputs) > 1 + n
    if scans and cond is not None and (not _passes_condition_through(body) or host_reason(cond) is not None):
        return Support(False, "Loop scan outputs whose length depends on the data (its condition)")
    found = _constants(body)
    return found if found is not None else check_host_inputs(op)


CHECKS = {"If": _check_if, "Loop": _check_loop}
LAUNCH: dict = {}  # recorded by the builder (``record_if`` / ``record_loop``), not by a launcher


# -- control items, recorded among a specialization's launches ---------------------------------


@dataclass
class Copy:
    """``nbytes`` from the buffer of ``args[0]`` into that of ``args[1]``; a scan result goes to
    the row of the current iteration of the loop whose ``LoopHead`` is at ``row_of``."""

    args: list
    nbytes: int
    row_of: int | None = None


@dataclass
class Fill:
    """A host value written into a value's buffer (a Loop's condition when it has no input)."""

    args: list
    value: np.ndarray


@dataclass
class Branch:
    """Go on when the condition in ``args[0]`` is true, else go to ``target``."""

    args: list
    target: int = -1


@dataclass
class Jump:
    target: int = -1
    args: list = field(default_factory=list)


@dataclass
class LoopHead:
    """Start (or continue) a loop: stop after ``trips`` iterations or when the condition buffer
    ``cond`` reads false; write the iteration number into ``iteration`` when the body reads it."""

    trips: int
    cond: int | None
    iteration: int | None
    exit: int = -1
    args: list = field(default_factory=list)
    name: str = "Loop"


@dataclass
class LoopBack:
    head: int
    args: list = field(default_factory=list)


CONTROL_ITEMS = (Copy, Fill, Branch, Jump, LoopHead, LoopBack)


def has_control(items: list) -> bool:
    return any(isinstance(item, CONTROL_ITEMS) for item in items)


def run(
    items: list,
    launch: Callable[[object], None],
    copy: Callable[[int, int, int, int], None],
    read: Callable[[int], bool],
    write: Callable[[int, np.ndarray], None],
    fence: Callable[[], Callable[[], None]] | None = None,
    options=None,
    where: str = "gpu backend",
) -> None:
    """Interpret a specialization's items: ``launch(item)`` a kernel, ``copy(src, dst, nbytes,
    dst_offset)`` between value buffers, ``read(v)`` the first byte of a condition as a truth
    value, ``write(v, array)`` a host value into a buffer. All on one queue/stream, in order.

    ``fence()`` marks the queue and returns a call that waits until the device has done
    everything enqueued before the mark. A loop whose condition is not read on the host would
    otherwise enqueue its body as fast as the host can, each queued command holding memory until
    the device gets to it (memory growing without bound in a long loop). So:

    - a run without ``options``: at a loop head, once ``MARK_EVERY`` commands have been enqueued
      since the last mark, the host waits for that mark and makes a new one; it stays at most
      two marks ahead of the device (about ``2 * MARK_EVERY`` commands, or two iterations of a
      longer body), a wait now and then costs nothing measurable, and memory stays flat;
    - a run with ``options`` (its ``RunOptions``, ``backend.run_options``): each iteration waits
      for the one before and then checks them, so a deadline or ``terminate`` stops the run
      within one iteration (``RunTerminated``), with nothing of it left queued.
    """
    pc, n = 0, len(items)
    counters: dict[int, int] = {}
    resumed = -1
    queued, mark = 0, None  # commands enqueued since the last mark; the wait for that mark
    try:
        while pc < n:
            item = items[pc]
            kind = type(item)
            if kind is Copy:
                if item.nbytes:
                    offset = 0 if item.row_of is None else counters[item.row_of] * item.nbytes
                    copy(item.args[0].id, item.args[1].id, item.nbytes, offset)
                    queued += 1
                pc += 1
            elif kind is Branch:
                pc = pc + 1 if read(item.args[0].id) else item.target
            elif kind is Jump:
                pc = item.target
            elif kind is LoopHead:
                i = counters[pc] + 1 if resumed == pc else 0
                resumed = -1
                if fence is not None:
                    if options is not None:
                        if i:
                            fence()()  # the iteration before has ended on the device
                    elif queued >= MARK_EVERY:
                        if mark is not None:
                            mark()
                        mark, queued = fence(), 0
                if options is not None:
                    options.check(f"{where}: {item.name}, iteration {i}")
                if i >= item.trips or (item.cond is not None and not read(item.cond)):
                    pc = item.exit
                    continue
                counters[pc] = i
                if item.iteration is not None:
                    write(item.iteration, np.array(i, np.int64))
                pc += 1
            elif kind is LoopBack:
                resumed = pc = item.head
            elif kind is Fill:
                write(item.args[0].id, item.value)
                pc += 1
            else:
                launch(item)
                queued += 1
                pc += 1
    except RunTerminated:
        if fence is not None:
            fence()()  # what was enqueued before the check ends before the buffers are reused
        raise


@contextlib.contextmanager
def held(lock, options, where: str):
    """``with lock``, for a run bounded by ``options``: while another thread's call holds the
    handle, this one waits no longer than its own deadline or stop flag allow (RunTerminated)."""
    if options is None:
        with lock:
            yield
        return
    while not lock.acquire(timeout=LOCK_POLL):
        options.check(f"{where}: waiting for another thread's call on this delegate")
    try:
        yield
    finally:
        lock.release()


def loop_lifetimes(items: list, first: dict[int, int], last: dict[int, int]) -> None:
    """Keep a value made before a loop and read in its body live until the loop's end (the body
    reads it again each iteration); inner loops first, so an outer loop sees the extended ends."""
    loops = sorted(
        ((item.head, k) for k, item in enumerate(items) if isinstance(item, LoopBack)),
        key=lambda r: r[1] - r[0],
    )
    for head, back in loops:
        for v, f in first.items():
            if f < head <= last[v] <= back:
                last[v] = back


# -- recording ------------------------------------------------------------------------------------


def _bytes(b, v: int) -> int:
    return b.nbytes(b.root(v))


def _copy(b, src: int, dst: int, row_of: int | None = None) -> None:
    if b.root(src) != b.root(dst):
        b.launches.append(Copy([b.ref(Buf(src)), b.ref(Buf(dst))], _bytes(b, src), row_of))


def _truth(value: np.ndarray, what: str) -> bool:
    value = np.asarray(value)
    if value.size != 1:
        raise ModelFormatError(f"gpu backend: {what} has {value.size} elements, expected one")
    return bool(value.reshape(-1)[0])


def _same_shapes(b, results: list[int], outputs: list[int], what: str) -> None:
    for res, out in zip(results, outputs):
        if out is not None and b.shapes[res] != b.shapes[out]:
            raise SpecializationError(
                f"{b.backend} backend: {what} is {list(b.shapes[res])} where it was {list(b.shapes[out])} "
                "(a specialization keeps one shape per value)"
            )


def record_if(b, step: dict) -> None:
    """Record an If step: the branch taken when its condition is known on the host, else both."""
    then, other = step["branches"]
    outs = step["outputs"]
    known = b.const(step["inputs"][0])
    if known is not None:
        branch = then if _truth(known, "If condition") else other
        b.record_steps(branch["ops"])
        for out, res in zip(outs, branch["outputs"]):
            if out is not None:
                b.shapes[out] = b.shapes[res]
                b.alias(out, res)
        return
    test = Branch([b.ref(Buf(step["inputs"][0]))])
    b.launches.append(test)
    b.record_steps(then["ops"])
    for out, res in zip(outs, then["outputs"]):
        if out is not None:
            b.shapes[out] = b.shapes[res]
            _copy(b, res, out)
    skip = Jump()
    b.launches.append(skip)
    test.target = len(b.launches)
    b.record_steps(other["ops"])
    _same_shapes(b, other["outputs"], outs, f"If '{step.get('name') or 'If'}' else-branch")
    for out, res in zip(outs, other["outputs"]):
        if out is not None:
            _copy(b, res, out)
    skip.target = len(b.launches)


def record_loop(b, step: dict) -> None:
    """Record a Loop step: parameters filled, the body between LoopHead and LoopBack, results
    copied back; see the module docstring."""
    M, cond, *initial = step["inputs"]
    body = step["body"]
    iteration, cond_param, *params = body["inputs"]
    n = len(params)
    cond_result, results, scans = body["outputs"][0], body["outputs"][1 : 1 + n], body["outputs"][1 + n :]
    outs = step["outputs"]
    known = b.const(M)
    if known is None or np.asarray(known).size != 1:
        raise ModelFormatError(
            f"{b.backend} backend: Loop '{step.get('name')}' trip count is not a scalar known on the host"
        )
    trips = max(0, int(np.asarray(known).reshape(-1)[0]))
    b.shapes[iteration], b.shapes[cond_param] = (), ()
    for p, x in zip(params, initial):
        if b.dtypes[p] != b.dtypes[x]:
            raise ModelFormatError(
                f"{b.backend} backend: Loop carried value {p} is {b.dtypes[p]}, given {b.dtypes[x]}"
            )
        b.shapes[p] = b.shapes[x]
    b.pinned.update((iteration, cond_param, *params))
    for p, x in zip(params, initial):
        _copy(b, x, p)
    if cond is not None:
        _copy(b, cond, cond_param)
    else:
        b.launches.append(Fill([Buf(cond_param)], np.ones(1, np.uint8)))
    head = LoopHead(trips, None, None, name=f"Loop '{step.get('name') or 'Loop'}'")
    at = len(b.launches)
    b.launches.append(head)
    b.record_steps(body["ops"])
    # The condition: ignored without an input; known on the host when its start is and the body
    # passes it through unchanged (an Identity is a view); otherwise read every iteration.
    passes = b.root(cond_result) == b.root(cond_param)
    start = None if cond is None or b.const(cond) is None else _truth(b.const(cond), "Loop condition")
    on_device = cond is not None and not (passes and start is not None)
    if start is False and not on_device:
        head.trips = 0
    head.cond = cond_param if on_device else None
    if scans and on_device:
        raise SpecializationError(
            f"{b.backend} backend: Loop '{step.get('name') or 'Loop'}' has scan outputs and a "
            "data-dependent condition"
        )
    _same_shapes(b, results, params, f"Loop '{step.get('name') or 'Loop'}' carried value")
    for res, out in zip(scans, outs[n:]):
        if out is not None:
            b._shaped(out, (head.trips, *b.shapes[res]))
            b.pinned.add(out)
            _copy(b, res, out, row_of=at)
    # Scan rows first, then every result is read before any parameter is written: a result that is a parameter itself
    # (``a, b = b, a``, a condition carried as a value) is staged through a buffer of its own.
    pairs = [*([(cond_result, cond_param)] if on_device else []), *zip(results, params)]
    parameters = {b.root(v) for v in (iteration, cond_param, *params)}
    staged, direct = [], []
    for k, (res, p) in enumerate(pairs):
        if b.root(res) == b.root(p):
            continue
        if b.root(res) in parameters:
            scratch = b.ref(Scratch(_bytes(b, res), key=f"loop{at}/{k}"))
            b.launches.append(Copy([b.ref(Buf(res)), scratch], _bytes(b, res)))
            staged.append(Copy([scratch, b.ref(Buf(p))], _bytes(b, p)))
        else:
            direct.append((res, p))
    for res, p in direct:
        _copy(b, res, p)
    b.launches.extend(staged)
    b.launches.append(LoopBack(at))
    head.exit = len(b.launches)
    reads_iteration = any(
        isinstance(a, Buf) and a.id == iteration for item in b.launches[at + 1 :] for a in item.args
    )
    head.iteration = iteration if reads_iteration else None
    for out, p in zip(outs[:n], params):
        if out is not None:
            b.shapes[out] = b.shapes[p]
            b.alias(out, p)


RECORD = {"If": record_if, "Loop": record_loop}
