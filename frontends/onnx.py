"""ONNX import: ModelProto bytes → ir.Program, older operator versions rewritten to the latest."""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError, Message

from offload.errors import ModelFixWarning, ModelFormatError
from offload.ir import (
    Block,
    DataType,
    Function,
    Operation,
    OptionalType,
    Program,
    SequenceType,
    TensorType,
    Value,
    infer_op,
    infer_types,
    lookup,
)
from offload.ir.verifier import shape_conflicts
from offload.schemas.generated import onnx_pb2 as pb

from . import (  # noqa: F401  (these register rewrites)
    onnx_contrib,
    onnx_contrib_attention,
    onnx_contrib_embed,
    onnx_contrib_gqa,
    onnx_contrib_nbits,
    onnx_contrib_quant,
    onnx_gradient,
)
from .finish import typed_and_verified
from .onnx_versions import upgrade

# Limits a loader enforces before it allocates anything.
MAX_ELEMENTS = 1 << 34  # 16 Gi elements in one tensor
MAX_RANK = 64
MAX_NESTING = 64

_A = pb.AttributeProto


class _Importer:
    def __init__(self, model: pb.ModelProto, origin: str, base_dir: str | None):
        self.model = model
        self.origin = origin
        self.base_dir = base_dir
        self.opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
        if "" not in self.opsets and model.ir_version < 3:
            self.opsets[""] = 1
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self._counter = 0
        self.shadowed: list[str] = []  # subgraph names that shadow an outer graph's
        self.declared: list[Value] = []  # values whose type a value_info or graph output declares

    def fail(self, msg: str) -> ModelFormatError:
        return ModelFormatError(f"{self.origin}: {msg}")

    def fresh(self, stem: str) -> str:
        self._counter += 1
        return f"{stem}__{self._counter}"

    # ---- tensors -------------------------------------------------------------------------

    def tensor(self, t: pb.TensorProto, what: str = "") -> np.ndarray:
        return tensor_to_numpy(t, self.base_dir, f"{self.origin}: {what or t.name or 'tensor'}")

    def sparse(self, s: pb.SparseTensorProto, what: str) -> np.ndarray:
        values = self.tensor(s.values, what)
        dims = _checked_shape(s.dims, f"{self.origin}: {what}")
        dense = np.zeros(dims, dtype=values.dtype)
        idx = self.tensor(s.indices, what).astype(np.int64)
        n = values.size
        flat = dense.reshape(-1)
        if idx.ndim == 1:
            lin = idx
        elif idx.ndim == 2 and idx.shape[1] == len(dims):
            lin = np.ravel_multi_index(tuple(idx.T), dims) if n else idx[:, 0]
        else:
            raise self.fail(f"{what}: sparse indices of shape {idx.shape} do not fit dims {dims}")
        if lin.size != n or (n and (lin.min() < 0 or lin.max() >= flat.size)):
            raise self.fail(f"{what}: sparse indices out of range for dims {dims}")
        flat[lin] = values.reshape(-1)
        return dense

    # ---- types ---------------------------------------------------------------------------

    def type(self, tp: pb.TypeProto, what: str):
        kind = tp.WhichOneof("value")
        if kind == "tensor_type":
            tt = tp.tensor_type
            dtype = _dtype(tt.elem_type, f"{self.origin}: {what}")
            if not tt.HasField("shape"):
                return TensorType(dtype, None)
            if len(tt.shape.dim) > MAX_RANK:
                raise self.fail(f"{what}: rank {len(tt.shape.dim)} exceeds {MAX_RANK}")
            dims: list = []
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value == -1:
                    dims.append(None)  # several exporters write -1 for "unknown": onnxruntime reads it so
                elif d.HasField("dim_value"):
                    if d.dim_value < 0:
                        raise self.fail(f"{what}: negative dimension {d.dim_value}")
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
            return TensorType(dtype, tuple(dims))
        if kind == "sequence_type":
            return SequenceType(self.type(tp.sequence_type.elem_type, what))
        if kind == "optional_type":
            return OptionalType(self.type(tp.optional_type.elem_type, what))
        if kind == "sparse_tensor_type":
            st = tp.sparse_tensor_type
            return TensorType(_dtype(st.elem_type, f"{self.origin}: {what}"), None)
        return None

    # ---- attributes ----------------------------------------------------------------------

    def attribute(self, a: pb.AttributeProto, scope: _Scope, where: str) -> Any:
        t = a.type
        if t == _A.UNDEFINED:  # very old files leave the type out: infer it from the filled field
            t = next(
                (k for k, f in _ATTR_FIELDS if (a.HasField(f) if k < _A.FLOATS else len(getattr(a, f)))),
                _A.UNDEFINED,
            )
        if t == _A.INT:
            return int(a.i)
        if t == _A.FLOAT:
            return float(a.f)
        if t == _A.STRING:
            return _text(a.s)
        if t == _A.INTS:
            return [int(x) for x in a.ints]
        if t == _A.FLOATS:
            return [float(x) for x in a.floats]
        if t == _A.STRINGS:
            return [_text(s) for s in a.strings]
        if t == _A.TENSOR:
            return self.tensor(a.t, f"{where} attribute {a.name}")
        if t == _A.TENSORS:
            return [self.tensor(x, f"{where} attribute {a.name}") for x in a.tensors]
        if t == _A.SPARSE_TENSOR:
            return self.sparse(a.sparse_tensor, f"{where} attribute {a.name}")
        if t == _A.GRAPH:
            return self.graph(a.g, scope, depth=scope.depth + 1)
        if t == _A.GRAPHS:
            return [self.graph(g, scope, depth=scope.depth + 1) for g in a.graphs]
        if t == _A.TYPE_PROTO:
            return self.type(a.tp, f"{where} attribute {a.name}")
        if t == _A.TYPE_PROTOS:
            return [self.type(x, f"{where} attribute {a.name}") for x in a.type_protos]
        raise self.fail(f"{where}: attribute '{a.name}' has unknown type {a.type}")

    # ---- graphs --------------------------------------------------------------------------

    def graph(self, g: pb.GraphProto, outer: _Scope | None, depth: int = 0) -> Block:
        if depth > MAX_NESTING:
            raise self.fail(f"subgraphs nested deeper than {MAX_NESTING}")
        block = Block(name=g.name or "graph")
        scope = _Scope(outer, depth)
        types = {vi.name: vi.type for vi in g.value_info}
        for t in g.initializer:
            scope.define(t.name, block.add_constant(scope.local(t.name, self), self.tensor(t)), self)
        for s in g.sparse_initializer:
            name = s.values.name
            scope.define(name, block.add_constant(scope.local(name, self), self.sparse(s, name)), self)
        for vi in g.input:
            if vi.name in scope.names:
                continue  # IR < 4 lists initializers as inputs too; they stay constants
            v = Value(scope.local(vi.name, self), self.type(vi.type, f"graph input '{vi.name}'"))
            block.inputs.append(v)
            scope.define(vi.name, v, self)
        for node in g.node:
            self.node(node, block, scope, types)
        for vi in g.output:
            v = scope.get(vi.name)
            if v is None:
                raise self.fail(f"graph '{g.name}' output '{vi.name}' is never produced")
            if vi.type.WhichOneof("value") and v.type is None:
                v.type = self.type(vi.type, f"graph output '{vi.name}'")
                self.declared.append(v)
            block.outputs.append(v)
        return block

    def node(self, node: pb.NodeProto, block: Block, scope: _Scope, types: dict) -> None:
        domain = "" if node.domain == "ai.onnx" else node.domain
        where = f"node '{node.name or node.op_type}' ({node.op_type})"
        if not node.op_type:
            raise self.fail(f"{where}: node has no op_type")
        inputs: list[Value | None] = []
        for name in node.input:
            if name == "":
                inputs.append(None)
                continue
            v = scope.get(name)
            if v is None:
                raise self.fail(f"{where}: input '{name}' is used before it is defined (or never is)")
            inputs.append(v)
        attrs = {a.name: self.attribute(a, scope, where) for a in node.attribute}
        fn = self.functions.get((node.domain, node.op_type))
        if fn is not None:
            self.inline(fn, node, inputs, attrs, block, scope, types, where)
            return
        if domain == "" and node.op_type == "Constant":
            if len(node.output) != 1 or not node.output[0]:
                raise self.fail(f"{where}: a Constant has one named output, this one has {list(node.output)}")
            value = _constant_value(attrs, where, self)
            name = node.output[0]
            scope.define(name, block.add_constant(scope.local(name, self), value), self)
            return
        if domain not in self.opsets and (domain, node.op_type) not in self.functions:
            # Without it no operator version is known; a cut-off file often looks like this.
            raise self.fail(f"{where}: the model declares no opset_import for domain '{domain or 'ai.onnx'}'")
        version = self.opsets[domain]
        outputs = list(node.output)
        builder = _Builder(self, block, scope, node.op_type)
        if onnx_contrib.handles(domain, node.op_type):
            wanted = [bool(name) for name in outputs]
            built = onnx_contrib.rewrite(
                builder, domain, node.op_type, inputs, attrs, wanted, f"{self.origin}: {where}"
            )
        else:
            built = upgrade(
                builder, domain, node.op_type, version, inputs, attrs, len(outputs), f"{self.origin}: {where}"
            )
        if built is None:
            _check_attributes(domain, node.op_type, attrs, f"{self.origin}: {where}")
            op = Operation(
                node.op_type, inputs, attrs, domain=domain, name=node.name, output_names=outputs or []
            )
            block.append(op)
            results = op.outputs
        else:
            results = built
        for name, v in zip(outputs, results):
            if name == "":
                continue
            local = scope.local(name, self)
            if v.name != local:
                v.name = local
            if name in types and v.type is None:
                v.type = self.type(types[name], f"value '{name}'")
                self.declared.append(v)
            scope.define(name, v, self)

    def inline(self, fn: pb.FunctionProto, node, inputs, attrs, block, scope, types, where) -> None:
        """Expand a model-local function in place: its body's names are made unique."""
        inner = _Scope(None, scope.depth + 1)  # a function body sees only its own names
        for formal, actual in zip(fn.input, inputs):
            if actual is not None:
                inner.alias(formal, actual)
        for formal in fn.input[len(inputs) :]:
            inner.alias(formal, None)
        defaults = {a.name: self.attribute(a, scope, where) for a in fn.attribute_proto}
        bound = {**defaults, **attrs}
        for n in fn.node:
            clone = pb.NodeProto()
            clone.CopyFrom(n)
            del clone.attribute[:]
            for a in n.attribute:
                if a.ref_attr_name:
                    if a.ref_attr_name in bound:
                        clone.attribute.append(_attribute_proto(a.name, bound[a.ref_attr_name], a.type))
                else:
                    clone.attribute.append(a)
            # Outputs get fresh names (a function may be called twice); inputs resolve in `inner`.
            fresh = [self.fresh(f"{node.name or fn.name}/{name}") if name else "" for name in n.output]
            del clone.output[:]
            clone.output.extend(fresh)
            sub = _Scope(inner, inner.depth)
            self.node(clone, block, sub, types)
            for name, new in zip(n.output, fresh):
                if name:
                    inner.alias(name, sub.get(new))
        for formal, actual in zip(fn.output, node.output):
            if actual:
                v = inner.get(formal)
                if v is None:
                    raise self.fail(f"{where}: function '{fn.name}' never produces '{formal}'")
                out = Operation("Identity", [v], name=node.name, output_names=[scope.local(actual, self)])
                block.append(out)
                if actual in types:
                    out.outputs[0].type = self.type(types[actual], f"value '{actual}'")
                    self.declared.append(out.outputs[0])
                scope.define(actual, out.outputs[0], self)

    def program(self) -> Program:
        g = self.model.graph
        body = self.graph(g, None)
        body.name = g.name or "main"
        fn = Function("forward", body, dict(self.opsets))
        meta = {p.key: p.value for p in self.model.metadata_props}
        meta.update(
            {
                "ir_version": str(self.model.ir_version),
                "producer_name": self.model.producer_name,
                "producer_version": self.model.producer_version,
            }
        )
        return Program({"forward": fn}, meta, source=self.origin)


