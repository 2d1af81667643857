"""TFLite import: a .tflite flatbuffer → ir.Program whose ops carry ONNX semantics.

The main subgraph becomes the function ``forward``; its inputs and outputs are named by their
tensors. A tensor with a ``shape_signature`` of -1 gets a symbolic dimension; a tensor with
data in its buffer (inside the flatbuffer, or after it through ``offset``/``size``) becomes a
block constant read in place from the file's bytes.

Each builtin operator is translated by one rule of ``RULES`` (``@rule("CONV_2D")``). Layouts are
made explicit: TFLite's activations are NHWC and its filters OHWI, ONNX's Conv and pools are
NCHW/OIHW, so a layout-sensitive op is wrapped in Transposes (NHWC → NCHW before, back after)
that the transpose-cancelling passes remove between neighbours; constant filters are permuted
once here. A fused activation becomes its own op after the one that carried it. SAME padding
is written as explicit pads computed the way TFLite does: the output is ceil(in / stride), the
total padding max((out - 1)·stride + (k - 1)·dilation + 1 - in, 0), its smaller half before and
the extra element after. Any operator without a rule is an ``UnsupportedOpError`` naming it and
its index; docs/tflite.md lists the rules. Subgraph calls (WHILE, IF: ``tflite_control``), the LSTM
(``tflite_lstm``), sparse constants and DENSIFY (``tflite_sparse``), slices with computed bounds
(``tflite_slices``) and custom operators (``tflite_custom``) have modules of their own that add
their rules to ``RULES``. ``Node``, ``rule``, ``RULES`` and the helpers rules share are in
``tflite_node``; the builtin operators' rules in ``tflite_ops``, ``tflite_tensor_ops``,
``tflite_array_ops`` (element moves, scatters, segments), ``tflite_math_ops`` and
``tflite_nn_ops`` (L2 pooling, LRN, 3-D convolutions, non-max suppression); the RNN cells
in ``tflite_rnn``; RFFT2D and every operator on complex tensors in ``tflite_fft``; the StableHLO
operators that call subgraphs (COMPOSITE, CASE) or move elements (GATHER, SCATTER, REDUCE_WINDOW,
and the builtin REDUCE_WINDOW) in ``tflite_stablehlo``, its random bit generator in
``tflite_stablehlo_rng``.
"""

from __future__ import annotations

import numpy as np

from offload.errors import ModelFormatError, UnsupportedOpError
from offload.ir import (
    Block,
    DataType,
    Function,
    Namer,
    Operation,
    Program,
    QuantParams,
    TensorType,
    Value,
)
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator
from offload.schemas.generated.tflite.TensorType import TensorType as TflType

from . import (  # noqa: F401  (the rule modules register their rules in RULES)
    tflite_array_ops,
    tflite_control,
    tflite_detection,
    tflite_fft,
    tflite_int8,
    tflite_litert_custom,
    tflite_lstm,
    tflite_math_ops,
    tflite_nn_ops,
    tflite_ops,
    tflite_rnn,
    tflite_slices,
    tflite_sparse,
    tflite_stablehlo,
    tflite_stablehlo_rng,
    tflite_tensor_ops,
)
from .finish import typed_and_verified
from .tflite_custom import register_custom_op  # noqa: F401  (public: offload.frontends.tflite.register_custom_op)
from .tflite_fft import complex_rule, refuse_complex_tensor
from .tflite_node import _TYPE_NAMES, ARITY, DTYPES, RULES, Node
from .tflite_quant import (
    ACTIVATION_DTYPES,
    HYBRID_OPS,
    QUANTIZED_DTYPES,
    dequantize_array,
    hybrid_input,
    quant_inputs,
)
from .tflite_reader import Buffer, Table
from .tflite_sparse import sparse_constant

