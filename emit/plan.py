"""One ExecutionPlan from one IR block: KernelCalls, If/Loop as jumps and moves, the values table.

Instructions are first built over *slots* (IR values, attribute values, the Null and the
Bool(false) at indices 0 and 1); ``finish`` numbers the slots in the order docs/pte.md gives
(constants, plan inputs, other values, attribute values), plans memory, and packs the plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from offload.errors import UnsupportedOpError
from offload.ir import (
    Block,
    DataType,
    Operation,
    OpSchema,
    Param,
    SequenceType,
    TensorType,
    Value,
    computed_once,
    lookup,
)
from offload.ir.type_text import type_text
from offload.schemas.generated.executorch_flatbuffer.Chain import ChainT
from offload.schemas.generated.executorch_flatbuffer.ContainerMetadata import ContainerMetadataT
from offload.schemas.generated.executorch_flatbuffer.DelegateCall import DelegateCallT
from offload.schemas.generated.executorch_flatbuffer.ExecutionPlan import ExecutionPlanT
from offload.schemas.generated.executorch_flatbuffer.Frame import FrameT
from offload.schemas.generated.executorch_flatbuffer.FrameList import FrameListT
from offload.schemas.generated.executorch_flatbuffer.Instruction import InstructionT
from offload.schemas.generated.executorch_flatbuffer.InstructionArguments import InstructionArguments
from offload.schemas.generated.executorch_flatbuffer.JumpFalseCall import JumpFalseCallT
from offload.schemas.generated.executorch_flatbuffer.KernelCall import KernelCallT
from offload.schemas.generated.executorch_flatbuffer.MoveCall import MoveCallT
from offload.schemas.generated.executorch_flatbuffer.Operator import OperatorT

from . import delegates as dl
from . import evalues
from . import memory_plan as mp

MEMORY_ID = 1  # non_const_buffer_sizes[0] is reserved, as in ExecuTorch
MAX_ARENA_BYTES = (1 << 63) - 1  # offsets are two uint32 halves; sizes are read as int64

# Ops whose CPU kernels (runtime/kernels) may write their output over the inputs at these
# positions, when the input has the output's type: each reads that input in its first pass
# over the data and only its output after (a ufunc with ``out``, BatchNormalization's x·a then
# + b, Sigmoid's four passes), or computes a new array that the runtime copies in. The memory
# plan then lets the output take the input's place where the input is read for the last time
# (emit/memory_plan.py). tests/runtime/test_overwrite.py runs each one so planned.
WRITES_OVER: dict[str, tuple[int, ...]] = {
    "onnx::Relu": (0,),
    "onnx::LeakyRelu": (0,),
    "onnx::Sigmoid": (0,),
    "onnx::Tanh": (0,),
    "onnx::Exp": (0,),
    "onnx::Neg": (0,),
    "onnx::Abs": (0,),
    "onnx::Sqrt": (0,),
    "onnx::Clip": (0,),
    "onnx::Add": (0, 1),
    "onnx::Sub": (0, 1),
    "onnx::Mul": (0, 1),
    "onnx::Div": (0, 1),
    "onnx::Sum": (0, 1),  # the first two only: a fold reads the third after writing the output
    "onnx::Max": (0, 1),
    "onnx::Min": (0, 1),
    "onnx::BatchNormalization": (0,),
    "onnx::LRN": (0,),
    # The same elements in another shape: the kernel returns a view of its input, whose copy into
    # the output's place is then no copy at all (numpy's copyto between the same bytes).
    "onnx::Reshape": (0,),
    "onnx::Flatten": (0,),
    "onnx::Squeeze": (0,),
    "onnx::Unsqueeze": (0,),
    "onnx::Identity": (0,),
}
RESHAPES = {"onnx::Reshape", "onnx::Flatten", "onnx::Squeeze", "onnx::Unsqueeze"}
# Pools whose output, smaller than their input (a stride above 1), may start where the input
# does: their CPU kernels' first fold reads all of the input into a buffer of their own before
# they write any of the output (runtime/kernels/pool.py, ``_pool_calls``). MaxPool only with its
# Indices omitted (one output). ZFNet's first MaxPool then pools its LRN's output in place of it.
SHRINKS_OVER = {"onnx::MaxPool", "onnx::AveragePool"}
# Below this size an output keeps its own place: a ufunc whose output is its input checks the
# overlap at every call (numpy 2.4: a 1,000-op chain on 16 floats 0.65 us/op against 0.42), and
# what sharing saves there is a few bytes of arena and a copy of as many.
MIN_OVERWRITE_BYTES = 16384


class _Fixed:
    """The two slots every plan starts with."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