class _Scope:
    """Names visible while importing one graph; nested graphs see their enclosing scopes."""

    def __init__(self, outer: _Scope | None, depth: int):
        self.outer, self.depth, self.names = outer, depth, {}

    def get(self, name: str) -> Value | None:
        s = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.outer
        return None

    def define(self, name: str, v: Value, imp: _Importer) -> None:
        if name in self.names:
            raise imp.fail(f"value '{name}' is defined twice")
        self.names[name] = v

    def alias(self, name: str, v: Value | None) -> None:
        self.names[name] = v

    def local(self, name: str, imp: _Importer) -> str:
        """The IR name of a value this graph defines as ``name``: ``name`` itself, or a fresh one
        where it shadows a value of an enclosing graph (ONNX lets a subgraph's names shadow outer
        ones; the IR keeps names unique along a scope chain)."""
        if self.outer is None or self.outer.get(name) is None:
            return name
        imp.shadowed.append(name)
        return imp.fresh(name)


class _Builder:
    """What an import rewrite (a version upgrade, a contrib op's decomposition) may do: add
    constants and operations to the block being built."""

    def __init__(self, imp: _Importer, block: Block, scope: _Scope, source: str):
        self.imp, self.block, self.scope, self.source = imp, block, scope, source

    def const(self, array, dtype=np.int64) -> Value:
        return self.block.add_constant(self.imp.fresh("const"), np.asarray(array, dtype=dtype))

    def op(self, op_type: str, inputs, attrs=None, num_outputs: int = 1, domain: str = "") -> list[Value]:
        _check_attributes(
            domain, op_type, attrs or {}, f"{self.imp.origin}: {op_type} made from {self.source}"
        )
        names = [self.imp.fresh(op_type) for _ in range(num_outputs)]
        op = self.block.append(Operation(op_type, inputs, attrs, domain=domain, output_names=names))
        return op.outputs

    def value(self, stem: str, type=None) -> Value:
        """A fresh value that no operation produces: a parameter of a block being built."""
        return Value(self.imp.fresh(stem), type)

    def nested(self, block: Block) -> _Builder:
        """A builder of ``block``, a body that the operations being built will hold."""
        return _Builder(self.imp, block, self.scope, self.source)