MAX_RANK = 64
MAX_CALL_DEPTH = 16  # subgraphs calling subgraphs (WHILE, IF): deeper is refused
MAX_TRANSLATIONS_PER_SUBGRAPH = 8  # subgraph translations in all, per subgraph and call site
# operators that call subgraphs: each may translate one more subgraph (a composite used in every
# layer of a model calls its decomposition as many times)
CALLING_OPS = ("WHILE", "IF", "CALL_ONCE", "STABLEHLO_WHILE", "STABLEHLO_COMPOSITE", "STABLEHLO_CASE")
# operators whose rule takes their inputs and gives their outputs as stored, quantized or not:
# the quantization ops, and those that pass values to subgraphs which read them as stored
AS_STORED = ("QUANTIZE", "DEQUANTIZE", "STABLEHLO_COMPOSITE", "STABLEHLO_CASE")

_OPERATOR_NAMES = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
# Below this code, old files store the operator in deprecated_builtin_code only.
_PLACEHOLDER_FOR_GREATER_OP_CODES = BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES


# ---------------------------------------------------------------------------------------------
# The importer.


class _Importer:
    def __init__(self, data: bytes, origin: str):
        self.origin = origin
        self.buf = Buffer(data, origin)
        self.model = self.buf.root()
        self.block = Block(name="main")
        self.namer = Namer()
        self.real: dict[str, Value] = {}  # a quantized value's name → its dequantized value
        self._call_sites: int | None = None

    def fail(self, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.origin}: malformed tflite model: {what}")

    def const(self, array: np.ndarray) -> Value:
        return self.block.add_constant(self.namer.fresh("const"), array)

    def op(self, op_type: str, inputs, attrs=None, num_outputs: int = 1, domain: str = "") -> list[Value]:
        names = [self.namer.fresh(op_type) for _ in range(num_outputs)]
        op = Operation(op_type, list(inputs), attrs, domain=domain, output_names=names)
        return self.block.append(op).outputs

    # ---- quantized tensors ------------------------------------------------------------------

    def dequantized(self, v: Value) -> Value:
        """``v``'s real values: itself unless it is an integer tensor with a scale (tflite_quant)."""
        t = v.type
        if not isinstance(t, TensorType) or t.quant is None or t.dtype not in QUANTIZED_DTYPES:
            return v
        if v.name not in self.real:
            if v.const_value is not None:
                self.real[v.name] = self.const(dequantize_array(v.const_value, t.quant))
            elif t.dtype in ACTIVATION_DTYPES:
                params, attrs = quant_inputs(self, t.quant, t.dtype)
                self.real[v.name] = self.op("DequantizeLinear", [v, *params], attrs)[0]
            else:
                return v
        return self.real[v.name]

    def quantized(self, y: Value, t: Table, path: str) -> Value:
        """``y`` (real values) stored as tensor ``t`` says: QuantizeLinear when it has a scale."""
        ttype = self.tensor_type(t, path)
        if ttype.quant is None or ttype.dtype not in ACTIVATION_DTYPES:
            return y
        params, attrs = quant_inputs(self, ttype.quant, ttype.dtype)
        q = self.op("QuantizeLinear", [y, *params], attrs)[0]
        q.type = TensorType(ttype.dtype, None, ttype.quant)  # the shape is inferred later
        return q

    def quantization_around(self, node: Node) -> None:
        """Real-valued inputs for ``node``'s float rule (tflite_quant cases 1 to 3)."""
        x = node.inputs[0]
        w = node.inputs[1] if len(node.inputs) > 1 else None
        hybrid = (  # types as the file gives them: op outputs are not typed until the end
            node.name in HYBRID_OPS
            and x is not None
            and node.tensors[0].get("type") == TflType.FLOAT32
            and w is not None
            and w.const_value is not None
            and w.type.quant is not None
            and w.type.dtype == DataType.INT8
        )
        node.inputs = [None if v is None else self.dequantized(v) for v in node.inputs]
        if hybrid:
            if node.name == "FULLY_CONNECTED":
                asymmetric, axes = bool(node.opt("asymmetric_quantize_inputs")), [-1]
            else:  # per-channel filters take the asymmetric path, per-tensor ones the symmetric
                asymmetric = node.name == "DEPTHWISE_CONV_2D" or w.type.quant.scale.size > 1
                axes = [1, 2, 3]
            node.inputs[0] = hybrid_input(node, x, axes, asymmetric)

    # ---- tensors --------------------------------------------------------------------------

    def operator_codes(self) -> list[tuple[str, int]]:
        out = []
        for code in self.model.items("operator_codes"):
            builtin = max(code.get("builtin_code"), code.get("deprecated_builtin_code"))
            name = _OPERATOR_NAMES.get(builtin, f"builtin operator code {builtin}")
            if builtin == BuiltinOperator.CUSTOM:
                name = f"CUSTOM '{code.get('custom_code') or ''}'"
            out.append((name, code.get("version")))
        return out

    def tensor_type(self, t: Table, path: str) -> TensorType:
        code = t.get("type")
        dtype = DTYPES.get(code)
        if dtype is None:
            raise UnsupportedOpError(
                f"{self.origin}: {path}: tensor type {_TYPE_NAMES.get(code, code)} is not supported"
            )
        shape, signature = t.get("shape"), t.get("shape_signature")
        shape = () if shape is None else shape
        if len(shape) > MAX_RANK:
            raise self.fail(f"{path}: rank {len(shape)} exceeds {MAX_RANK}")
        if signature is not None and len(signature) == len(shape):
            shape = signature
        dims = []
        for i, d in enumerate(shape):
            if d == -1:
                dims.append(f"{t.get('name') or path}:{i}")
            elif d < 0:
                raise self.fail(f"{path}: negative dimension {d}")
            else:
                dims.append(int(d))
        return TensorType(dtype, tuple(dims), self.quantization(t, dtype, path))

    def quantization(self, t: Table, dtype: DataType, path: str) -> QuantParams | None:
        q = t.get("quantization")
        if q is None or dtype in (DataType.FLOAT, DataType.FLOAT16, DataType.DOUBLE):
            return None
        scale, zero = q.get("scale"), q.get("zero_point")
        if scale is None or len(scale) == 0:
            return None
        zero = np.zeros(len(scale), np.int64) if zero is None or len(zero) == 0 else zero
        if len(zero) != len(scale):
            raise self.fail(f"{path}.quantization: {len(scale)} scales but {len(zero)} zero points")
        axis = int(q.get("quantized_dimension")) if len(scale) > 1 else None
        return QuantParams(np.array(scale, np.float32), np.array(zero, np.int64), axis)

    def buffer_data(self, index: int, path: str) -> memoryview | None:
        """The bytes of buffer ``index``, read in place; None for an empty buffer."""
        buffers = self.model.get("buffers")
        count = 0 if buffers is None else len(buffers)
        if index == 0:
            return None  # the empty sentinel
        if index >= count:
            raise self.fail(f"{path}.buffer: index {index} is outside the model's {count} buffers")
        b = buffers[index]
        offset, size = b.get("offset"), b.get("size")
        if offset > 1:  # stored after the flatbuffer, at an offset from the start of the file
            if offset + size > self.buf.size:
                raise self.fail(
                    f"buffers[{index}]: {size} bytes at offset {offset} run past the end of the file "
                    f"({self.buf.size} bytes)"
                )
            return self.buf.view[offset : offset + size] if size else None
        data = b.get("data")
        return data.data if data is not None and len(data) else None

    def empty_constant(self, t: Table, index: int, path: str) -> Value:
        """A tensor of no elements that no buffer and no operator fills (converters write an empty
        RESHAPE shape so): the empty constant LiteRT reads there."""
        ttype = self.tensor_type(t, path)
        shape = tuple(int(d) for d in t.items("shape"))
        name = self.namer.fresh(t.get("name") or f"tensor_{index}")
        v = Value(name, TensorType(ttype.dtype, shape, ttype.quant), np.zeros(shape, ttype.dtype.numpy))
        self.block.constants[name] = v
        return v

    def tensor_value(self, t: Table, index: int, path: str) -> Value:
        ttype = self.tensor_type(t, path)
        name = self.namer.fresh(t.get("name") or f"tensor_{index}")
        data = self.buffer_data(t.get("buffer"), path)
        if data is None:
            return Value(name, ttype)
        if not ttype.is_static:
            raise self.fail(f"{path}: a constant with an unknown dimension {ttype.shape}")
        if t.get("sparsity") is not None:  # the nonzeros and their index tree (tflite_sparse)
            array = sparse_constant(self, t, data, ttype, path)
            v = Value(name, TensorType(ttype.dtype, ttype.shape, ttype.quant), array)
            self.block.constants[name] = v
            return v
        dtype = ttype.dtype.numpy.newbyteorder("<")
        count = int(np.prod(ttype.shape, dtype=np.int64))
        if count * dtype.itemsize != len(data):
            raise self.fail(
                f"{path}: shape {list(ttype.shape)} of {ttype.dtype.name} needs "
                f"{count * dtype.itemsize} bytes, its buffer has {len(data)}"
            )
        array = np.frombuffer(data, dtype, count).reshape(ttype.shape)
        v = Value(name, TensorType(ttype.dtype, ttype.shape, ttype.quant), array)
        self.block.constants[name] = v
        return v

    # ---- the main subgraph -------------------------------------------------------------------

    def program(self) -> Program:
        subgraphs = self.model.get("subgraphs")
        if subgraphs is None or len(subgraphs) == 0:
            raise self.fail("the model has no subgraphs")
        codes = self.operator_codes()
        signatures = self.model.get("signature_defs")
        functions: dict[str, Function] = {}
        if signatures is not None and len(signatures) > 1:
            # Several signatures: one method each, named by its key, its inputs and outputs by
            # the signature's names (as LiteRT's signature runners take them).
            for k, sig in enumerate(signatures):
                where = f"signature_defs[{k}]"
                key = sig.get("signature_key") or f"signature_{k}"
                index = sig.get("subgraph_index")
                if index >= len(subgraphs):
                    raise self.fail(
                        f"{where}.subgraph_index: {index} is outside the model's {len(subgraphs)} subgraphs"
                    )
                if key in functions:
                    raise self.fail(f"{where}: signature key '{key}' appears twice")
                names = tuple(
                    {int(m.get("tensor_index")): m.get("name") for m in sig.items(field)}
                    for field in ("inputs", "outputs")
                )
                functions[key] = self.function(subgraphs[index], index, key, codes, names)
        else:
            functions["forward"] = self.function(subgraphs[0], 0, "forward", codes, None)
        meta = {"format": "tflite", "schema_version": str(self.model.get("version"))}
        description = self.model.get("description")
        if description:
            meta["description"] = description
        return Program(functions, meta, source=self.origin)

    def function(self, graph: Table, sg: int, fn_name: str, codes, names) -> Function:
        """Subgraph ``sg`` as function ``fn_name``; ``names`` ({tensor index: name} for inputs,
        for outputs) renames its interface, as a signature does."""
        self.block = Block(name=fn_name)
        self.namer = Namer()
        self.real = {}
        self.codes = codes
        self.calling = []
        self.translated = 0
        tensors = graph.get("tensors")
        count = 0 if tensors is None else len(tensors)
        prefix = f"subgraphs[{sg}]"
        in_names, out_names = names if names is not None else ({}, {})
        if names is not None:
            listed = [int(i) for i in graph.items("inputs")], [int(i) for i in graph.items("outputs")]
            for field, mapping, want in (("inputs", in_names, listed[0]), ("outputs", out_names, listed[1])):
                if sorted(mapping) != sorted(want):
                    raise self.fail(f"signature '{fn_name}': its {field} are not the {field} of {prefix}")
            for name in [*in_names.values(), *out_names.values()]:
                self.namer.reserve(name)
        # the file's names of its outputs are theirs even where an op the importer adds (an
        # Identity, a Reshape) comes first and would take the name
        self.output_tensor_names = {}
        if names is None:
            for i in graph.items("outputs"):
                name = tensors[i].get("name") if 0 <= i < count else None
                if name and name not in self.namer.taken:
                    self.namer.reserve(name)
                    self.output_tensor_names[int(i)] = name
        variables = self.variables = _Variables(self, codes)
        for k, i in enumerate(graph.items("inputs")):
            if not 0 <= i < count:
                raise self.fail(
                    f"{prefix}.inputs[{k}]: tensor index {i} is outside the subgraph's {count} tensors"
                )
            path = f"{prefix}.tensors[{i}]"
            refuse_complex_tensor(self.origin, tensors[i], path, "input")
            name = in_names.get(int(i)) or self.namer.fresh(tensors[i].get("name") or f"input_{k}")
            self.block.inputs.append(Value(name, self.tensor_type(tensors[i], path)))
        results = self.subgraph(sg, list(self.block.inputs), variables, out_names)
        for i, v in results:
            refuse_complex_tensor(self.origin, tensors[i], f"{prefix}.tensors[{i}]", "output")
            if v.producer is None or v in self.block.outputs or i in out_names:
                v = self.op("Identity", [v])[0]  # an input, a constant, listed twice, or renamed
                if i in out_names:
                    v.name = out_names[i]
            self.block.outputs.append(v)
        return Function(fn_name, self.block, {"": 21}, variables.finish())

    def subgraph(self, sg: int, inputs: list, variables=None, out_names=None) -> list[tuple[int, Value]]:
        """Translate subgraph ``sg`` into the current block, its inputs bound to ``inputs``: its
        outputs as (tensor index, value). A subgraph another calls (WHILE, IF) has no
        ``variables``; the chain of calls is followed with a bound and checked for cycles."""
        subgraphs = self.model.get("subgraphs")
        if not 0 <= sg < len(subgraphs):
            raise self.fail(f"subgraph {sg} is outside the model's {len(subgraphs)} subgraphs")
        if sg in self.calling:
            chain = " → ".join(str(k) for k in [*self.calling, sg])
            raise self.fail(f"subgraphs call each other in a cycle ({chain})")
        if len(self.calling) >= MAX_CALL_DEPTH:
            raise self.fail(f"subgraph calls nest deeper than {MAX_CALL_DEPTH}")
        # a subgraph is translated once per call site (WHILE's condition twice): a file whose IFs
        # call the next subgraph from both branches would double the work at every level
        self.translated += 1
        if self.translated > MAX_TRANSLATIONS_PER_SUBGRAPH * (len(subgraphs) + self.call_sites()):
            raise self.fail(
                f"subgraphs are called more than {MAX_TRANSLATIONS_PER_SUBGRAPH}× their number "
                "(and that of the operators calling them) in all"
            )
        # a called subgraph's values are named within it, so that they never take a name the
        # caller's own tensors (translated after them) carry
        graph = subgraphs[sg]
        scope = f"{graph.get('name') or f'subgraph_{sg}'}/" if self.calling else ""
        self.calling.append(sg)
        try:
            return self._operators(graph, sg, inputs, variables, out_names or {}, scope)
        finally:
            self.calling.pop()

    def call_sites(self) -> int:
        """How many operators of the file call a subgraph (counted once)."""
        if self._call_sites is None:
            calling = {k for k, (name, _) in enumerate(self.codes) if name in CALLING_OPS}
            self._call_sites = sum(
                op.get("opcode_index") in calling
                for graph in self.model.get("subgraphs")
                for op in graph.items("operators")
            )
        return self._call_sites

    def _operators(self, graph: Table, sg: int, inputs: list, variables, out_names: dict, scope: str):
        codes = self.codes
        tensors = graph.get("tensors")
        count = 0 if tensors is None else len(tensors)
        prefix = f"subgraphs[{sg}]"

        def index(i: int, path: str) -> int:
            if not 0 <= i < count:
                raise self.fail(f"{path}: tensor index {i} is outside the subgraph's {count} tensors")
            return int(i)

        values: dict[int, Value] = {}
        listed = graph.items("inputs")
        if len(listed) != len(inputs):
            raise self.fail(f"{prefix}: takes {len(listed)} inputs, {len(inputs)} given")
        for k, (i, v) in enumerate(zip(listed, inputs)):
            values[index(i, f"{prefix}.inputs[{k}]")] = v

        def value(i: int) -> Value:
            if i not in values:
                path = f"{prefix}.tensors[{i}]"
                t = tensors[i]
                if t.get("buffer") == 0 or self.buffer_data(t.get("buffer"), path) is None:
                    if t.get("is_variable") and variables is not None:  # an LSTM's state
                        values[i] = variables.tensor(i, t, path)
                        return values[i]
                    if 0 in t.items("shape"):  # nothing to write: LiteRT reads an empty constant
                        values[i] = self.empty_constant(t, i, path)
                        return values[i]
                    raise self.fail(f"{path} ('{t.get('name')}') is read before any operator writes it")
                values[i] = self.tensor_value(t, i, path)
            return values[i]

        for n, op in enumerate(graph.items("operators")):
            path = f"{prefix}.operators[{n}]"
            code = op.get("opcode_index")
            if code >= len(codes):
                raise self.fail(
                    f"{path}.opcode_index: {code} is outside the model's {len(codes)} operator codes"
                )
            name, version = codes[code]
            ins = [index(i, f"{path}.inputs") if i != -1 else -1 for i in op.items("inputs")]
            outs = [index(i, f"{path}.outputs") for i in op.items("outputs")]
            _, options = op.get("builtin_options")
            if name in VARIABLE_OPS:
                if variables is None:
                    raise UnsupportedOpError(
                        f"{self.origin}: {path}: {name} in a subgraph that WHILE or IF calls is not supported"
                    )
                variables.operator(name, path, ins, outs, options, values, value, tensors)
                continue
            fn = RULES.get(name)
            if fn is None:
                hint = (
                    "register a rule for it with offload.frontends.tflite.register_custom_op"
                    if name.startswith("CUSTOM ")
                    else "docs/tflite.md lists the operators offload imports"
                )
                raise UnsupportedOpError(
                    f"{self.origin}: operator {n} ({name}, version {version}) is not supported; {hint}"
                )
            node = Node(
                self,
                n,
                name,
                version,
                [None if i == -1 else value(i) for i in ins],
                [None if i == -1 else tensors[i] for i in ins],
                [tensors[i] for i in outs],
                options,
                op,
            )
            present = sum(1 for v in node.inputs[: ARITY[name]] if v is not None)
            if present < ARITY[name]:
                raise node.fail(f"needs {ARITY[name]} inputs, has {present}")
            if not outs:
                raise node.fail("has no outputs")
            fn = complex_rule(node) or fn  # complex tensors are float pairs (tflite_fft)
            results = tflite_int8.translate(node)  # full-integer int8: LiteRT's integer arithmetic
            exact = results is not None
            if not exact and name not in AS_STORED:
                self.quantization_around(node)
            results = fn(node) if not exact else results
            if len(results) != len(outs):
                raise node.fail(f"has {len(outs)} outputs, its translation {len(results)}")
            if not exact and name not in AS_STORED:
                results = [
                    self.quantized(v, t, f"{path}.outputs[{k}]")
                    for k, (v, t) in enumerate(zip(results, node.outputs))
                ]
            for i, v in zip(outs, results):
                if i in values:
                    raise node.fail(f"tensor {i} is written twice")
                tname = tensors[i].get("name")
                tname = f"{scope}{tname}" if tname else tname
                if not scope and i in self.output_tensor_names:
                    v.name = self.output_tensor_names.pop(i)
                elif tname and tname not in self.namer.taken and i not in out_names:
                    self.namer.taken.add(tname)
                    v.name = tname
                values[i] = v

        return [(i, value(index(i, f"{prefix}.outputs[{k}]"))) for k, i in enumerate(graph.items("outputs"))]