NULL = _Fixed("Null")  # index 0: omitted optionals, absent attributes
FALSE = _Fixed("False")  # index 1: the condition of unconditional jumps


class _Attr:
    """An attribute's value in the table; ``build`` gets the final index of any slot it names."""

    def __init__(self, build: Callable[[Callable], object], refs: tuple = (), reads: tuple = ()):
        self.build = build
        self.refs = refs  # slots this one refers to (list items)
        self.reads = reads  # values the instruction reads through it (a sub-plan's captures)


@dataclass
class _Kernel:
    operator: tuple[str, str]
    args: list
    reads: list
    writes: list
    label: str


@dataclass
class _Move:
    src: object
    dst: object
    label: str

    @property
    def reads(self) -> list:
        return [self.src]

    @property
    def writes(self) -> list:
        return [self.dst]


@dataclass
class _DelegateCall:
    index: int  # into the plan's delegates table
    inputs: list
    outputs: list
    label: str

    @property
    def args(self) -> list:
        return self.inputs + self.outputs

    @property
    def reads(self) -> list:
        return list(self.inputs)

    @property
    def writes(self) -> list:
        return [v for v in self.outputs if v is not NULL]


@dataclass
class _Jump:
    cond: object
    label: str
    dest: int = -1

    @property
    def reads(self) -> list:
        return [self.cond]

    writes: list = field(default_factory=list)


def _same_static_type(a: Value, b: Value, any_shape: bool = False) -> bool:
    ta, tb = a.type, b.type
    if not (isinstance(ta, TensorType) and isinstance(tb, TensorType) and ta.is_static and tb.is_static):
        return False
    if any_shape:
        return ta.dtype == tb.dtype and ta.quant == tb.quant
    return ta == tb


def operator_name(domain: str, op_type: str) -> str:
    return f"{domain or 'onnx'}::{op_type}"


def captured_values(block: Block) -> list[Value]:
    """Non-constant values of enclosing blocks that ``block`` (or a block nested in it) reads."""
    defined: set[int] = set()
    used: dict[int, Value] = {}

    def visit(b: Block) -> None:
        defined.update(id(v) for v in b.constants.values())
        defined.update(id(v) for v in b.inputs)
        for op in b.operations:
            for v in op.inputs:
                if v is not None:
                    used.setdefault(id(v), v)
            for nested in op.blocks:
                visit(nested)
            defined.update(id(v) for v in op.outputs)
        for v in b.outputs:
            used.setdefault(id(v), v)

    visit(block)
    # Constants are not captured: the sub-plan lists them as its own constants (same data).
    return [v for k, v in used.items() if k not in defined and not v.is_constant]


def _layout(params: list[Param], given: list, what: str, where: str) -> list:
    """Slots for an op's inputs or outputs: one per fixed param (None when omitted), then the
    variadic ones."""
    variadic = [i for i, p in enumerate(params) if p.variadic]
    if variadic and variadic != [len(params) - 1]:
        raise UnsupportedOpError(f"{where}: only a variadic last {what[:-1]} can be lowered to .pte")
    fixed = len(params) - len(variadic)
    if not variadic and len(given) > fixed:
        raise UnsupportedOpError(f"{where}: {len(given)} {what}, but its schema has {fixed}")
    return list(given) + [None] * max(0, fixed - len(given))


