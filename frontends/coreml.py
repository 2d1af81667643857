"""Core ML import: an ML program (``.mlpackage``, ``.mlmodel``) → ir.Program with ONNX-semantics ops.

Each MIL function becomes a function of the program (a method of the ``.pte``), its block the one
specialized for the function's opset. MIL values keep their names. ``const`` ops are not
operations here: their values (inline, or blobs read from a weight file) are known at
import, become block constants where an op reads them as tensors, and are read directly where a
rule needs a parameter (``pad_type``, ``axes`` …). Every other op is translated by one rule
(``coreml_node.rule``, in the ``coreml_ops_*`` modules); an op without a rule is an
``UnsupportedOpError`` naming it, and docs/coreml.md lists the rules. ``cond`` becomes ``If`` and
``while_loop`` becomes ``Loop`` here, since they translate nested blocks.

After translation every op output's inferred shape is compared with the one MIL declares: a
difference is a ``ModelFormatError`` naming the op, so a rule (or a model) that gets a shape
wrong stops at import rather than computing something else.
"""

from __future__ import annotations

import os

import numpy as np

from offload.errors import DTypeError, ModelFormatError, ShapeError, UnsupportedOpError
from offload.ir import (
    Block,
    DataType,
    Function,
    Namer,
    Operation,
    Program,
    TensorType,
    Value,
)

from . import coreml_ops  # noqa: F401  (registers the rules)
from .coreml_node import RULES, Const, Node
from .coreml_reader import BLOB_CODES, CoreMLModel, read_mlmodel, read_mlpackage
from .finish import typed_and_verified

MAX_RANK = 64
MAX_CONST_ELEMENTS = 1 << 32
MAX_DEPTH = 64  # nested blocks

# MIL DataType (MIL.proto) → IR element type; sub-byte types are held unpacked in int8/uint8.
DTYPES = {
    1: DataType.BOOL,
    2: DataType.STRING,
    10: DataType.FLOAT16,
    11: DataType.FLOAT,
    12: DataType.DOUBLE,
    13: DataType.BFLOAT16,
    21: DataType.INT8,
    22: DataType.INT16,
    23: DataType.INT32,
    24: DataType.INT64,
    25: DataType.INT8,  # int4
    31: DataType.UINT8,
    32: DataType.UINT16,
    33: DataType.UINT32,
    34: DataType.UINT64,
    35: DataType.UINT8,  # uint4
    36: DataType.UINT8,  # uint2
    37: DataType.UINT8,  # uint1
    38: DataType.UINT8,  # uint6
    39: DataType.UINT8,  # uint3
}
MIL_TYPE_NAMES = {
    1: "bool", 2: "string", 10: "fp16", 11: "fp32", 12: "fp64", 13: "bf16", 21: "int8", 22: "int16",
    23: "int32", 24: "int64", 25: "int4", 31: "uint8", 32: "uint16", 33: "uint32", 34: "uint64",
    35: "uint4", 36: "uint2", 37: "uint1", 38: "uint6", 39: "uint3", 40: "fp8e4m3fn", 41: "fp8e5m2",
}  # fmt: skip
SUB_BYTE_BITS = {25: 4, 35: 4, 36: 2, 37: 1, 38: 6, 39: 3}


class _Scope:
    """MIL names visible in a block: its own, then its parents'."""

    def __init__(self, parent: _Scope | None = None):
        self.names: dict[str, Value | Const] = {}
        self.parent = parent

    def get(self, name: str):
        scope = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None


class _State:
    """A state input of a function (iOS18): its value as the ops so far have left it."""

    def __init__(self, name: str, value: Value):
        self.name, self.input, self.current = name, value, value