_ATTR_FIELDS = [
    (_A.FLOAT, "f"),
    (_A.INT, "i"),
    (_A.STRING, "s"),
    (_A.TENSOR, "t"),
    (_A.GRAPH, "g"),
    (_A.FLOATS, "floats"),
    (_A.INTS, "ints"),
    (_A.STRINGS, "strings"),
    (_A.TENSORS, "tensors"),
    (_A.GRAPHS, "graphs"),
]


def _is_list_of(*kinds: type) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(isinstance(x, kinds) for x in v)


# What an imported attribute's value must be, by the type its op's schema gives it
# (ir/onnx_ops.py): a file that puts a list where an int belongs is refused here, not by the
# emitter or a kernel that trusts the schema.
_ATTR_KINDS: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: isinstance(v, int),
    "float": lambda v: isinstance(v, (int, float)),
    "str": lambda v: isinstance(v, str),
    "ints": _is_list_of(int),
    "floats": _is_list_of(int, float),
    "strs": _is_list_of(str),
    "tensor": lambda v: isinstance(v, np.ndarray),
    "sparse_tensor": lambda v: isinstance(v, np.ndarray),
    "tensors": _is_list_of(np.ndarray),
    "graph": lambda v: isinstance(v, Block),
    "graphs": _is_list_of(Block),
}