VARIABLE_OPS = ("CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE")


class _Variables:
    """Resource variables of one function, as state (``ir.Function.states``).

    Each variable (VAR_HANDLE's ``shared_name``) is a state input whose value after the call is an
    output. Its initial value is what the CALL_ONCE subgraph assigns (constants only), applied in
    the graph itself: one more state, ``variables_initialized`` (bool, false in a fresh or reset
    module), picks ``initial`` over the state input on the first run, the way CALL_ONCE runs its
    subgraph once. A variable CALL_ONCE does not assign starts at zeros.
    """

    def __init__(self, imp: _Importer, codes):
        self.imp, self.codes = imp, codes
        self.handles: dict[int, str] = {}  # tensor index → shared name
        self.initial: dict[str, np.ndarray] = {}
        self.state: dict[str, list] = {}  # name → [state input, current value]
        self.flag: Value | None = None
        self.tensors: dict[int, str] = {}  # id of a variable tensor's value → its variable

    def operator(self, name, path, ins, outs, options, values, value, tensors) -> None:
        imp = self.imp
        if name == "CALL_ONCE":
            if options is None or "init_subgraph_index" not in options.fields:
                raise imp.fail(f"{path}: CALL_ONCE without CallOnceOptions")
            self.init_subgraph(int(options.get("init_subgraph_index")), path)
        elif name == "VAR_HANDLE":
            if len(outs) != 1:
                raise imp.fail(f"{path}: VAR_HANDLE has {len(outs)} outputs")
            self.handles[outs[0]] = _shared_name(options, outs[0])
        elif name == "READ_VARIABLE":
            if len(ins) != 1 or len(outs) != 1 or ins[0] not in self.handles:
                raise imp.fail(f"{path}: READ_VARIABLE reads no variable handle")
            v = self.current(self.handles[ins[0]], tensors[outs[0]], path)
            read = imp.op("Identity", [v])[0]
            declared = imp.tensor_type(tensors[outs[0]], path)
            read.type = TensorType(
                declared.dtype, None, declared.quant
            )  # the scale rules read; shape inferred
            values[outs[0]] = read
        else:  # ASSIGN_VARIABLE
            if len(ins) != 2 or ins[0] not in self.handles:
                raise imp.fail(f"{path}: ASSIGN_VARIABLE assigns no variable handle")
            var = self.handles[ins[0]]
            new = value(ins[1])
            self.current(var, tensors[ins[1]], path)
            old = self.state[var][0]
            if new.type is not None and new.type.dtype != old.type.dtype:
                raise imp.fail(
                    f"{path}: variable '{var}' of {old.type.dtype.name} assigned {new.type.dtype.name}"
                )
            self.state[var][1] = new

    def tensor(self, index: int, t: Table, path: str) -> Value:
        """A variable tensor an operator reads and updates (an LSTM's output and cell state): a
        variable of its own, zeros at first, kept between calls as LiteRT keeps it."""
        var = f"{t.get('name') or 'tensor'}:{index}"
        v = self.current(var, t, path)
        self.tensors[id(v)] = var
        return v

    def assign_tensor(self, read: Value, new: Value) -> None:
        """Set the variable tensor that ``read`` (what ``tensor`` gave) came from to ``new``."""
        var = self.tensors.get(id(read))
        if var is None:
            raise self.imp.fail(f"'{read.name}' is not a variable tensor")
        self.state[var][1] = new

    def init_subgraph(self, index: int, path: str) -> None:
        """CALL_ONCE: its subgraph translated into this function (``imp.subgraph``, which checks
        the index and the call chain) with its ASSIGN_VARIABLEs recorded as initial values. A
        computed value is computed in the graph and taken on the first run only; computed from
        constants, as initialisers are, the constant-folding pass makes it a constant."""
        init = _InitAssignments(self.imp)
        try:
            self.imp.subgraph(index, [], init)
        except UnsupportedOpError as e:
            raise UnsupportedOpError(f"{e} (in the CALL_ONCE subgraph of {path})") from None
        for var, v in init.assigned.items():
            if v.const_value is not None and v.producer is None:
                self.imp.block.constants.pop(v.name, None)  # current() adds the constant it uses
                self.initial[var] = v.const_value
            else:
                self.initial[var] = v

    def current(self, var: str, t: Table, path: str) -> Value:
        """The variable's value so far; its state input (and initial value) made on first use."""
        imp = self.imp
        if var not in self.state:
            initial = self.initial.get(var)
            if initial is None or isinstance(initial, Value):  # zeros, or computed by CALL_ONCE
                ttype = imp.tensor_type(t, path)
                if not ttype.is_static:
                    raise UnsupportedOpError(f"{imp.origin}: {path}: variable '{var}' of unknown shape")
                stype = TensorType(ttype.dtype, ttype.shape, ttype.quant)
                if initial is None:
                    initial = imp.const(np.zeros(ttype.shape, ttype.dtype.numpy))
            else:  # int8 states keep the scale of the tensor that reads or writes them
                stype = TensorType(
                    DataType.from_numpy(initial.dtype), initial.shape, imp.tensor_type(t, path).quant
                )
                initial = imp.const(np.ascontiguousarray(initial).reshape(initial.shape))
            if self.flag is None:
                self.flag = Value(imp.namer.fresh("variables_initialized"), TensorType(DataType.BOOL, ()))
                imp.block.inputs.append(self.flag)
            state = Value(imp.namer.fresh(var), stype)
            imp.block.inputs.append(state)
            first = imp.op("Where", [self.flag, state, initial])[0]
            self.state[var] = [state, first]
        return self.state[var][1]

    def finish(self) -> list[str]:
        """The state names; the variables' last values and a true flag appended as outputs."""
        if self.flag is None:
            return []
        imp = self.imp
        for _, current in self.state.values():
            imp.block.outputs.append(imp.op("Identity", [current])[0])
        imp.block.outputs.append(imp.op("Identity", [imp.const(np.array(True))])[0])
        return [state.name for state, _ in self.state.values()] + [self.flag.name]