class _Importer:
    def __init__(self, model: CoreMLModel):
        self.model = model
        self.origin = model.origin
        self.namer = Namer()
        self.block: Block | None = None  # the block ops are being appended to
        # id(Const) → (the Const, its block constant): the Const is held so that its id is not
        # reused by another one while the entry exists.
        self.const_values: dict[int, tuple[Const, Value]] = {}
        self.declared: list[tuple[Value, TensorType, str]] = []
        self.bound: set[int] = set()  # ids of the IR values a MIL name already stands for
        self.unknown = 0  # symbolic dimensions handed out

    def fail(self, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.origin}: malformed ML program: {what}")

    # ---- building ------------------------------------------------------------------------------

    def const(self, array: np.ndarray) -> Value:
        return self.block.add_constant(self.namer.fresh("const"), array)

    def op(self, op_type: str, inputs, attrs=None, num_outputs: int = 1) -> list[Value]:
        names = [self.namer.fresh(op_type) for _ in range(num_outputs)]
        return self.block.append(Operation(op_type, list(inputs), attrs, output_names=names)).outputs

    def as_value(self, bound) -> Value:
        """An IR value for a binding: a Const becomes a constant of the function's top block."""
        if isinstance(bound, Value):
            return bound
        if isinstance(bound, _State):
            raise UnsupportedOpError(f"{self.origin}: state '{bound.name}' is read other than by read_state")
        key = id(bound)
        if key not in self.const_values:
            array = bound.array
            if bound.dtype == DataType.STRING:
                raise UnsupportedOpError(f"{self.origin}: a string constant cannot be a tensor input here")
            array = array if array.flags.c_contiguous else array.copy()  # (ascontiguousarray makes 0-d 1-d)
            self.const_values[key] = (bound, self.top.add_constant(self.namer.fresh("const"), array))
        return self.const_values[key][1]

    # ---- types and values ------------------------------------------------------------------------

    def value_type(self, vt, where: str) -> TensorType:
        kind = vt.WhichOneof("type")
        if kind == "stateType":
            raise UnsupportedOpError(
                f"{self.origin}: {where}: state values (stateful models) are not supported yet"
            )
        if kind != "tensorType":
            raise UnsupportedOpError(f"{self.origin}: {where}: {kind or 'untyped'} values are not supported")
        t = vt.tensorType
        if t.dataType not in DTYPES:
            name = MIL_TYPE_NAMES.get(t.dataType, f"code {t.dataType}")
            raise UnsupportedOpError(f"{self.origin}: {where}: element type {name} is not supported")
        if t.rank < 0 or t.rank > MAX_RANK or len(t.dimensions) not in (0, t.rank):
            raise self.fail(f"{where}: rank {t.rank} with {len(t.dimensions)} dimensions")
        dims = []
        for _i, d in enumerate(t.dimensions):
            if d.WhichOneof("dimension") == "constant":
                if d.constant.size >= 1 << 62:
                    raise self.fail(f"{where}: dimension {d.constant.size} is too large")
                dims.append(int(d.constant.size))
            elif d.unknown.variadic:
                raise UnsupportedOpError(f"{self.origin}: {where}: variadic dimensions are not supported")
            else:
                self.unknown += 1
                dims.append(f"unknown_{self.unknown}")
        shape = tuple(dims) if len(t.dimensions) == t.rank else None
        return TensorType(DTYPES[t.dataType], shape)

    def const_array(self, value, where: str) -> Const:
        """A MIL Value (inline or in a weight file) as a numpy array of its declared type."""
        vt = value.type
        if vt.WhichOneof("type") != "tensorType":
            raise UnsupportedOpError(f"{self.origin}: {where}: only tensor constants are supported")
        t = vt.tensorType
        ttype = self.value_type(vt, where)
        if ttype.shape is None or not ttype.is_static:
            raise self.fail(f"{where}: a constant of unknown shape")
        count = int(np.prod(ttype.shape, dtype=np.int64)) if ttype.shape else 1
        if count > MAX_CONST_ELEMENTS:
            raise self.fail(f"{where}: a constant of {count} elements")
        kind = value.WhichOneof("value")
        if kind == "blobFileValue":
            blob = value.blobFileValue
            code = BLOB_CODES.get(t.dataType)
            if code is None:
                raise self.fail(
                    f"{where}: {MIL_TYPE_NAMES.get(t.dataType)} values cannot be stored in a weight file"
                )
            array = self.model.weight_file(blob.fileName, where).blob(blob.offset, code, count, where)
        elif kind == "immediateValue" and value.immediateValue.WhichOneof("value") == "tensor":
            array = self.immediate(value.immediateValue.tensor, t.dataType, ttype.dtype, count, where)
        else:
            raise UnsupportedOpError(f"{self.origin}: {where}: {kind or 'empty'} constants are not supported")
        return Const(array.reshape(ttype.shape), ttype.dtype)

    def immediate(self, tensor, mil_type: int, dtype: DataType, count: int, where: str) -> np.ndarray:
        kind = tensor.WhichOneof("value")
        if kind is None:
            values = np.zeros(0)
        elif kind == "bytes":
            raw = np.frombuffer(tensor.bytes.values, np.uint8)
            if mil_type in SUB_BYTE_BITS:
                from .coreml_reader import unpack_bits

                bits = SUB_BYTE_BITS[mil_type]
                if raw.size * 8 < count * bits:
                    raise self.fail(f"{where}: {raw.size} bytes hold fewer than {count} {bits}-bit values")
                return unpack_bits(raw, bits, count, signed=mil_type == 25)
            item = dtype.numpy.newbyteorder("<")
            if raw.size != count * item.itemsize:
                raise self.fail(f"{where}: {raw.size} bytes for {count} values of {dtype.name}")
            return raw.view(item).astype(dtype.numpy)
        else:
            values = np.asarray(getattr(tensor, kind).values)
        if kind == "strings":
            values = np.asarray(list(values), dtype=object)
        if values.size == 1 and count != 1:
            values = np.broadcast_to(values, (count,))
        if values.size != count:
            raise self.fail(f"{where}: {values.size} values for a constant of {count} elements")
        if (kind == "strings") != (dtype == DataType.STRING):
            raise self.fail(f"{where}: {kind} values for a constant of type {dtype.name}")
        if dtype == DataType.STRING:
            return values
        want = dtype.numpy  # a DTypeError of its own where numpy has no such type
        try:
            return values.astype(want)
        except (ValueError, TypeError, OverflowError) as e:
            raise self.fail(f"{where}: {kind} values do not fit type {dtype.name}: {e}") from None

    def binding(self, b, scope: _Scope, where: str):
        kind = b.WhichOneof("binding")
        if kind == "name":
            bound = scope.get(b.name)
            if bound is None:
                raise self.fail(f"{where}: '{b.name}' is read before it is defined")
            return bound
        if kind == "value":
            return self.const_array(b.value, where)
        raise self.fail(f"{where}: an empty binding")

    # ---- blocks ----------------------------------------------------------------------------------

    def define(self, scope: _Scope, name: str, value, where: str) -> None:
        if not name or scope.get(name) is not None:
            raise self.fail(f"{where}: name '{name}' is defined twice or empty")
        scope.names[name] = value
        if isinstance(value, Value) and value.producer is not None and name not in self.namer:
            self.namer.reserve(name)
            value.name = name

    def translate(self, mil_block, scope: _Scope, depth: int) -> list:
        """Translate the operations of ``mil_block`` into ``self.block``; its outputs' bindings."""
        if depth > MAX_DEPTH:
            raise self.fail(f"blocks nest deeper than {MAX_DEPTH}")
        for n, op in enumerate(mil_block.operations):
            node = Node(self, op, n, scope)
            if op.type == "const":
                if "val" not in op.attributes or len(op.outputs) != 1:
                    raise node.fail("a const without one output and a 'val'")
                self.define(
                    scope, op.outputs[0].name, self.const_array(op.attributes["val"], node.where), node.where
                )
                continue
            if op.type in ("cond", "while_loop"):
                results = self.control(node, depth)
            elif op.type in ("read_state", "write_state", "coreml_update_state"):
                results = self.state_op(node, depth)
            else:
                fn = RULES.get(op.type)
                if fn is None:
                    raise UnsupportedOpError(
                        f"{self.origin}: {node.where}: MIL op '{op.type}' is not supported; "
                        "docs/coreml.md lists the ops offload imports"
                    )
                try:
                    results = fn(node)
                except (ShapeError, DTypeError):  # a rule's own error names what does not fit
                    raise
                except (IndexError, KeyError, ValueError, TypeError, ZeroDivisionError, OverflowError) as e:
                    # A parameter past what the op allows (an axis beyond the rank, a size that
                    # does not divide …) that a rule did not check by name: still the model's fault.
                    raise node.fail(
                        f"its inputs do not fit MIL's definition of '{op.type}': {type(e).__name__}: {e}"
                    ) from None
            if len(results) != len(op.outputs):
                raise node.fail(f"has {len(op.outputs)} outputs, its translation {len(results)}")
            for k, (v, declared) in enumerate(zip(results, node.outputs)):
                if isinstance(v, Value) and v.const_value is not None:
                    v = Const(v.const_value, declared.dtype)
                elif isinstance(v, Value):
                    if v.producer is None or id(v) in self.bound:  # one IR value per MIL name
                        v = self.op("Identity", [v])[0]
                    v.type = declared
                    self.bound.add(id(v))
                    self.declared.append((v, declared, node.where))
                self.define(scope, op.outputs[k].name, v, node.where)
        outs = []
        for name in mil_block.outputs:
            bound = scope.get(name)
            if bound is None:
                raise self.fail(f"block output '{name}' is never defined")
            outs.append(bound)
        return outs

    def state_op(self, node: Node, depth: int) -> list[Value]:
        """read_state gives the state's value so far; write_state sets it; coreml_update_state (the
        builder's form, saved as write_state + read_state) sets it and gives it."""
        name = "state" if node.type == "coreml_update_state" else "input"
        state = node._one(name)
        if not isinstance(state, _State):
            raise node.fail(f"input '{name}' is not a state of the function")
        if node.type == "read_state":
            return [state.current]
        if depth:
            raise node.unsupported("a state written inside a cond / while_loop block")
        state.current = node.x("value" if node.type == "coreml_update_state" else "data")
        return [state.current] if node.type == "coreml_update_state" else []

    def sub_block(self, mil_block, scope: _Scope, inputs: list[Value], depth: int, name: str):
        """A nested IR block translating ``mil_block`` with its MIL inputs bound to ``inputs``."""
        outer, block = self.block, Block(name=name)
        inner = _Scope(scope)
        if len(mil_block.inputs) != len(inputs):
            raise self.fail(f"{name}: block has {len(mil_block.inputs)} inputs, {len(inputs)} expected")
        for nv, v in zip(mil_block.inputs, inputs):
            self.define(inner, nv.name, v, name)
        self.block = block
        try:
            outs = [self.as_value(b) for b in self.translate(mil_block, inner, depth + 1)]
        finally:
            self.block = outer
        return block, outs

    def control(self, node: Node, depth: int) -> list[Value]:
        """``cond`` → If; ``while_loop`` → Loop whose body tests the condition after each step."""
        blocks = node.proto.blocks
        if node.type == "cond":
            if len(blocks) != 2:
                raise node.fail(f"has {len(blocks)} blocks, not 2")
            pred = node.x("pred")
            branches = []
            for b, label in zip(blocks, ("then", "else")):
                block, outs = self.sub_block(b, node.scope, [], depth, f"{node.out_names[0]}_{label}")
                block.outputs = [self._fresh_output(block, v) for v in outs]
                branches.append(block)
            if len(branches[0].outputs) != len(branches[1].outputs):
                raise node.fail("its branches return different numbers of values")
            if pred.type is None or pred.type.dtype != DataType.BOOL:
                pred = node.cast(pred, DataType.BOOL)
            return node.op(
                "If", [pred], {"then_branch": branches[0], "else_branch": branches[1]}, len(node.outputs)
            )
        if len(blocks) != 2:
            raise node.fail(f"has {len(blocks)} blocks (condition, body), not 2")
        init = node.values("loop_vars")
        counted = self._counted(blocks, node, init)
        if counted is None:
            # The condition before the first step, outside the loop.
            _cond_outer, (c0,) = self._inline(blocks[0], node, init, depth)
            trips = None
        else:  # a counter against a bound: the trip count is known before the loop starts
            k, bound = counted
            start = node.cast(init[k], DataType.INT64) if init[k].type.dtype != DataType.INT64 else init[k]
            stop = node.cast(bound, DataType.INT64) if bound.type.dtype != DataType.INT64 else bound
            remaining = node.one("Sub", [stop, start])
            trips = node.one("Max", [node.one("Reshape", [remaining, node.int64s([])]), node.int64s(0)])
            c0 = self.const(np.array(True))
        # The body: the step, then the condition on its results.
        body = Block(name=f"{node.out_names[0]}_body")
        it = Value(self.namer.fresh("iteration"), TensorType(DataType.INT64, ()))
        cin = Value(self.namer.fresh("cond_in"), TensorType(DataType.BOOL, ()))
        carried = [Value(self.namer.fresh(f"{nv.name}_in"), v.type) for nv, v in zip(blocks[1].inputs, init)]
        body.inputs = [it, cin, *carried]
        outer = self.block
        self.block = body
        try:
            inner = _Scope(node.scope)
            for nv, v in zip(blocks[1].inputs, carried):
                self.define(inner, nv.name, v, node.where)
            if len(blocks[1].inputs) != len(init):
                raise node.fail(f"its body takes {len(blocks[1].inputs)} values for {len(init)} loop_vars")
            step = [self.as_value(b) for b in self.translate(blocks[1], inner, depth + 1)]
            if len(step) != len(init):
                raise node.fail(f"its body returns {len(step)} values for {len(init)} loop_vars")
            if trips is None:
                _, (c1,) = self._inline(blocks[0], node, step, depth)
                c1 = self.as_value(c1)
            else:
                c1 = self.op("Identity", [self.const(np.array(True))])[0]
        finally:
            self.block = outer
        body.outputs = [self._fresh_output(body, v) for v in [c1, *step]]
        c0 = self.as_value(c0)
        return node.op("Loop", [trips, c0, *init], {"body": body}, len(init))

    def _counted(self, blocks, node: Node, init: list[Value]) -> tuple[int, Value] | None:
        """(k, n) when the loop counts: its condition is ``less(v_k, n)`` with ``n`` defined outside
        the loop, and its body's k-th result is ``v_k + 1``, on integers. Then it runs
        max(n - v_k, 0) times, which ONNX's Loop takes as its trip count M (and the GPU backends
        can plan: a data-dependent condition they cannot)."""
        cond, body = blocks
        ops = [op for op in cond.operations if op.type != "const"]
        inside = {op.outputs[0].name for op in cond.operations if op.outputs}
        cond_consts = {op.outputs[0].name: op for op in cond.operations if op.type == "const"}

        def bound_name(op, arg):
            b = op.inputs[arg].arguments if arg in op.inputs else []
            return b[0].name if len(b) == 1 and b[0].WhichOneof("binding") == "name" else None

        def is_true(name) -> bool:
            value = None
            if name in cond_consts:
                value = self.const_array(cond_consts[name].attributes["val"], node.where).array
            elif isinstance(node.scope.get(name), Const):
                value = node.scope.get(name).array
            return (
                value is not None and np.asarray(value).size == 1 and bool(np.asarray(value).reshape(-1)[0])
            )

        if len(ops) == 2 and ops[1].type == "logical_and":  # and(true, less(…)), as torch's for loops give
            a, b = bound_name(ops[1], "x"), bound_name(ops[1], "y")
            if not (ops[0].outputs[0].name in (a, b) and is_true(b if a == ops[0].outputs[0].name else a)):
                return None
            if list(cond.outputs) != [ops[1].outputs[0].name]:
                return None
        elif len(ops) != 1 or list(cond.outputs) != [ops[0].outputs[0].name]:
            return None
        if ops[0].type != "less":
            return None
        names = [nv.name for nv in cond.inputs]

        x, y = bound_name(ops[0], "x"), bound_name(ops[0], "y")
        if x not in names or y is None or y in inside or y in names:
            return None
        k = names.index(x)
        if (
            k >= len(init)
            or init[k].type is None
            or init[k].type.dtype not in (DataType.INT32, DataType.INT64)
        ):
            return None
        body_in = [nv.name for nv in body.inputs]
        if k >= len(body_in) or k >= len(body.outputs):
            return None
        steps = [op for op in body.operations if op.outputs and op.outputs[0].name == body.outputs[k]]
        if len(steps) != 1 or steps[0].type != "add":
            return None
        a, b = bound_name(steps[0], "x"), bound_name(steps[0], "y")
        one = b if a == body_in[k] else a if b == body_in[k] else None
        consts = {op.outputs[0].name: op for op in body.operations if op.type == "const"}
        if one is None:
            return None
        if one in consts:
            value = self.const_array(consts[one].attributes["val"], node.where).array
        else:
            bound = node.scope.get(one)
            value = bound.array if isinstance(bound, Const) else None
        if value is None or np.asarray(value).size != 1 or np.asarray(value).reshape(-1)[0] != 1:
            return None
        n = node.scope.get(y)
        if n is None or isinstance(n, _State):
            return None
        n = self.as_value(n)
        if n.type is None or n.type.dtype not in (DataType.INT32, DataType.INT64):
            return None
        return k, n

    def _inline(self, mil_block, node: Node, inputs: list[Value], depth: int):
        """Translate ``mil_block`` into the current block with its inputs bound to ``inputs``."""
        if len(mil_block.inputs) != len(inputs):
            raise node.fail(f"a block takes {len(mil_block.inputs)} values, {len(inputs)} given")
        inner = _Scope(node.scope)
        for nv, v in zip(mil_block.inputs, inputs):
            inner.names[nv.name] = v
        outs = self.translate(mil_block, inner, depth + 1)
        if len(outs) != 1:
            raise node.fail(f"its condition block returns {len(outs)} values, not one")
        return inner, outs

    def _fresh_output(self, block: Block, v: Value) -> Value:
        """A block output that is an op output of ``block`` itself (an Identity otherwise)."""
        if v.producer is not None and v.producer.block is block and v not in block.outputs:
            return v
        outer, self.block = self.block, block
        try:
            return self.op("Identity", [v])[0]
        finally:
            self.block = outer

    # ---- functions -------------------------------------------------------------------------------

    def function(self, name: str, fn) -> Function:
        if fn.opset not in fn.block_specializations:
            raise self.fail(f"function '{name}' has no block for its opset '{fn.opset}'")
        self.block = self.top = Block(name=name)
        self.const_values = {}
        self.namer = Namer()  # names are per function: two functions may both take 'x'
        scope = _Scope()
        states: list[_State] = []
        for k, nv in enumerate(fn.inputs):
            where = f"function '{name}' input {k} ('{nv.name}')"
            is_state = nv.type.WhichOneof("type") == "stateType"
            t = self.value_type(nv.type.stateType.wrappedType if is_state else nv.type, where)
            if t.shape is None:
                raise UnsupportedOpError(f"{self.origin}: {where}: inputs of unknown rank are not supported")
            t = TensorType(
                t.dtype, tuple(d if isinstance(d, int) else f"{nv.name}_{i}" for i, d in enumerate(t.shape))
            )
            if nv.name in self.namer:
                raise self.fail(f"{where}: the name is used twice")
            self.namer.reserve(nv.name)
            v = Value(nv.name, t)
            self.block.inputs.append(v)
            if is_state:
                if not t.is_static:
                    raise UnsupportedOpError(f"{self.origin}: {where}: a state of unknown shape {t.shape}")
                states.append(_State(nv.name, v))
                scope.names[nv.name] = states[-1]
            else:
                scope.names[nv.name] = v
        outs = self.translate(fn.block_specializations[fn.opset], scope, 0)
        # The states' values after the call are the last outputs (ir.Function.states).
        for v in [*outs, *(s.current for s in states)]:
            v = self.as_value(v)
            if v.producer is None or v in self.block.outputs:  # an input, a constant, or listed twice
                v = self.op("Identity", [v])[0]
            self.block.outputs.append(v)
        return Function(name, self.block, {"": 21}, [s.name for s in states])

    def program(self) -> Program:
        spec = self.model.spec
        kind = spec.WhichOneof("Type")
        if kind != "mlProgram":
            shown = kind or "no model"
            raise UnsupportedOpError(
                f"{self.origin}: holds a {shown} model; offload imports ML programs (convert_to='mlprogram')"
            )
        mil = spec.mlProgram
        if not mil.functions:
            raise self.fail("the program has no functions")
        default = spec.description.defaultFunctionName or "main"
        names = sorted(mil.functions, key=lambda n: (n != default, n))
        functions = {name: self.function(name, mil.functions[name]) for name in names}
        meta = {"format": "coreml", "specification_version": str(spec.specificationVersion)}
        for k, v in spec.description.metadata.userDefined.items():
            meta[f"coreml.{k}"] = v
        for feature in spec.description.input:
            note = feature_note(feature)
            if note:
                meta[f"coreml.input.{feature.name}"] = note
        return Program(functions, meta, source=self.origin)

    def check_declared(self) -> None:
        """Every translated op output has the shape and type MIL declares for it."""
        for v, declared, where in self.declared:
            got = v.type
            if not isinstance(got, TensorType) or declared.shape is None or got.shape is None:
                continue
            if got.dtype != declared.dtype:
                raise ModelFormatError(
                    f"{self.origin}: {where}: output '{v.name}' is {got.dtype.name} here, "
                    f"MIL declares {declared.dtype.name}"
                )
            same = len(got.shape) == len(declared.shape) and all(
                not isinstance(a, int) or not isinstance(b, int) or a == b
                for a, b in zip(got.shape, declared.shape)
            )
            if not same:
                raise ModelFormatError(
                    f"{self.origin}: {where}: output '{v.name}' has shape {list(got.shape)} here, "
                    f"MIL declares {list(declared.shape)}"
                )