def _check_attributes(domain: str, op_type: str, attrs: dict, where: str) -> None:
    schema = lookup(domain, op_type)
    if schema is None:
        return  # an op offload does not know: running it is what fails
    for name, value in attrs.items():
        spec = schema.attributes.get(name)
        fits = _ATTR_KINDS.get(spec.type) if spec is not None else None
        if fits is not None and not fits(value):
            shown = type(value).__name__ if isinstance(value, (Block, np.ndarray)) else repr(value)[:80]
            raise ModelFormatError(
                f"{where}: attribute '{name}' of {op_type} must be of type {spec.type}, not {shown}"
            )


def _attribute_proto(name: str, value, type_: int) -> pb.AttributeProto:
    a = pb.AttributeProto(name=name, type=type_)
    if isinstance(value, (bool, int)):
        a.type, a.i = _A.INT, int(value)
    elif isinstance(value, float):
        a.type, a.f = _A.FLOAT, value
    elif isinstance(value, str):
        a.type, a.s = _A.STRING, value.encode()
    elif isinstance(value, list) and all(isinstance(x, int) for x in value):
        a.type = _A.INTS
        a.ints.extend(value)
    elif isinstance(value, list) and all(isinstance(x, (int, float)) for x in value):
        a.type = _A.FLOATS
        a.floats.extend(value)
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        a.type = _A.STRINGS
        a.strings.extend(x.encode() for x in value)
    elif isinstance(value, np.ndarray):
        a.type = _A.TENSOR
        a.t.CopyFrom(numpy_to_tensor(value))
    else:
        raise ModelFormatError(
            f"function attribute '{name}' has a value offload cannot pass on: {type(value)}"
        )
    return a


