"""Make the ONNX test fixtures in tests/models/ with PyTorch's own ONNX exporters.

The fixtures are small real-world-shaped models with symbolic dimensions (batch, height/width,
sequence length), exported as users export them. torch is not a dependency of offload or of its
tests: this script runs once, in a separate virtualenv, and its small .onnx files are committed.

    python3 -m venv /tmp/genvenv
    /tmp/genvenv/bin/pip install torch torchvision onnx onnxruntime onnxscript numpy
    /tmp/genvenv/bin/python tests/models/generate.py            # all fixtures
    /tmp/genvenv/bin/python tests/models/generate.py gru_model  # some of them

The committed files were made with torch 2.14.1 (the PyPI wheel, run on CPU), torchvision
0.29.1, onnx 1.23.2 and onnxscript 0.7.2, and checked with onnxruntime 1.32.0; other versions
write different (equivalent) graphs.

Weights are random, seeded per fixture. BatchNorm statistics are measured on random images, so
that signals survive the depth of a random network and the BatchNorm that the exporters fold
into Conv is not an identity. Each fixture names its exporter:

- the TorchScript one (``dynamo=False`` with ``dynamic_axes``): the classic Shape -> Gather ->
  Unsqueeze -> Concat chains, ONNX LSTM/GRU, Identity nodes, If/Loop from scripted code;
- the torch.export one (``dynamo=True`` with ``dynamic_shapes``): Shape(start, end) slices and
  symbolic size arithmetic, with dims such as ``(((height - 1)//8)) + 1`` in value_info. The
  per-node Python stack traces it writes are dropped (the only edit made to an exported file).

Every declared dynamic input axis is checked to stay symbolic in the file, torch's output is
checked against onnxruntime on each shape case of fixtures.py, and README.md is rewritten.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torchvision
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures  # beside this script; needs only numpy

HERE = fixtures.HERE
MAX_BYTES = 1536 * 1024
TORCHSCRIPT_OPSET = 17
DYNAMO_OPSET = 18


@dataclass
class Spec:
    name: str
    what: str
    build: Callable[[], nn.Module]
    inputs: list[str]
    outputs: list[str]
    dynamic: dict[str, dict[int, str]]  # input/output name -> {axis: symbolic dim name}
    exporter: str  # "torchscript" or "dynamo"
    valid: str  # which input shapes the model takes
    script: bool = False  # torch.jit.script the module first (for If/Loop)
    notes: list[str] = field(default_factory=list)


# ---- the models ------------------------------------------------------------------------------


def _calibrate_batchnorm(model: nn.Module, image_size: int = 64) -> nn.Module:
    """Random BatchNorm scales/shifts, and running statistics measured on random images.

    With torchvision's initial statistics (mean 0, var 1) a random deep network's activations
    fade out, and its output hardly depends on its input; measured statistics keep each layer
    normalized, and folding them into Conv then changes the weights as it does for trained models.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        for m in norms:
            m.weight.uniform_(0.5, 1.5)
            m.bias.normal_(0.0, 0.1)
            m.reset_running_stats()
            m.momentum = None  # a plain average over the calibration batches
        model.train()
        for _ in range(4):
            model(torch.randn(8, 3, image_size, image_size))
    return model.eval()


def cnn_classifier() -> nn.Module:
    model = torchvision.models.mobilenet_v3_small(weights=None, width_mult=0.25, num_classes=10)
    for m in model.classifier.modules():  # torchvision's N(0, 0.01) init gives ~1e-3 logits
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 2.0 / m.in_features**0.5)
    return _calibrate_batchnorm(model)


class Segmenter(nn.Module):
    """torchvision's LR-ASPP head on a narrow dilated MobileNetV3-Small; returns the mask logits.

    The head's output is resized (bilinear) back to the input's height and width.
    """

    def __init__(self):
        super().__init__()
        from torchvision.models.segmentation.lraspp import _lraspp_mobilenetv3

        backbone = torchvision.models.mobilenet_v3_small(weights=None, width_mult=0.25, dilated=True)
        self.net = _calibrate_batchnorm(_lraspp_mobilenetv3(backbone, num_classes=4))

    def forward(self, image):
        return self.net(image)["out"]