def feature_note(feature) -> str:
    """What the model description says of an input beyond its tensor type: an image's color
    space (the program itself scales and biases it), a flexible shape's ranges or choices."""
    kind = feature.type.WhichOneof("Type")
    if kind == "imageType":
        t = feature.type.imageType
        space = {10: "GRAYSCALE", 20: "RGB", 30: "BGR", 40: "GRAYSCALE_FLOAT16"}.get(
            t.colorSpace, str(t.colorSpace)
        )
        return f"image {space} {t.width}x{t.height}: feed float32 NCHW pixel values (0-255) in that channel order"
    if kind == "multiArrayType":
        t = feature.type.multiArrayType
        which = t.WhichOneof("ShapeFlexibility")
        if which == "shapeRange":
            ranges = [
                (r.lowerBound, r.upperBound if r.upperBound >= 0 else None) for r in t.shapeRange.sizeRanges
            ]
            return f"flexible shape, ranges {ranges}"
        if which == "enumeratedShapes":
            return f"flexible shape, one of {[list(s.shape) for s in t.enumeratedShapes.shapes]}"
    return ""


def import_coreml(path: str | os.PathLike) -> Program:
    """Import an ``.mlpackage`` folder or an ``.mlmodel`` file holding an ML program."""
    from .coreml_reader import is_mlpackage

    path = os.fspath(path)
    model = read_mlpackage(path) if is_mlpackage(path) else read_mlmodel(path)
    return import_model(model)


def import_model(model: CoreMLModel) -> Program:
    imp = _Importer(model)
    program = imp.program()
    for v, _, _ in imp.declared:
        v.type = None  # inferred anew from the ops
    typed_and_verified(program, model.origin, "operations")
    imp.check_declared()
    return program
