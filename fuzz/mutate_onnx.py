"""A structure-aware ONNX mutator: parse the ModelProto, change one field, serialize it again.

Byte mutations of a protobuf mostly break its framing, so the importer's first check rejects
them; mutating the parsed message instead keeps the file well-formed and reaches the importer,
shape inference, the emitter and the kernels with values they did not expect. One mutation
changes one thing, chosen from ``MUTATIONS``: a dimension, an element type, an op type, an
attribute value, an initializer's size or bytes, a graph's inputs or outputs, a node's inputs,
an opset version. Graph attributes (If / Loop / Scan bodies) are mutated like the main graph.
"""

from __future__ import annotations

import random

from offload.schemas.generated import onnx_pb2 as pb

_A = pb.AttributeProto

# Values that sit on the edges the loaders check: empty, one, negative, 32- and 64-bit limits.
INTERESTING_INTS = [
    0,
    1,
    -1,
    2,
    3,
    7,
    -2,
    64,
    65,
    255,
    256,
    1 << 16,
    (1 << 31) - 1,
    1 << 31,
    -(1 << 31),
    1 << 32,
    1 << 40,
    (1 << 63) - 1,
    -(1 << 63),
]
INTERESTING_FLOATS = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    1e-30,
    1e30,
    3.4e38,
    float("inf"),
    float("-inf"),
    float("nan"),
]

# Operators the mutator swaps in: common ones and ones with shape-producing inputs.
OP_TYPES = [
    "Add",
    "Mul",
    "Relu",
    "Identity",
    "Reshape",
    "Expand",
    "Tile",
    "ConstantOfShape",
    "Range",
    "Slice",
    "Gather",
    "Concat",
    "Split",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Conv",
    "ConvTranspose",
    "MaxPool",
    "AveragePool",
    "Resize",
    "Pad",
    "MatMul",
    "Gemm",
    "Softmax",
    "Cast",
    "ReduceSum",
    "TopK",
    "OneHot",
    "Loop",
    "If",
    "Scan",
    "Einsum",
    "Shape",
    "Size",
    "NonZero",
    "Where",
    "ScatterND",
    "GatherND",
    "DepthToSpace",
    "LSTM",
    "GRU",
    "Unknown",
]
ATTR_NAMES = ["axis", "axes", "perm", "to", "kernel_shape", "pads", "strides", "dilations", "group", "mode"]


def mutate(data: bytes, max_size: int, seed: int, fallback) -> bytes:
    """``data`` with one structural change; ``fallback(data, max_size)`` (byte mutation) when
    ``data`` does not parse, the change cannot apply, or one time in eight to keep byte-level
    variety."""
    rng = random.Random(seed)
    model = pb.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # any parse failure just means: mutate the bytes instead
        return fallback(data, max_size)
    if not model.HasField("graph") or rng.random() < 0.125:
        return fallback(data, max_size)
    try:
        for _ in range(4):
            if MUTATIONS[rng.choice(list(MUTATIONS))](model, rng):
                break
        else:
            return fallback(data, max_size)
        out = model.SerializeToString()
    except Exception:  # e.g. a name that is not UTF-8: the field cannot be read, mutate bytes
        return fallback(data, max_size)
    return out if len(out) <= max_size else fallback(data, max_size)


# ---- what can be mutated -------------------------------------------------------------------------


def graphs(model: pb.ModelProto) -> list[pb.GraphProto]:
    """The main graph and every graph nested in a node attribute, outermost first."""
    out, todo = [], [model.graph]
    while todo:
        g = todo.pop()
        out.append(g)
        for node in g.node:
            for a in node.attribute:
                if a.HasField("g"):
                    todo.append(a.g)
                todo.extend(a.graphs)
    return out


def _value_infos(model: pb.ModelProto) -> list[pb.ValueInfoProto]:
    return [vi for g in graphs(model) for vi in (*g.input, *g.output, *g.value_info)]


def _nodes(model: pb.ModelProto) -> list[pb.NodeProto]:
    return [n for g in graphs(model) for n in g.node]


def _tensors(model: pb.ModelProto) -> list[pb.TensorProto]:
    found = [t for g in graphs(model) for t in g.initializer]
    found += [a.t for n in _nodes(model) for a in n.attribute if a.HasField("t")]
    return found


def _names(g: pb.GraphProto) -> list[str]:
    names = [vi.name for vi in g.input] + [t.name for t in g.initializer]
    return names + [o for n in g.node for o in n.output]


def _int(rng: random.Random) -> int:
    return rng.choice(INTERESTING_INTS) if rng.random() < 0.7 else rng.randint(-4, 16)


# ---- the mutations: each returns whether it changed anything -------------------------------------