class TransformerEncoderModel(nn.Module):
    """Token + learned position embeddings -> 2-layer nn.TransformerEncoder -> per-token head."""

    def __init__(self, d_model: int = 32, heads: int = 4, layers: int = 2, classes: int = 5):
        super().__init__()
        self.tok = nn.Embedding(fixtures.VOCAB, d_model)
        self.pos = nn.Embedding(fixtures.MAX_SEQ, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 2 * d_model, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(
            layer, layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False
        )
        self.head = nn.Linear(d_model, classes)

    def forward(self, tokens, padding_mask):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        h = self.tok(tokens) + self.pos(positions).unsqueeze(0)
        h = self.encoder(h, src_key_padding_mask=padding_mask)
        return self.head(h)


class LSTMModel(nn.Module):
    """Embedding -> 2-layer bidirectional LSTM -> per-token linear head."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(fixtures.VOCAB, 16)
        self.lstm = nn.LSTM(16, 24, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(48, 4)

    def forward(self, tokens):
        y, _ = self.lstm(self.embed(tokens))
        return self.head(y)


class GRUModel(nn.Module):
    """2-layer GRU over float features -> per-step linear head, plus the final hidden state."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(fixtures.GRU_FEATURES, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        y, h = self.gru(x)
        return self.head(y), h


class ControlFlow(nn.Module):
    """Scripted: an If on the input's mean, then a Loop of residual steps ``steps`` times."""

    def __init__(self):
        super().__init__()
        f = fixtures.CONTROL_FEATURES
        self.inp = nn.Linear(f, f)
        self.step = nn.Linear(f, f)
        self.out = nn.Linear(f, 4)

    def forward(self, x, steps):
        if bool(x.mean() > 0):
            h = torch.relu(self.inp(x)) * 0.5
        else:
            h = torch.sigmoid(self.inp(-x)) + 0.25
        for _ in range(int(steps)):
            h = torch.tanh(self.step(h)) + h - h.mean(dim=0, keepdim=True)
        return self.out(h)


SPECS = [
    Spec(
        "cnn_classifier",
        "torchvision mobilenet_v3_small(width_mult=0.25, num_classes=10), BatchNorm folded into Conv",
        cnn_classifier,
        ["image"],
        ["logits"],
        {"image": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}},
        "torchscript",
        "any batch >= 1; any height/width >= 32 (global pooling; no multiple needed)",
    ),
    Spec(
        "segmenter",
        "torchvision LR-ASPP on mobilenet_v3_small(width_mult=0.25, dilated=True), 4 classes, "
        "output bilinearly resized to the input size",
        Segmenter,
        ["image"],
        ["out"],
        {"image": {0: "batch", 2: "height", 3: "width"}},
        "dynamo",
        "any batch >= 1; any height/width >= 32 (the resize sizes are computed from the input's)",
    ),
    Spec(
        "transformer_encoder",
        "token + learned position embeddings -> nn.TransformerEncoder (d_model 32, 4 heads, "
        "2 layers, final LayerNorm) with a key-padding mask -> Linear(32, 5)",
        TransformerEncoderModel,
        ["tokens", "padding_mask"],
        ["out"],
        {
            "tokens": {0: "batch", 1: "seq"},
            "padding_mask": {0: "batch", 1: "seq"},
            "out": {0: "batch", 1: "seq"},
        },
        # the TorchScript exporter bakes the traced sequence length into a Reshape inside
        # nn.MultiheadAttention in this torch version: the file would only take that length
        "dynamo",
        f"any batch >= 1; 1 <= seq <= {fixtures.MAX_SEQ}; token ids in [0, {fixtures.VOCAB}); "
        "padding_mask True marks padding, at least one False per row",
    ),
    Spec(
        "lstm_model",
        "Embedding(100, 16) -> bidirectional 2-layer nn.LSTM(hidden 24) -> Linear(48, 4)",
        LSTMModel,
        ["tokens"],
        ["out"],
        {"tokens": {0: "batch", 1: "seq"}, "out": {0: "batch", 1: "seq"}},
        "torchscript",
        f"any batch >= 1, seq >= 1; token ids in [0, {fixtures.VOCAB})",
    ),
    Spec(
        "gru_model",
        "2-layer nn.GRU(8 -> 16) -> Linear(16, 3), and the final hidden state",
        GRUModel,
        ["x"],
        ["out", "h_n"],
        {"x": {0: "batch", 1: "seq"}, "out": {0: "batch", 1: "seq"}, "h_n": {1: "batch"}},
        "torchscript",
        "any batch >= 1, seq >= 1",
    ),
    Spec(
        "control_flow",
        "torch.jit.script'ed: If on mean(x) > 0 (Relu/Sigmoid branches with Gemm), then a Loop "
        "running `steps` residual Tanh(Gemm) steps",
        ControlFlow,
        ["x", "steps"],
        ["y"],
        {"x": {0: "batch"}, "y": {0: "batch"}},
        "torchscript",
        "any batch >= 1; steps: int64 scalar >= 0 (the Loop's trip count); mean(x) > 0 picks the then-branch",
        script=True,
    ),
]