def _text(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b.decode("latin-1")


def _dtype(code: int, where: str) -> DataType:
    try:
        return DataType(code)
    except ValueError:
        raise ModelFormatError(f"{where}: unknown element type {code}") from None


def _checked_shape(dims, where: str) -> tuple[int, ...]:
    if len(dims) > MAX_RANK:
        raise ModelFormatError(f"{where}: rank {len(dims)} exceeds {MAX_RANK}")
    shape = tuple(int(d) for d in dims)
    if any(d < 0 for d in shape):
        raise ModelFormatError(f"{where}: negative dimension in {shape}")
    if math.prod(shape) > MAX_ELEMENTS:
        raise ModelFormatError(f"{where}: {math.prod(shape)} elements exceed the limit of {MAX_ELEMENTS}")
    return shape


# Element types whose values ONNX stores bit-packed, and their bits per element.
_PACKED_BITS = {
    DataType.INT4: 4,
    DataType.UINT4: 4,
    DataType.FLOAT4E2M1: 4,
    DataType.INT2: 2,
    DataType.UINT2: 2,
}


# Narrow float types whose int32_data holds bit patterns, not values.
_BIT_STORED = {
    DataType.FLOAT16,
    DataType.BFLOAT16,
    DataType.FLOAT8E4M3FN,
    DataType.FLOAT8E4M3FNUZ,
    DataType.FLOAT8E5M2,
    DataType.FLOAT8E5M2FNUZ,
    DataType.FLOAT8E8M0,
    DataType.FLOAT6E2M3,
    DataType.FLOAT6E3M2,
}


def _unpack(raw: np.ndarray, dtype: DataType, n: int) -> np.ndarray:
    """Bit-packed storage (low bits first) → one element per byte of the matching ml_dtype."""
    bits = _PACKED_BITS[dtype]
    per = 8 // bits
    b = raw.view(np.uint8)
    parts = [(b >> (bits * k)) & ((1 << bits) - 1) for k in range(per)]
    codes = np.stack(parts, axis=-1).reshape(-1)[:n]
    if dtype in (DataType.INT4, DataType.INT2):
        codes = codes.astype(np.int8)
        codes = np.where(codes >= (1 << (bits - 1)), codes - (1 << bits), codes).astype(np.int8)
        return codes.astype(dtype.numpy)
    return (
        codes.astype(np.uint8).view(dtype.numpy)
        if dtype == DataType.FLOAT4E2M1
        else codes.astype(dtype.numpy)
    )


def _pack(a: np.ndarray, dtype: DataType) -> bytes:
    bits = _PACKED_BITS[dtype]
    per = 8 // bits
    if dtype == DataType.FLOAT4E2M1:
        codes = a.view(np.uint8).reshape(-1)
    else:
        codes = a.astype(np.int8).view(np.uint8).reshape(-1) & ((1 << bits) - 1)
    pad = (-codes.size) % per
    codes = np.concatenate([codes, np.zeros(pad, np.uint8)]).reshape(-1, per)
    out = np.zeros(codes.shape[0], np.uint8)
    for k in range(per):
        out |= (codes[:, k] & ((1 << bits) - 1)) << (bits * k)
    return out.tobytes()


def tensor_to_numpy(t: pb.TensorProto, base_dir: str | None, where: str) -> np.ndarray:
    """A TensorProto's values as a numpy array, every size and offset checked first."""
    dtype = _dtype(t.data_type, where)
    shape = _checked_shape(t.dims, where)
    n = math.prod(shape)
    if t.segment.end or t.segment.begin:
        raise ModelFormatError(f"{where}: segmented tensors are not supported")
    if dtype == DataType.STRING:
        if len(t.string_data) != n:
            raise ModelFormatError(f"{where}: {len(t.string_data)} strings for shape {shape}")
        return np.array([_text(s) for s in t.string_data], dtype=object).reshape(shape)
    npdt = dtype.numpy
    if t.data_location == pb.TensorProto.EXTERNAL:
        raw = _external(t, base_dir, where)
    elif t.HasField("raw_data"):
        raw = t.raw_data
    else:
        raw = None
    if dtype in _PACKED_BITS:
        per = 8 // _PACKED_BITS[dtype]
        if raw is not None:
            if len(raw) != -(-n // per):
                raise ModelFormatError(
                    f"{where}: {len(raw)} bytes do not hold {n} packed {dtype.name} values"
                )
            return _unpack(np.frombuffer(raw, np.uint8), dtype, n).reshape(shape)
        packed = np.asarray(t.int32_data, dtype=np.int64).astype(np.uint8)
        if packed.size != -(-n // per):
            raise ModelFormatError(
                f"{where}: {packed.size} values do not hold {n} packed {dtype.name} values"
            )
        return _unpack(packed, dtype, n).reshape(shape)
    if raw is not None:
        if len(raw) != n * npdt.itemsize:
            raise ModelFormatError(
                f"{where}: raw data has {len(raw)} bytes, but shape {shape} of {dtype.name} needs {n * npdt.itemsize}"
            )
        return np.frombuffer(raw, dtype=npdt.newbyteorder("<")).astype(npdt, copy=False).reshape(shape).copy()
    if dtype in (DataType.FLOAT, DataType.COMPLEX64):
        src = np.asarray(t.float_data, np.float32)
    elif dtype in (DataType.DOUBLE, DataType.COMPLEX128):
        src = np.asarray(t.double_data, np.float64)
    elif dtype == DataType.INT64:
        src = np.asarray(t.int64_data, np.int64)
    elif dtype in (DataType.UINT32, DataType.UINT64):
        src = np.asarray(t.uint64_data, np.uint64)
    else:
        src = np.asarray(t.int32_data, np.int64)
    if dtype in (DataType.COMPLEX64, DataType.COMPLEX128):
        if src.size != 2 * n:
            raise ModelFormatError(f"{where}: {src.size} values for {n} complex elements")
        return src.view(npdt).reshape(shape)
    if src.size != n:
        raise ModelFormatError(f"{where}: {src.size} values for shape {shape}")
    if dtype in _BIT_STORED:
        bits = src.astype(np.uint16 if npdt.itemsize == 2 else np.uint8)
        return bits.view(npdt).reshape(shape)
    return src.astype(npdt).reshape(shape)


def _external(t: pb.TensorProto, base_dir: str | None, where: str) -> bytes:
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location")
    if not location:
        raise ModelFormatError(f"{where}: external data without a location")
    if base_dir is None:
        raise ModelFormatError(f"{where}: external data '{location}' needs the model loaded from a path")
    base = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(base, location))
    if os.path.commonpath([base, path]) != base:
        raise ModelFormatError(
            f"{where}: external data '{location}' points outside the model's folder {base}"
        )
    if not os.path.isfile(path):
        raise ModelFormatError(f"{where}: external data file '{location}' not found in {base}")
    size = os.path.getsize(path)
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else size - offset
    except ValueError:
        raise ModelFormatError(f"{where}: external data offset/length are not integers") from None
    if offset < 0 or length < 0 or offset + length > size:
        raise ModelFormatError(
            f"{where}: external data range [{offset}, {offset + length}) is outside '{location}' ({size} bytes)"
        )
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def numpy_to_tensor(a: np.ndarray, name: str = "") -> pb.TensorProto:
    """The inverse of tensor_to_numpy, for tests and for writing ONNX back."""
    dtype = DataType.from_numpy(a.dtype)
    t = pb.TensorProto(name=name, data_type=int(dtype), dims=list(a.shape))
    if dtype == DataType.STRING:
        t.string_data.extend(str(x).encode() for x in a.reshape(-1))
    elif dtype in _PACKED_BITS:
        t.raw_data = _pack(a, dtype)
    else:
        t.raw_data = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
    return t


def _constant_value(attrs: dict, where: str, imp: _Importer) -> np.ndarray:
    if "value" in attrs or "sparse_value" in attrs:
        return np.asarray(attrs.get("value", attrs.get("sparse_value")))
    table = {
        "value_float": np.float32,
        "value_floats": np.float32,
        "value_int": np.int64,
        "value_ints": np.int64,
        "value_string": object,
        "value_strings": object,
    }
    for key, dt in table.items():
        if key in attrs:
            return np.array(attrs[key], dtype=dt)
    raise imp.fail(f"{where}: Constant has no value attribute")


def parse_model(data: bytes, origin: str) -> pb.ModelProto:
    model = pb.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelFormatError(f"{origin}: not a valid ONNX protobuf ({e})") from None
    if not model.HasField("graph"):
        raise ModelFormatError(f"{origin}: ONNX model has no graph")
    _check_text(model, origin, "model")
    return model


def _check_text(msg: Message, origin: str, path: str) -> None:
    """Every string field (names, op types, attribute names) is UTF-8 text: protobuf hands an
    ill-formed one over as bytes, which would reach the IR as a name."""
    for field, value in msg.ListFields():
        if field.type not in (field.TYPE_STRING, field.TYPE_MESSAGE):
            continue
        single = isinstance(value, (str, bytes, Message))
        for i, v in enumerate([value] if single else value):
            where = f"{path}.{field.name}" + ("" if single else f"[{i}]")
            if field.type == field.TYPE_STRING and isinstance(v, bytes):
                raise ModelFormatError(f"{origin}: {where} {v[:40]!r} is not UTF-8 text")
            if field.type == field.TYPE_MESSAGE:
                _check_text(v, origin, where)


def import_onnx(data: bytes, origin: str = "<bytes>", base_dir: str | None = None) -> Program:
    """Import ONNX ModelProto bytes; ``base_dir`` is where external data files are looked up."""
    model = parse_model(data, origin)
    importer = _Importer(model, origin, base_dir)
    try:
        program = importer.program()
    except RecursionError:
        raise ModelFormatError(f"{origin}: graph nesting too deep") from None
    if importer.shadowed:
        names = ", ".join(f"'{n}'" for n in importer.shadowed[:3])
        warnings.warn(
            f"{origin}: {len(importer.shadowed)} subgraph name(s) shadow a name of an enclosing graph "
            f"({names}{', …' if len(importer.shadowed) > 3 else ''}); the inner values are renamed "
            "(ONNX scoping, as onnxruntime reads it)",
            ModelFixWarning,
            stacklevel=2,
        )
    return typed_and_verified(
        program,
        origin,
        None,
        fix=lambda program, origin: _trust_inference(program, origin, importer.declared),
    )


MAX_SHAPE_ROUNDS = 8


def _trust_inference(program: Program, origin: str, declared: list[Value]) -> None:
    """A declared shape (value_info, a graph output) is a hint: where it disagrees with what shape
    inference gives, onnxruntime warns and uses the inferred shape, and so does this (warned
    once per model). Each round clears the disagreeing declarations and infers again, as a wrong
    declared shape may have shaped the values after it. A dtype disagreement stays an error.
    Only the ops that produce a ``declared`` value are checked: no other type was declared."""
    producers = list({id(v.producer): v.producer for v in declared if v.producer is not None}.values())
    fixed: list[str] = []
    for _ in range(MAX_SHAPE_ROUNDS):
        found = [
            (out, inferred)
            for op in producers
            for out, inferred, _ in shape_conflicts(op)
            if isinstance(out.type, TensorType) and out.type.dtype == inferred.dtype
        ]
        if not found:
            break
        for out, inferred in found:
            fixed.append(f"'{out.name}' declared {out.type}, inferred {inferred}")
            out.type = None
        infer_types(program)
    if fixed:
        warnings.warn(
            f"{origin}: {len(fixed)} declared shape(s) disagree with shape inference ({fixed[0]}"
            f"{'; …' if len(fixed) > 1 else ''}); the inferred shapes are used, as onnxruntime does",
            ModelFixWarning,
            stacklevel=3,
        )
    _unconfirmed_outputs(program, origin, declared)


def _unconfirmed_outputs(program: Program, origin: str, declared: list[Value]) -> None:
    """A graph output declared with a static shape that inference cannot confirm, because its
    op's result has no known rank (a Squeeze without axes of a (batch, 1) value: a scalar at batch
    1 only), keeps its dtype and drops the shape: onnxruntime returns what a run computes whatever
    the declaration, and a planned run would otherwise hold the result to the declared shape."""
    outputs = {id(v) for v in program.main.body.outputs}
    dropped = []
    for v in declared:
        if id(v) not in outputs or v.producer is None or not isinstance(v.type, TensorType):
            continue
        if v.type.shape is None or not all(isinstance(d, int) for d in v.type.shape):
            continue  # symbolic dims are planned from each run's shapes
        for out, inferred in zip(v.producer.outputs, infer_op(v.producer)):
            if out is v and isinstance(inferred, TensorType) and inferred.shape is None:
                dropped.append(f"'{v.name}' declared {v.type}")
                v.type = dataclasses.replace(v.type, shape=None)
    if dropped:
        warnings.warn(
            f"{origin}: {len(dropped)} declared output shape(s) that shape inference cannot confirm "
            f"({dropped[0]}{'; …' if len(dropped) > 1 else ''}); the outputs take the shapes a run "
            "gives them, as in onnxruntime",
            ModelFixWarning,
            stacklevel=4,
        )