def _dims(model, rng) -> bool:
    shapes = [vi.type.tensor_type.shape for vi in _value_infos(model) if vi.type.HasField("tensor_type")]
    shapes = [s for s in shapes if s.dim] or shapes
    if not shapes:
        return False
    shape = rng.choice(shapes)
    action = rng.random()
    if action < 0.15 or not shape.dim:
        shape.dim.add(dim_value=_int(rng) if rng.random() < 0.8 else 1)
    elif action < 0.25:
        del shape.dim[rng.randrange(len(shape.dim))]
    elif action < 0.35:
        shape.dim[rng.randrange(len(shape.dim))].dim_param = rng.choice(["N", "batch", "?"])
    else:
        shape.dim[rng.randrange(len(shape.dim))].dim_value = _int(rng)
    return True


def _dtypes(model, rng) -> bool:
    typed = [vi.type.tensor_type for vi in _value_infos(model) if vi.type.HasField("tensor_type")]
    targets = [(t, "elem_type") for t in typed] + [(t, "data_type") for t in _tensors(model)]
    if not targets:
        return False
    obj, field = rng.choice(targets)
    setattr(obj, field, rng.randint(0, 30))
    return True


def _op_types(model, rng) -> bool:
    nodes = _nodes(model)
    if not nodes:
        return False
    node = rng.choice(nodes)
    others = [n.op_type for n in nodes]
    node.op_type = rng.choice(others + OP_TYPES)
    return True


def _attributes(model, rng) -> bool:
    nodes = [n for n in _nodes(model) if n.attribute] or _nodes(model)
    if not nodes:
        return False
    node = rng.choice(nodes)
    if not node.attribute or rng.random() < 0.15:
        a = node.attribute.add(name=rng.choice(ATTR_NAMES))
        a.type, a.i = _A.INT, _int(rng)
        return True
    a = rng.choice(node.attribute)
    if rng.random() < 0.1:
        a.type = rng.randint(0, 14)
    elif a.type == _A.INT:
        a.i = _int(rng)
    elif a.type == _A.FLOAT:
        a.f = rng.choice(INTERESTING_FLOATS)
    elif a.type == _A.INTS:
        _edit_list(a.ints, rng, lambda: _int(rng))
    elif a.type == _A.FLOATS:
        _edit_list(a.floats, rng, lambda: rng.choice(INTERESTING_FLOATS))
    elif a.type == _A.STRING:
        a.s = rng.choice([b"", b"NOTSET", b"SAME_UPPER", b"VALID", b"linear", b"nearest", b"x" * 300])
    elif a.type == _A.TENSOR:
        return _one_tensor(a.t, rng)
    else:
        node.attribute.remove(a)
    return True


def _edit_list(field, rng, value) -> None:
    action = rng.random()
    if action < 0.3 or not field:
        field.append(value())
    elif action < 0.5:
        del field[rng.randrange(len(field))]
    else:
        field[rng.randrange(len(field))] = value()


def _initializer_sizes(model, rng) -> bool:
    tensors = _tensors(model)
    if not tensors:
        return False
    return _one_tensor(rng.choice(tensors), rng)


def _one_tensor(t: pb.TensorProto, rng) -> bool:
    if t.raw_data and rng.random() < 0.4:
        cut = rng.randrange(len(t.raw_data) + 1)
        t.raw_data = t.raw_data[:cut] if rng.random() < 0.5 else t.raw_data + bytes(rng.randint(1, 16))
    else:
        _edit_list(t.dims, rng, lambda: _int(rng))
    return True


def _graph_io(model, rng) -> bool:
    g = rng.choice(graphs(model))
    field = g.input if rng.random() < 0.5 else g.output
    names = _names(g)
    action = rng.random()
    if field and action < 0.35:
        del field[rng.randrange(len(field))]
    elif field and action < 0.6:
        field.add().CopyFrom(rng.choice(field))
    elif field and names:
        rng.choice(field).name = rng.choice(names + ["", "nowhere"])
    else:
        return False
    return True


def _node_inputs(model, rng) -> bool:
    g = rng.choice(graphs(model))
    if not g.node:
        return False
    node = rng.choice(g.node)
    names = _names(g) + ["", "undefined"]
    field = node.input if rng.random() < 0.8 else node.output
    action = rng.random()
    if action < 0.2 or not field:
        field.append(rng.choice(names))
    elif action < 0.35:
        del field[rng.randrange(len(field))]
    else:
        field[rng.randrange(len(field))] = rng.choice(names)
    return True


def _opsets(model, rng) -> bool:
    if not model.opset_import or rng.random() < 0.1:
        model.opset_import.add(domain=rng.choice(["", "ai.onnx", "com.microsoft", "ai.onnx.ml"]), version=1)
    op = rng.choice(model.opset_import)
    op.version = rng.choice([1, 6, 7, 9, 10, 11, 12, 13, 17, 18, 21, 23, 26, 30, 0, -1, 1 << 40])
    return True


MUTATIONS = {
    "dims": _dims,
    "dtypes": _dtypes,
    "op_types": _op_types,
    "attributes": _attributes,
    "initializer_sizes": _initializer_sizes,
    "graph_io": _graph_io,
    "node_inputs": _node_inputs,
    "opsets": _opsets,
}