# ---- export and checks -----------------------------------------------------------------------


def _export(spec: Spec, model: nn.Module, out_path: str) -> None:
    # example inputs from case 1: no dim of size 1, which torch.export would specialize
    feeds = fixtures.inputs(spec.name, 1, np.random.default_rng(1))
    args = tuple(torch.from_numpy(feeds[n]) for n in spec.inputs)
    quiet = contextlib.redirect_stdout(io.StringIO())
    if spec.exporter == "torchscript":
        module = torch.jit.script(model) if spec.script else model
        with quiet:
            torch.onnx.export(
                module,
                args,
                out_path,
                dynamo=False,
                input_names=spec.inputs,
                output_names=spec.outputs,
                opset_version=TORCHSCRIPT_OPSET,
                dynamic_axes=spec.dynamic,
            )
        return
    # torch.export: the dims named in spec.dynamic for the inputs, keyed by forward's argument names
    import inspect

    params = list(inspect.signature(model.forward).parameters)
    dims = {}
    shapes = {}
    for arg, name in zip(params, spec.inputs):
        axes = spec.dynamic.get(name, {})
        shapes[arg] = {a: dims.setdefault(d, torch.export.Dim(d)) for a, d in axes.items()}
    with quiet:
        program = torch.onnx.export(
            model,
            args,
            dynamo=True,
            input_names=spec.inputs,
            output_names=spec.outputs,
            opset_version=DYNAMO_OPSET,
            dynamic_shapes=shapes,
            optimize=True,  # onnxscript's folding; the checks below make sure dims stay symbolic
        )
    program.save(out_path, external_data=False)
    # The only edit to an exported file: drop the per-node Python stack traces (a third of
    # the bytes, and paths of the machine that ran this); the other node metadata stays.
    model = onnx.load(out_path)
    for node in _nodes(model.graph):
        keep = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    onnx.save(model, out_path)