class _InitAssignments:
    """The variable operators of a CALL_ONCE subgraph: VAR_HANDLE names a variable, ASSIGN_VARIABLE
    records its initial value; reading a variable there is refused."""

    def __init__(self, imp: _Importer):
        self.imp = imp
        self.handles: dict[int, str] = {}
        self.assigned: dict[str, Value] = {}

    def operator(self, name, path, ins, outs, options, values, value, tensors) -> None:
        if name == "VAR_HANDLE" and len(outs) == 1:
            self.handles[outs[0]] = _shared_name(options, outs[0])
        elif name == "ASSIGN_VARIABLE" and len(ins) == 2 and ins[0] in self.handles:
            self.assigned[self.handles[ins[0]]] = value(ins[1])
        else:
            raise UnsupportedOpError(
                f"{self.imp.origin}: {path}: {name} in a CALL_ONCE subgraph (VAR_HANDLE, "
                "ASSIGN_VARIABLE and computing operators are supported)"
            )

    def tensor(self, index: int, t: Table, path: str) -> Value:
        raise UnsupportedOpError(f"{self.imp.origin}: {path}: a variable tensor in a CALL_ONCE subgraph")


def _shared_name(options, index: int) -> str:
    name = options.get("shared_name") if options is not None and "shared_name" in options.fields else None
    return name or f"variable_{index}"


def import_tflite(data: bytes, origin: str = "<bytes>") -> Program:
    """Import the bytes of a .tflite file (its main subgraph) into an ir.Program."""
    return typed_and_verified(_Importer(data, origin).program(), origin, "operators")