class PlanBuilder:
    """Lowers one block (a function body or a sub-plan's graph) to an ExecutionPlanT."""

    def __init__(
        self,
        lowering,
        name: str,
        block: Block,
        captured: list[Value],
        keep_constants: bool = False,
        states: list[str] = (),
    ):
        self.lowering = lowering
        # A delegate's fallback lists all its constants: they are the weights init receives.
        self.keep_constants = keep_constants
        self.delegates: list = []
        self.name = name
        self.block = block
        self.states = list(states)
        self.inputs = list(block.inputs) + list(captured)
        self.instrs: list = []
        self.operators: dict[tuple[str, str], int] = {}
        self._attr_cache: dict[tuple, _Attr] = {}
        self._loop_consts: dict[str, Value] = {}
        self._synthetic = 0

    # ---- emission -------------------------------------------------------------------------

    def build(self) -> ExecutionPlanT:
        self._block(self.block)
        return self._finish()

    def _block(self, block: Block) -> None:
        for op in block.operations:
            self._operation(op)

    def _operation(self, op: Operation) -> None:
        lowered = _CONTROL.get((op.domain, op.op_type))
        if lowered is not None:
            lowered(self, op)
            return
        schema = lookup(op.domain, op.op_type)
        where = self._where(op)
        if schema is None:
            raise UnsupportedOpError(
                f"{where}: the op has no schema, so its arguments cannot be laid out in a .pte "
                "KernelCall; register one (offload.ir.register) or rewrite the op before saving"
            )
        outputs = [None if _omitted(v) else v for v in op.outputs]
        attrs = {}
        for name, spec in schema.attributes.items():
            value = op.attributes.get(name, spec.default)
            if spec.type == "graph" and value is not None:
                attrs[name] = self._subplan(op, name, value)
            else:
                attrs[name] = value
        self._call(schema, list(op.inputs), attrs, outputs, op.name or op.qualified_type, where)

    def _call(self, schema: OpSchema, inputs: list, attrs: dict, outputs: list, label: str, where: str):
        ins = _layout(schema.inputs, inputs, "inputs", where)
        outs = _layout(schema.outputs, outputs, "outputs", where)
        attr_slots = [
            self._attribute(spec, attrs.get(name, spec.default), where)
            for name, spec in schema.attributes.items()
        ]
        in_slots = [NULL if v is None else v for v in ins]
        out_slots = [NULL if v is None else v for v in outs]
        both_variadic = any(p.variadic for p in schema.inputs) and any(p.variadic for p in schema.outputs)
        overload = f"in{len(in_slots)}" if both_variadic else ""
        reads = [v for v in ins if v is not None]
        for a in attr_slots:
            if isinstance(a, _Attr):
                reads.extend(a.reads)
        writes = [v for v in outs if v is not None]
        op = (operator_name(schema.domain, schema.name), overload)
        self.instrs.append(_Kernel(op, in_slots + attr_slots + out_slots, reads, writes, label))

    def _synthetic_call(self, op_type: str, inputs: list, outputs: list, label: str, domain="", **attrs):
        schema = lookup(domain, op_type)
        self._call(schema, inputs, attrs, outputs, label, self._plan_where())

    def _move(self, src, dst, label: str) -> None:
        if src is not dst:
            self.instrs.append(_Move(src, dst, label))

    def _jump(self, cond, label: str) -> _Jump:
        j = _Jump(cond, label)
        self.instrs.append(j)
        return j

    def _where(self, op: Operation) -> str:
        return f"{self._plan_where()}: op '{op.name or op.op_type}' ({op.qualified_type})"

    def _plan_where(self) -> str:
        source = self.lowering.program.source
        return f"{source}: plan '{self.name}'" if source else f"plan '{self.name}'"

    # ---- If / Loop --------------------------------------------------------------------------

    def _if(self, op: Operation) -> None:
        where = self._where(op)
        cond = op.inputs[0] if op.inputs else None
        if cond is None:
            raise UnsupportedOpError(f"{where}: If has no condition input")
        branches = [op.attributes.get("then_branch"), op.attributes.get("else_branch")]
        for b in branches:
            if not isinstance(b, Block) or len(b.outputs) < len(op.outputs):
                raise UnsupportedOpError(
                    f"{where}: each branch must be a graph returning {len(op.outputs)} values"
                )
        label = op.name or "If"
        to_else = self._jump(cond, f"{label}/then")
        self._branch(branches[0], op, label)
        to_end = self._jump(FALSE, f"{label}/end")
        to_else.dest = len(self.instrs)
        self._branch(branches[1], op, label)
        to_end.dest = len(self.instrs)

    def _branch(self, block: Block, op: Operation, label: str) -> None:
        self._block(block)
        for result, out in zip(block.outputs, op.outputs):
            if not _omitted(out):
                self._move(result, out, label)

    def _loop(self, op: Operation) -> None:
        where = self._where(op)
        body = op.attributes.get("body")
        ins = list(op.inputs) + [None] * max(0, 2 - len(op.inputs))
        M, cond, v_initial = ins[0], ins[1], ins[2:]
        n = len(v_initial)
        if M is None and cond is None:
            raise UnsupportedOpError(
                f"{where}: a Loop with neither a trip count M nor a condition never ends; give it one"
            )
        if not isinstance(body, Block) or len(body.inputs) != 2 + n or len(body.outputs) < 1 + n:
            raise UnsupportedOpError(
                f"{where}: the body must take (iteration, condition, {n} carried values) and return "
                f"(condition, {n} carried values, scan outputs…)"
            )
        if len(op.outputs) > len(body.outputs) - 1:
            raise UnsupportedOpError(
                f"{where}: {len(op.outputs)} results, but the body returns {len(body.outputs) - 1}"
            )
        label = op.name or "Loop"
        iter_v, cond_in, v_in = body.inputs[0], body.inputs[1], body.inputs[2:]
        cond_out, v_out, scans = body.outputs[0], body.outputs[1 : 1 + n], body.outputs[1 + n :]
        results, scan_results = op.outputs[:n], op.outputs[n:]
        wanted = [(s, r) for s, r in zip(scans, scan_results) if not _omitted(r)]
        accs = [self._temp(f"{label}/acc{j}", SequenceType(s.type)) for j, (s, _) in enumerate(wanted)]

        self._move(self._const("zero", np.array(0, np.int64)), iter_v, label)
        self._move(cond if cond is not None else self._const("true", np.array(True)), cond_in, label)
        for a, b in zip(v_initial, v_in):
            self._move(NULL if a is None else a, b, label)
        for acc in accs:
            self._synthetic_call("SequenceEmpty", [], [acc], label)
        head = len(self.instrs)
        go = cond_in
        if M is not None:
            go = self._temp(f"{label}/go", TensorType(DataType.BOOL))
            self._synthetic_call("Less", [iter_v, M], [go], label)
            if cond is not None:
                self._synthetic_call("And", [go, cond_in], [go], label)
        exit_jump = self._jump(go, f"{label}/exit")
        self._block(body)
        # Scan values first: one may be a carried input that the moves below overwrite.
        for acc, (scan, _) in zip(accs, wanted):
            self._synthetic_call("SequenceInsert", [acc, scan], [acc], label)
        # Without a cond input the body's condition output is ignored (ONNX's for loop).
        sources = ([cond_out] if cond is not None else []) + list(v_out)
        targets = ([cond_in] if cond is not None else []) + list(v_in)
        self._parallel_move(sources, targets, label)
        self._synthetic_call("Add", [iter_v, self._const("one", np.array(1, np.int64))], [iter_v], label)
        back = self._jump(FALSE, f"{label}/next")
        back.dest = head
        exit_jump.dest = len(self.instrs)
        for v, r in zip(v_in, results):
            if not _omitted(r):
                self._move(v, r, label)
        for acc, (scan, r) in zip(accs, wanted):
            dtype, shape = _empty_scan_type(scan)
            self._synthetic_call(
                "StackSequence", [acc], [r], label, domain="offload", dtype=int(dtype), shape=shape
            )

    def _parallel_move(self, sources: list, targets: list, label: str) -> None:
        """targets[k] ← sources[k] for all k at once: a source that is another move's target is
        first copied aside."""
        target_ids = {id(t) for t in targets}
        staged = []
        for s, t in zip(sources, targets):
            if s is not t and id(s) in target_ids:
                tmp = self._temp(f"{label}/carry", getattr(s, "type", None))
                self._move(s, tmp, label)
                s = tmp
            staged.append((s, t))
        for s, t in staged:
            self._move(s, t, label)

    def _temp(self, name: str, type_) -> Value:
        self._synthetic += 1
        return Value(f"{name}~{self._synthetic}", type_)

    def _const(self, key: str, array: np.ndarray) -> Value:
        v = self._loop_consts.get(key)
        if v is None:
            v = self._loop_consts[key] = Value(f"loop.{key}", None, array)
        return v

    # ---- delegates --------------------------------------------------------------------------

    def _delegate(self, op: Operation) -> None:
        where = self._where(op)
        backend, processed = op.attributes.get("backend"), op.attributes.get("processed")
        fallback = op.attributes.get("fallback")
        if not isinstance(backend, str) or not backend:
            raise UnsupportedOpError(f"{where}: a Delegate needs its backend's name")
        if not isinstance(processed, (bytes, bytearray, memoryview)):
            raise UnsupportedOpError(f"{where}: a Delegate's 'processed' must be bytes")
        if not isinstance(fallback, Block):
            raise UnsupportedOpError(f"{where}: a Delegate needs its fallback block")
        if len(fallback.inputs) != len(op.inputs) or len(fallback.outputs) != len(op.outputs):
            raise UnsupportedOpError(
                f"{where}: the fallback takes {len(fallback.inputs)} and returns {len(fallback.outputs)} "
                f"values; the op has {len(op.inputs)} inputs and {len(op.outputs)} outputs"
            )
        if any(v is None for v in op.inputs) or captured_values(fallback):
            raise UnsupportedOpError(f"{where}: a fallback must read only its parameters and constants")
        specs = dl.spec_pairs(op.attributes.get("compile_specs"), where)
        k = len(self.delegates)
        plan = self.lowering.add_subplan(
            dl.fallback_plan_name(self.name, k), fallback, [], keep_constants=True
        )
        ref = self.lowering.blobs.reference(bytes(processed))
        notes = (
            {dl.FP16_ERROR_KEY: op.attributes["fp16_error"].encode()}
            if op.attributes.get("fp16_error")
            else {}
        )
        self.delegates.append(dl.backend_delegate(backend, ref, specs, plan, notes))
        outputs = [NULL if _omitted(v) else v for v in op.outputs]
        self.instrs.append(_DelegateCall(k, list(op.inputs), outputs, op.name or f"{backend} delegate"))

    # ---- attributes -----------------------------------------------------------------------

    def _attribute(self, spec, value, where: str):
        if value is None:
            return NULL
        encode = _ENCODERS.get(spec.type)
        if encode is None:
            raise UnsupportedOpError(f"{where}: attribute '{spec.name}' of type {spec.type} has no .pte form")
        return encode(self, value)

    def _cached(self, key: tuple, build: Callable[[], _Attr]) -> _Attr:
        a = self._attr_cache.get(key)
        if a is None:
            a = self._attr_cache[key] = build()
        return a

    def _scalar(self, key: tuple, evalue) -> _Attr:
        return self._cached(key, lambda: _Attr(lambda ix: evalue))

    def _enc_number(self, x) -> _Attr:
        return self._scalar(evalues.number_key(x), evalues.number(x))

    def _enc_str(self, s) -> _Attr:
        return self._scalar(("s", str(s)), evalues.string(str(s)))

    def _enc_ints(self, xs) -> _Attr:
        items = tuple(int(x) for x in xs)
        return self._scalar(("I", items), evalues.int_list(items))

    def _enc_floats(self, xs) -> _Attr:
        items = [float(x) for x in xs]
        return self._scalar(("D", np.asarray(items, np.float64).tobytes()), evalues.double_list(items))

    def _enc_strs(self, xs) -> _Attr:
        items = tuple(self._enc_str(x) for x in xs)
        return _Attr(lambda ix: evalues.tensor_list([ix(i) for i in items]), refs=items)

    def _enc_tensor(self, a) -> _Attr:
        array = np.asarray(a)
        index = self.lowering.constant_index(array)
        return _Attr(lambda ix: evalues.constant(array, index, ""))

    def _enc_tensors(self, xs) -> _Attr:
        items = tuple(self._enc_tensor(x) for x in xs)
        return _Attr(lambda ix: evalues.tensor_list([ix(i) for i in items]), refs=items)

    def _enc_type(self, t) -> _Attr:
        return self._enc_str(type_text(t))

    def _enc_graph(self, ref) -> _Attr:
        index, captured = ref
        return _Attr(
            lambda ix: evalues.int_list([index] + [ix(v) for v in captured]),
            refs=tuple(captured),
            reads=tuple(captured),
        )

    def _subplan(self, op: Operation, attr: str, block) -> tuple[int, list[Value]]:
        if not isinstance(block, Block):
            raise UnsupportedOpError(f"{self._where(op)}: attribute '{attr}' is not a graph")
        label = op.name or f"#{len(self.instrs)}"
        captured = captured_values(block)
        index = self.lowering.add_subplan(f"{self.name}/{label}/{attr}", block, captured)
        return index, captured

    # ---- numbering, memory plan, packing ---------------------------------------------------

    def _finish(self) -> ExecutionPlanT:
        order = _SlotOrder(self.inputs)
        if self.keep_constants:
            for v in self.block.constants.values():
                order.add(v)
        for ins in self.instrs:
            for s in _slots(ins):
                order.add(s)
        for v in self.block.outputs:
            order.add(v)
        slots = order.slots()
        index = {id(s): i for i, s in enumerate(slots)}

        def ix(s) -> int:
            return index[id(s)]

        values = [self._evalue(s, ix) for s in slots]
        outputs = [ix(v) for v in self.block.outputs]
        inputs = [ix(v) for v in self.inputs]
        plan = self._memory_plan(values, ix, outputs)
        if plan.arena_size > MAX_ARENA_BYTES:
            raise UnsupportedOpError(
                f"plan '{self.name}': its tensors need an arena of {plan.arena_size} bytes; "
                f"a .pte arena holds at most {MAX_ARENA_BYTES} (64-bit offsets)"
            )
        for v, offset in plan.offsets.items():
            evalues.set_allocation(values[v], MEMORY_ID, offset)

        p = ExecutionPlanT()
        p.name = self.name
        meta = ContainerMetadataT()
        names = [v.name for v in self.inputs]
        # A method with state lists which inputs are state (runtime.Module keeps them).
        meta.encodedInpStr = json.dumps({"inputs": names, "states": self.states} if self.states else names)
        meta.encodedOutStr = json.dumps([v.name for v in self.block.outputs])
        p.containerMetaType = meta
        p.values = values
        p.inputs, p.outputs = inputs, outputs
        chain = ChainT()
        chain.inputs, chain.outputs = list(inputs), list(outputs)
        chain.instructions = [self._instruction(ins, ix) for ins in self.instrs]
        p.operators = [_operator(name, overload) for name, overload in self.operators]
        chain.stacktrace = [_frames(ins.label) for ins in self.instrs]
        p.chains = [chain]
        p.delegates = self.delegates
        p.nonConstBufferSizes = [0, plan.arena_size]
        self.memory = plan
        return p

    def _evalue(self, s, ix):
        if s is NULL:
            return evalues.null()
        if s is FALSE:
            return evalues.boolean(False)
        if isinstance(s, _Attr):
            return s.build(ix)
        if s.is_constant:
            array = np.asarray(s.const_value)
            return evalues.constant(array, self.lowering.constant_index(array, s), s.name)
        return evalues.value_slot(s.type, s.name)

    def _memory_plan(self, values, ix, outputs) -> mp.MemoryPlan:
        accesses = [([ix(v) for v in ins.reads], [ix(v) for v in ins.writes]) for ins in self.instrs]
        loops = [
            (ins.dest, pc) for pc, ins in enumerate(self.instrs) if isinstance(ins, _Jump) and ins.dest <= pc
        ]
        inputs = {ix(v) for v in self.inputs}
        once = self._load_time_values(ix)
        sizes = {}
        for i, e in enumerate(values):
            n = evalues.plannable_bytes(e) if i not in inputs and i not in once else None
            if n is not None:
                sizes[i] = n
        return mp.plan(sizes, accesses, loops, outputs, overwrites=self._overwrites(ix, sizes))

    def _overwrites(self, ix, sizes: dict[int, int]) -> list[tuple[int, int, int]]:
        """``(pc, output, input)`` for each kernel call that may write its one output over an
        input of the same static tensor type (``WRITES_OVER``; of any shape for ``RESHAPES``,
        the sizes being equal; a smaller one for ``SHRINKS_OVER``), of at least
        ``MIN_OVERWRITE_BYTES``; the memory plan decides."""
        out = []
        for pc, ins in enumerate(self.instrs):
            if not isinstance(ins, _Kernel) or len(ins.writes) != 1:
                continue
            op = ins.operator[0]
            result = ins.writes[0]
            if sizes.get(ix(result), 0) < MIN_OVERWRITE_BYTES:
                continue
            if op in SHRINKS_OVER:
                source = ins.args[0] if ins.args else NULL
                if (
                    isinstance(source, Value)
                    and _same_static_type(source, result, any_shape=True)
                    and sizes[ix(result)] < sizes.get(ix(source), 0)
                ):
                    out.append((pc, ix(result), ix(source)))
                continue
            for k in WRITES_OVER.get(op, ()):
                source = ins.args[k] if k < len(ins.args) else NULL
                if isinstance(source, Value) and _same_static_type(source, result, op in RESHAPES):
                    out.append((pc, ix(result), ix(source)))
        return out

    def _load_time_values(self, ix) -> set[int]:
        """Values the runtime computes once, at a method's first run, and keeps with the
        constants (runtime/load_time.py, _find_load_time): the tensor results of deterministic ONNX
        kernels (``ir.computed_once``) before the first jump whose inputs are constants or such
        values, other than the plan's results. They take no place in the arena."""
        jumps = [pc for pc, ins in enumerate(self.instrs) if isinstance(ins, _Jump)]
        limit = min([*jumps, *(self.instrs[pc].dest for pc in jumps), len(self.instrs)])
        results = {id(v) for v in self.block.outputs}
        known: set[int] = set()  # ids of the values computed once so far
        out = set()
        for ins in self.instrs[:limit]:
            if not isinstance(ins, _Kernel) or not ins.reads or not ins.writes:
                continue
            domain, _, op_type = ins.operator[0].partition("::")
            if not computed_once("" if domain == "onnx" else domain, op_type):
                continue
            if not all(v.is_constant or id(v) in known for v in ins.reads):
                continue
            if any(id(v) in results or not isinstance(v.type, TensorType) for v in ins.writes):
                continue
            known.update(id(v) for v in ins.writes)
            out.update(ix(v) for v in ins.writes)
        return out

    def _instruction(self, ins, ix) -> InstructionT:
        t = InstructionT()
        if isinstance(ins, _Kernel):
            call = KernelCallT()
            call.opIndex = self.operators.setdefault(ins.operator, len(self.operators))
            call.args = [ix(s) for s in ins.args]
            t.instrArgsType, t.instrArgs = InstructionArguments.KernelCall, call
        elif isinstance(ins, _DelegateCall):
            call = DelegateCallT()
            call.delegateIndex = ins.index
            call.args = [ix(s) for s in ins.args]
            t.instrArgsType, t.instrArgs = InstructionArguments.DelegateCall, call
        elif isinstance(ins, _Move):
            call = MoveCallT()
            call.moveFrom, call.moveTo = ix(ins.src), ix(ins.dst)
            t.instrArgsType, t.instrArgs = InstructionArguments.MoveCall, call
        else:
            call = JumpFalseCallT()
            call.condValueIndex, call.destinationInstruction = ix(ins.cond), ins.dest
            t.instrArgsType, t.instrArgs = InstructionArguments.JumpFalseCall, call
        return t