def _nodes(graph: onnx.GraphProto):
    """Every node, those in subgraphs included."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                yield from _nodes(g)


def _dims(v: onnx.ValueInfoProto) -> list:
    return [d.dim_param if d.HasField("dim_param") else d.dim_value for d in v.type.tensor_type.shape.dim]


def _count_ops(graph: onnx.GraphProto) -> tuple[int, int]:
    """(top-level nodes, nodes inside subgraphs)."""
    return len(graph.node), sum(1 for _ in _nodes(graph)) - len(graph.node)


def _check_symbolic(spec: Spec, model: onnx.ModelProto) -> None:
    values = {v.name: v for v in list(model.graph.input) + list(model.graph.output)}
    for name in spec.inputs:
        for axis in spec.dynamic.get(name, {}):
            dims = _dims(values[name])
            if not isinstance(dims[axis], str) or not dims[axis]:
                raise AssertionError(f"{spec.name}: input {name} axis {axis} is not symbolic: {dims}")


def _as_list(out) -> list[np.ndarray]:
    if isinstance(out, torch.Tensor):
        out = [out]
    return [t.detach().numpy() for t in out]


def _check_against_onnxruntime(spec: Spec, model: nn.Module, path: str) -> list[str]:
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    tried = []
    for case in range(fixtures.CASES[spec.name]):
        feeds = fixtures.inputs(spec.name, case, np.random.default_rng(case))
        with torch.no_grad():
            want = _as_list(model(*(torch.from_numpy(feeds[n]) for n in spec.inputs)))
        got = sess.run(spec.outputs, feeds)
        for name, w, g in zip(spec.outputs, want, got):
            assert w.shape == g.shape and w.dtype == g.dtype, (spec.name, case, name, w.shape, g.shape)
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{spec.name} case {case} {name}")
        tried.append(" & ".join("x".join(map(str, feeds[n].shape)) or "scalar" for n in spec.inputs))
    return tried


def _type_text(v: onnx.ValueInfoProto) -> str:
    elem = onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
    return f"{v.name}: {np.dtype(elem).name}[{', '.join(map(str, _dims(v)))}]"


def make(spec: Spec) -> str:
    torch.manual_seed(sum(map(ord, spec.name)))
    model = spec.build().eval()
    path = fixtures.path(spec.name)
    _export(spec, model, path)
    onnx_model = onnx.load(path)
    onnx.checker.check_model(onnx_model)
    _check_symbolic(spec, onnx_model)
    size = os.path.getsize(path)
    assert size <= MAX_BYTES, f"{spec.name}: {size} bytes is over {MAX_BYTES}"
    tried = _check_against_onnxruntime(spec, model, path)
    top, nested = _count_ops(onnx_model.graph)
    opset = next(o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx"))
    ops = f"{top} ops" + (f" (+{nested} inside If/Loop bodies)" if nested else "")
    kinds = ", ".join(f"{k} {n}" for k, n in Counter(n.op_type for n in onnx_model.graph.node).most_common())
    exporter = "TorchScript exporter" if spec.exporter == "torchscript" else "torch.export (dynamo) exporter"
    line = (
        f"- `{spec.name}.onnx` ({size / 1024:.0f} KiB, opset {opset}, {exporter}, {ops}): {spec.what}. "
        f"Inputs: {'; '.join(_type_text(v) for v in onnx_model.graph.input)}. "
        f"Outputs: {'; '.join(_type_text(v) for v in onnx_model.graph.output)}. "
        f"Valid: {spec.valid}. Checked against onnxruntime at {', '.join(tried)}. Op types: {kinds}."
    )
    print(line.split(": ", 1)[0], "ok", flush=True)
    return line


README_HEAD = """# ONNX fixtures with symbolic dims

Small models exported by PyTorch's ONNX exporters, random (seeded) weights, symbolic batch and
spatial/sequence dims as exporters write them. Made by `generate.py` (see its docstring for how
to rerun it and the versions used; this file is written by it). `fixtures.py` gives valid feeds
for several shape cases of each; `test_fixtures_cpu.py` compares offload with onnxruntime on them.

"""


def main(argv: list[str]) -> None:
    warnings.simplefilter("ignore")
    wanted = argv or [s.name for s in SPECS]
    unknown = set(wanted) - {s.name for s in SPECS}
    if unknown:
        raise SystemExit(f"unknown fixture(s): {', '.join(sorted(unknown))}")
    readme = os.path.join(HERE, "README.md")
    lines = {}
    if os.path.exists(readme):  # keep the lines of fixtures not regenerated this time
        with open(readme, encoding="utf-8") as f:
            old = f.read().splitlines()
        for text in old:
            for s in SPECS:
                if text.startswith(f"- `{s.name}.onnx`"):
                    lines[s.name] = text
    for spec in SPECS:
        if spec.name in wanted:
            lines[spec.name] = make(spec)
    body = "\n".join(lines[s.name] for s in SPECS if s.name in lines)
    versions = (
        f"Made with torch {torch.__version__.split('+')[0]}, torchvision {torchvision.__version__.split('+')[0]}, "
        f"onnx {onnx.__version__}, checked with onnxruntime {ort.__version__}.\n"
    )
    with open(readme, "w", encoding="utf-8") as f:
        f.write(README_HEAD + body + "\n\n" + versions)


if __name__ == "__main__":
    main(sys.argv[1:])