class _SlotOrder:
    """Collects slots by section: constants, plan inputs, other values, attribute values."""

    def __init__(self, inputs: list[Value]):
        self.inputs = inputs
        self._input_ids = {id(v) for v in inputs}
        self._seen: set[int] = {id(NULL), id(FALSE)}
        self.constants: list = []
        self.others: list = []
        self.attrs: list = []

    def add(self, s) -> None:
        if id(s) in self._seen:
            return
        self._seen.add(id(s))
        if isinstance(s, _Attr):
            for r in s.refs:
                self.add(r)
            self.attrs.append(s)
        elif id(s) in self._input_ids:
            pass
        elif s.is_constant:
            self.constants.append(s)
        else:
            self.others.append(s)

    def slots(self) -> list:
        return [NULL, FALSE, *self.constants, *self.inputs, *self.others, *self.attrs]


def _slots(ins) -> list:
    if isinstance(ins, (_Kernel, _DelegateCall)):
        return ins.args
    if isinstance(ins, _Move):
        return [ins.src, ins.dst]
    return [ins.cond]


def _omitted(v: Value) -> bool:
    """An unnamed output nobody reads is an omitted optional one (as the verifier has it)."""
    return not v.name and not v.uses


def _empty_scan_type(scan: Value) -> tuple[DataType, list[int]]:
    """Element type and per-iteration shape of a scan output when the loop runs zero times
    (what the Loop kernel takes from the body's declared type)."""
    t = scan.type
    if not isinstance(t, TensorType):
        return DataType.FLOAT, []
    return t.dtype, list(t.shape) if t.is_static else []


def _operator(name: str, overload: str) -> OperatorT:
    o = OperatorT()
    o.name, o.overload = name, overload
    return o


def _frames(label: str) -> FrameListT:
    f = FrameT()
    f.name = label
    fl = FrameListT()
    fl.items = [f]
    return fl


_CONTROL = {
    ("", "If"): PlanBuilder._if,
    ("", "Loop"): PlanBuilder._loop,
    ("offload", "Delegate"): PlanBuilder._delegate,
}

_ENCODERS = {
    "int": PlanBuilder._enc_number,
    "float": PlanBuilder._enc_number,
    "str": PlanBuilder._enc_str,
    "ints": PlanBuilder._enc_ints,
    "floats": PlanBuilder._enc_floats,
    "strs": PlanBuilder._enc_strs,
    "tensor": PlanBuilder._enc_tensor,
    "sparse_tensor": PlanBuilder._enc_tensor,
    "tensors": PlanBuilder._enc_tensors,
    "type": PlanBuilder._enc_type,
    "graph": PlanBuilder._enc_graph,
}
