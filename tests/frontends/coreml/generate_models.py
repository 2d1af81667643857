"""Make the converted Core ML model fixtures in models/ with coremltools' PyTorch converter.

Each fixture is a small torch module with seeded random weights, converted as users convert
theirs (``ct.convert`` of a ``torch.jit.trace``/``torch.jit.script`` module or of a
``torch.export`` program, ``convert_to="mlprogram"``) and saved as ``models/<name>.mlpackage``, beside ``models/<name>.npz`` holding the oracle: seeded
inputs and the torch module's own outputs on them, keyed by the names the Core ML model gives its
inputs and outputs. torch and coremltools are not dependencies of offload or of its tests: this
script runs in a separate virtualenv and its small files (each package < 1.5 MB) are committed.

    python3 -m venv /tmp/genvenv
    /tmp/genvenv/bin/pip install torch torchvision coremltools==9.0 numpy
    /tmp/genvenv/bin/python tests/frontends/coreml/generate_models.py               # every model
    /tmp/genvenv/bin/python tests/frontends/coreml/generate_models.py lstm_tagger   # some of them

The committed files were made with torch 2.14.1 (the PyPI wheel, run on CPU), torchvision 0.29.1,
coremltools 9.0 and numpy 2.4.6, on Linux (where coremltools converts but cannot run a model: the
oracle is torch's, never Core ML's). coremltools warns that this torch is newer than the ones it
was tested with; the conversions below work.

The .npz key scheme:

- ``in:<input>`` / ``out:<output>``: one call;
- ``in:<input>@<tag>`` / ``out:<output>@<tag>``: several calls, each with its tag: a shape case
  of a flexible model (``@0``, ``@1``), a function of a multifunction model (``@<function>``), a
  call of a stateful model, in order (``@0``, ``@1``, ``@2``, the state carried from call to call);
- ``tolerance``: relative, on the largest |reference| of each output.

The models:

- ``mobilenet_fp32``: torchvision mobilenet_v3_small(width_mult=0.25, num_classes=10) (conv, BN,
  ReLU, hardswish, hardsigmoid SE, depthwise, residual adds, avgpool, linear), fp32 compute;
- ``mobilenet_fp16``: the same, with coremltools' default fp16 compute precision (tolerance
  2e-2: the fp16 rounding of the BN-folded weights alone moves its logits by 1.1 %);
- ``resnet_fp16``: a small residual CNN (conv/BN/ReLU, stride-2 blocks with 1x1 shortcuts, max
  pool, global average pool, linear), default fp16 compute precision (fp16 weights);
- ``transformer_encoder``: two pre-norm encoder layers (d_model 32, 4 heads, GELU) with
  multi-head attention written out (matmul/softmax in one layer, F.scaled_dot_product_attention
  in the other), a padding mask, a token embedding and a masked-mean classification head;
- ``transformer_ios18``: the same for iOS18, where the second layer's attention stays one
  ``scaled_dot_product_attention`` op;
- ``lstm_tagger``: a 2-layer LSTM over a sequence, with a linear tagger on each step;
- ``birnn``: a bidirectional GRU (which coremltools writes as two ``while_loop``) feeding a
  bidirectional LSTM (one ``lstm`` op);
- ``gru_encoder``: a unidirectional GRU with an initial state (coremltools 9.0 writes torch's
  GRU as a ``while_loop`` over the steps, not as a ``gru`` op);
- ``segmenter``: reflect pad, strided conv, bilinear and nearest upsampling, pixel shuffle,
  concat, slices, per-pixel argmax (int32 output) and top-k;
- ``exported_program``: converted from ``torch.export`` (not TorchScript): gather, cumsum,
  select, clip, split, layer norm, gather_along_axis;
- ``control_flow``: a torch.jit.script module with a data-dependent ``if`` and a ``for`` loop;
- ``palettized``: 4-bit uniform palettization (constexpr_lut_to_dense) of a small conv+MLP;
- ``quantized_int8``: per-channel symmetric int8 linear quantization
  (constexpr_affine_dequantize) of the same architecture;
- ``palettized_ios18``: iOS18 4-bit palettization with a LUT per group of 8 output channels;
- ``quantized_int4_ios18``: iOS18 blockwise int4 quantization (constexpr_blockwise_shift_scale).
  For these four the oracle is torch's
  output with the weights replaced by the model's own decompressed weights
  (``ct.optimize.coreml.decompress_weights``), so the comparison is exact up to fp32 rounding;
- ``flexible_seq``: a conv1d/linear model whose batch and sequence length are ``ct.RangeDim``;
  oracles for two shapes;
- ``enumerated_image``: a CNN with ``ct.EnumeratedShapes`` for its image size; oracles for two;
- ``multifunction``: two functions (``classify``, the default, and ``embed``) sharing a backbone,
  made with ``MultiFunctionDescriptor`` + ``save_multifunction``; oracles per function;
- ``stateful_counter``: an iOS18 model with a registered buffer updated in forward
  (``ct.StateType``, fp16); the oracle of three consecutive calls from a zero state, computed in
  fp32 (tolerance 1e-2).

fp32 models have tolerance 1e-4, fp16 ones 1e-2 (relative, on the largest |reference|), but
mobilenet_fp16 (2e-2).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable

import numpy as np

warnings.filterwarnings("ignore")

import coremltools as ct  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from torch import nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models")
MAX_BYTES = 1536 * 1024
FP32 = 1e-4
FP16 = 1e-2


def _size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _save(name: str, model, arrays: dict[str, np.ndarray], tolerance: float) -> None:
    os.makedirs(MODELS, exist_ok=True)
    path = os.path.join(MODELS, f"{name}.mlpackage")
    shutil.rmtree(path, ignore_errors=True)
    if isinstance(model, str):  # already saved (save_multifunction)
        shutil.move(model, path)
    else:
        model.save(path)
    size = _size(path)
    if size > MAX_BYTES:
        raise SystemExit(f"{name}: {size} bytes, more than {MAX_BYTES}")
    arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    np.savez(os.path.join(MODELS, f"{name}.npz"), **arrays, tolerance=np.float64(tolerance))
    print(f"{name}: {size} bytes, keys {sorted(arrays)}")


def _names(model) -> tuple[list[str], list[str]]:
    d = model.get_spec().description
    return [i.name for i in d.input], [o.name for o in d.output]


def _np(t) -> np.ndarray:
    return t.detach().numpy()


def _calibrate_batchnorm(model: nn.Module, shape: tuple) -> nn.Module:
    """Random BatchNorm scales/shifts and running statistics measured on random inputs, so that
    a random deep network's signals survive its depth (as tests/models/generate.py does)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
                m.reset_running_stats()
                m.momentum = None
        model.train()
        for _ in range(4):
            model(torch.randn(8, *shape[1:]))
    return model.eval()


def _convert(module, example, inputs, outputs, *, script=False, fp16=False, target=None, **kw):
    traced = torch.jit.script(module) if script else torch.jit.trace(module, example)
    precision = ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32
    extra = {"minimum_deployment_target": target} if target is not None else {}
    return ct.convert(
        traced,
        convert_to="mlprogram",
        inputs=inputs,
        outputs=outputs,
        compute_precision=precision,
        **extra,
        **kw,
    )


def _one_call(model, feeds: dict[str, np.ndarray], results: list[np.ndarray]) -> dict[str, np.ndarray]:
    ins, outs = _names(model)
    assert sorted(ins) == sorted(feeds), (ins, list(feeds))
    assert len(outs) == len(results), (outs, len(results))
    arrays = {f"in:{k}": v for k, v in feeds.items()}
    arrays.update({f"out:{k}": np.asarray(v) for k, v in zip(outs, results)})
    return arrays


# ---- the models ----------------------------------------------------------------------------------


def mobilenet_fp32(fp16=False):
    torch.manual_seed(1)
    model = torchvision.models.mobilenet_v3_small(weights=None, width_mult=0.25, num_classes=10)
    for m in model.classifier.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 2.0 / m.in_features**0.5)
    model = _calibrate_batchnorm(model, (1, 3, 64, 64))
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((1, 3, 64, 64), np.float32))
    mlmodel = _convert(
        model, x, [ct.TensorType(name="image", shape=x.shape)], [ct.TensorType(name="logits")], fp16=fp16
    )
    with torch.no_grad():
        y = model(x)
    return mlmodel, _one_call(mlmodel, {"image": _np(x)}, [_np(y)]), 2 * FP16 if fp16 else FP32


def mobilenet_fp16():
    """The same mobilenet with coremltools' default fp16 compute precision (fp16 weights).

    Its tolerance is 2e-2: coremltools folds BatchNorm into the conv weights and rounds those to
    fp16, and over 52 convs that alone moves the logits by 1.1 % of the largest (offload computing
    in fp32 on the model's fp16 weights); fp16 activations make it 1.4 %."""
    return mobilenet_fp32(fp16=True)


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(h)) + self.short(x))


class ResNetLike(nn.Module):
    def __init__(self, width: int = 16, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.layers = nn.Sequential(
            _Block(width, width, 1), _Block(width, 2 * width, 2), _Block(2 * width, 4 * width, 2)
        )
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x):
        h = self.layers(self.pool(self.stem(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


def resnet_fp16():
    torch.manual_seed(2)
    model = _calibrate_batchnorm(ResNetLike(), (1, 3, 48, 48))
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((1, 3, 48, 48), np.float32))
    mlmodel = _convert(
        model, x, [ct.TensorType(name="image", shape=x.shape)], [ct.TensorType(name="logits")], fp16=True
    )
    with torch.no_grad():
        y = model(x)
    return mlmodel, _one_call(mlmodel, {"image": _np(x)}, [_np(y)]), FP16


class Attention(nn.Module):
    """Multi-head self-attention written out (nn.TransformerEncoderLayer's traced graph has an
    ``int`` of a tensor that coremltools 9.0 does not convert)."""

    def __init__(self, d: int, heads: int, sdpa: bool):
        super().__init__()
        self.heads, self.dim, self.sdpa = heads, d // heads, sdpa  # Python ints: constants when traced
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x, mask):
        b, t = x.shape[0], x.shape[1]
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, self.dim).permute(2, 0, 3, 1, 4).unbind(0)
        if self.sdpa:
            h = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            scores = q @ k.transpose(-1, -2) * self.dim**-0.5 + mask
            h = torch.softmax(scores, dim=-1) @ v
        return self.proj(h.transpose(1, 2).reshape(b, t, self.heads * self.dim))


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, sdpa: bool):
        super().__init__()
        self.attn = Attention(d, heads, sdpa)
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

    def forward(self, x, mask):  # pre-norm
        x = x + self.attn(self.n1(x), mask)
        return x + self.ff(self.n2(x))


class Encoder(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 32, classes: int = 5):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, 8, d) * 0.1)
        self.l1 = EncoderLayer(d, 4, 64, sdpa=False)
        self.l2 = EncoderLayer(d, 4, 64, sdpa=True)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens, valid):
        # valid: (batch, seq) 1 for tokens, 0 for padding -> an additive key mask
        mask = ((1.0 - valid) * -1e4)[:, None, None, :]
        h = self.embed(tokens) + self.pos
        h = self.norm(self.l2(self.l1(h, mask), mask))
        pooled = (h * valid[:, :, None]).sum(dim=1) / valid.sum(dim=1, keepdim=True)
        return self.head(pooled), h


def transformer_encoder(target=None):
    torch.manual_seed(3)
    model = Encoder().eval()
    rng = np.random.default_rng(3)
    tokens = torch.from_numpy(rng.integers(0, 50, (2, 8)).astype(np.int32))
    valid = torch.ones(2, 8)
    valid[1, 5:] = 0.0
    mlmodel = _convert(
        model,
        (tokens.long(), valid),
        [
            ct.TensorType(name="tokens", shape=tokens.shape, dtype=np.int32),
            ct.TensorType(name="valid", shape=valid.shape),
        ],
        [ct.TensorType(name="logits"), ct.TensorType(name="hidden")],
        target=target,
    )
    with torch.no_grad():
        logits, hidden = model(tokens.long(), valid)
    feeds = {"tokens": _np(tokens), "valid": _np(valid)}
    return mlmodel, _one_call(mlmodel, feeds, [_np(logits), _np(hidden)]), FP32


def transformer_ios18():
    """The same encoder for iOS18, where F.scaled_dot_product_attention stays one MIL op."""
    return transformer_encoder(ct.target.iOS18)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        h, (hn, _) = self.lstm(x)
        return self.out(h), hn


def lstm_tagger():
    torch.manual_seed(4)
    model = Tagger().eval()
    x = torch.from_numpy(np.random.default_rng(4).standard_normal((2, 6, 8), np.float32))
    mlmodel = _convert(
        model,
        x,
        [ct.TensorType(name="x", shape=x.shape)],
        [ct.TensorType(name="tags"), ct.TensorType(name="h_n")],
    )
    with torch.no_grad():
        tags, hn = model(x)
    return mlmodel, _one_call(mlmodel, {"x": _np(x)}, [_np(tags), _np(hn)]), FP32


class BiRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(6, 12, batch_first=True, bidirectional=True)
        self.lstm = nn.LSTM(24, 8, batch_first=True, bidirectional=True)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        h, _ = self.gru(x)
        h, _ = self.lstm(h)
        return self.out(h)


def birnn():
    torch.manual_seed(14)
    model = BiRNN().eval()
    x = torch.from_numpy(np.random.default_rng(14).standard_normal((2, 7, 6), np.float32))
    mlmodel = _convert(model, x, [ct.TensorType(name="x", shape=x.shape)], [ct.TensorType(name="y")])
    with torch.no_grad():
        y = model(x)
    return mlmodel, _one_call(mlmodel, {"x": _np(x)}, [_np(y)]), FP32


class GRUEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(5, 10, batch_first=True)
        self.out = nn.Linear(10, 2)

    def forward(self, x, h0):
        h, hn = self.gru(x, h0)
        return self.out(h), hn


def gru_encoder():
    """A unidirectional GRU with an initial state (a ``while_loop`` in the converted model)."""
    torch.manual_seed(17)
    model = GRUEncoder().eval()
    rng = np.random.default_rng(17)
    x = torch.from_numpy(rng.standard_normal((3, 6, 5), np.float32))
    h0 = torch.from_numpy(rng.standard_normal((1, 3, 10), np.float32) * 0.5)
    mlmodel = _convert(
        model,
        (x, h0),
        [ct.TensorType(name="x", shape=x.shape), ct.TensorType(name="h0", shape=h0.shape)],
        [ct.TensorType(name="y"), ct.TensorType(name="h_n")],
    )
    with torch.no_grad():
        y, hn = model(x, h0)
    return mlmodel, _one_call(mlmodel, {"x": _np(x), "h0": _np(h0)}, [_np(y), _np(hn)]), FP32


class Segmenter(nn.Module):
    """Encoder-decoder with the tensor ops of dense prediction: reflect padding, strided conv,
    bilinear and nearest upsampling, pixel shuffle, concat, slicing, per-pixel argmax and the
    top-k scores of the image."""

    def __init__(self):
        super().__init__()
        self.enc1 = nn.Conv2d(3, 8, 3)
        self.enc2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.shuffle = nn.Conv2d(16, 32, 1)
        self.dec = nn.Conv2d(8 + 8 + 16, 5, 3, padding=1)

    def forward(self, x):
        e1 = torch.relu(self.enc1(nn.functional.pad(x, (1, 1, 1, 1), mode="reflect")))  # H x W
        e2 = torch.relu(self.enc2(e1))  # H/2
        up = nn.functional.interpolate(e2, scale_factor=2.0, mode="bilinear", align_corners=False)
        shuf = nn.functional.pixel_shuffle(self.shuffle(e2), 2)  # 8 channels, H
        near = nn.functional.interpolate(e1[:, :4], scale_factor=2.0, mode="nearest")[:, :, ::2, ::2]
        h = torch.cat([up, shuf, near, e1[:, 4:]], dim=1)
        logits = self.dec(h)
        top = torch.topk(logits.amax(dim=(2, 3)), 3, dim=1)
        return logits, logits.argmax(dim=1).to(torch.int32), top.values


def segmenter():
    torch.manual_seed(15)
    model = Segmenter().eval()
    x = torch.from_numpy(np.random.default_rng(15).standard_normal((1, 3, 16, 20), np.float32))
    mlmodel = _convert(
        model,
        x,
        [ct.TensorType(name="image", shape=x.shape)],
        [ct.TensorType(name="logits"), ct.TensorType(name="classes"), ct.TensorType(name="top_scores")],
    )
    with torch.no_grad():
        logits, classes, top = model(x)
    return mlmodel, _one_call(mlmodel, {"image": _np(x)}, [_np(logits), _np(classes), _np(top)]), FP32


class Exported(nn.Module):
    """Converted from torch.export (an ExportedProgram, not TorchScript): gathers, cumsum, where,
    clamp, split and a layer norm."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(20, 8))
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(4)

    def forward(self, ids, x):
        e = self.table[ids]  # (2, 5, 8): gather
        h = self.fc(e + x).cumsum(dim=1)
        h = torch.where(h > 0, h, 0.1 * h).clamp(-3.0, 3.0)
        a, b = torch.split(h, 4, dim=-1)
        return self.norm(a) * torch.sigmoid(b), torch.gather(h, 2, ids[:, :, None] % 8)


def exported_program():
    torch.manual_seed(16)
    model = Exported().eval()
    rng = np.random.default_rng(16)
    ids = torch.from_numpy(rng.integers(0, 20, (2, 5)).astype(np.int64))
    x = torch.from_numpy(rng.standard_normal((2, 5, 8), np.float32))
    exported = torch.export.export(model, (ids, x)).run_decompositions({})
    mlmodel = ct.convert(
        exported,
        convert_to="mlprogram",
        inputs=[
            ct.TensorType(name="ids", shape=ids.shape, dtype=np.int32),
            ct.TensorType(name="x", shape=x.shape),
        ],
        outputs=[ct.TensorType(name="gated"), ct.TensorType(name="picked")],
        compute_precision=ct.precision.FLOAT32,
    )
    with torch.no_grad():
        gated, picked = model(ids, x)
    feeds = {"ids": _np(ids).astype(np.int32), "x": _np(x)}
    return mlmodel, _one_call(mlmodel, feeds, [_np(gated), _np(picked)]), FP32


class ControlFlow(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.step = nn.Linear(16, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        h = self.inp(x)
        if bool(h.sum() > 0):
            h = torch.relu(h)
        else:
            h = torch.sigmoid(-h) + 0.25
        for _ in range(3):
            h = torch.tanh(self.step(h)) + h
        return self.out(h)


def control_flow():
    torch.manual_seed(5)
    model = ControlFlow().eval()
    x = torch.from_numpy(np.random.default_rng(5).standard_normal((2, 8), np.float32))
    mlmodel = _convert(
        model, x, [ct.TensorType(name="x", shape=x.shape)], [ct.TensorType(name="y")], script=True
    )
    with torch.no_grad():
        y = model(x)
    return mlmodel, _one_call(mlmodel, {"x": _np(x)}, [_np(y)]), FP32


class SmallNet(nn.Module):
    """Weights big enough for coremltools to compress (more than 2048 elements each)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 48)
        self.fc3 = nn.Linear(48, 10)

    def forward(self, x):
        h = torch.relu(self.conv(x))
        h = torch.relu(self.fc1(torch.flatten(nn.functional.max_pool2d(h, 2), 1)))
        return self.fc3(torch.relu(self.fc2(h)))


def _compressed(name: str, seed: int, compress: Callable, target=None):
    torch.manual_seed(seed)
    model = SmallNet().eval()
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((1, 16, 8, 8), np.float32))
    mlmodel = _convert(
        model,
        x,
        [ct.TensorType(name="x", shape=x.shape)],
        [ct.TensorType(name="y")],
        target=target or ct.target.iOS16,
    )
    mlmodel = compress(mlmodel)
    # The oracle: torch with the model's own decompressed weights, matched to layers by shape.
    plain = ct.optimize.coreml.decompress_weights(mlmodel)
    weights = ct.optimize.coreml.get_weights_metadata(plain, weight_threshold=2048)
    by_shape = {tuple(m.val.shape): m.val for m in weights.values()}
    with torch.no_grad():
        original = model(x)
        for p in [model.conv.weight, model.fc1.weight, model.fc2.weight]:
            val = by_shape[tuple(p.shape)]
            assert not np.array_equal(val, _np(p)), (
                f"{name}: a weight of shape {tuple(p.shape)} was not compressed"
            )
            p.copy_(torch.from_numpy(np.asarray(val, np.float32)))
        y = model(x)
    # The compression shows in the output, well beyond the tolerance: a test that decompressed
    # wrongly (or ignored the compression) would not pass.
    change = float((y - original).abs().max() / y.abs().max())
    print(f"{name}: the compressed weights change the output by {change:.1e} of its largest value")
    assert change > 10 * FP32, change
    return mlmodel, _one_call(mlmodel, {"x": _np(x)}, [_np(y)]), FP32


def palettized():
    from coremltools.optimize.coreml import OpPalettizerConfig, OptimizationConfig, palettize_weights

    config = OptimizationConfig(
        global_config=OpPalettizerConfig(mode="uniform", nbits=4, weight_threshold=2048)
    )
    return _compressed("palettized", 6, lambda m: palettize_weights(m, config))


def quantized_int8():
    from coremltools.optimize.coreml import (
        OpLinearQuantizerConfig,
        OptimizationConfig,
        linear_quantize_weights,
    )

    config = OptimizationConfig(
        global_config=OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", weight_threshold=2048)
    )
    return _compressed("quantized_int8", 7, lambda m: linear_quantize_weights(m, config))


def palettized_ios18():
    """iOS18 palettization: 4-bit LUTs per group of 8 output channels (constexpr_lut_to_dense
    of iOS18, its LUT with a group axis)."""
    from coremltools.optimize.coreml import OpPalettizerConfig, OptimizationConfig, palettize_weights

    op = OpPalettizerConfig(
        mode="uniform", nbits=4, granularity="per_grouped_channel", group_size=8, weight_threshold=2048
    )
    config = OptimizationConfig(global_config=op)
    return _compressed("palettized_ios18", 12, lambda m: palettize_weights(m, config), ct.target.iOS18)


def quantized_int4_ios18():
    """iOS18 blockwise int4 quantization (constexpr_blockwise_shift_scale), blocks of 16."""
    from coremltools.optimize.coreml import (
        OpLinearQuantizerConfig,
        OptimizationConfig,
        linear_quantize_weights,
    )

    op = OpLinearQuantizerConfig(
        mode="linear", dtype="int4", granularity="per_block", block_size=16, weight_threshold=2048
    )
    config = OptimizationConfig(global_config=op)
    return _compressed(
        "quantized_int4_ios18", 13, lambda m: linear_quantize_weights(m, config), ct.target.iOS18
    )


class SeqNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(6, 12, 3, padding=1)
        self.fc = nn.Linear(12, 5)

    def forward(self, x):  # (batch, channels, length)
        h = torch.relu(self.conv(x))
        h = self.fc(h.transpose(1, 2))  # (batch, length, 5)
        return torch.softmax(h, dim=-1), h.max(dim=1).values


def flexible_seq():
    torch.manual_seed(8)
    model = SeqNet().eval()
    rng = np.random.default_rng(8)
    shapes = [(1, 6, 5), (3, 6, 17)]
    xs = [torch.from_numpy(rng.standard_normal(s, np.float32)) for s in shapes]
    shape = ct.Shape((ct.RangeDim(1, 4, default=1), 6, ct.RangeDim(2, 32, default=5)))
    mlmodel = _convert(
        model,
        xs[0],
        [ct.TensorType(name="x", shape=shape)],
        [ct.TensorType(name="probs"), ct.TensorType(name="peak")],
    )
    return mlmodel, _calls(mlmodel, model, xs, "x"), FP32


def _calls(mlmodel, model, xs, input_name) -> dict[str, np.ndarray]:
    arrays = {}
    for i, x in enumerate(xs):
        with torch.no_grad():
            ys = model(x)
        ys = ys if isinstance(ys, tuple) else (ys,)
        for k, v in _one_call(mlmodel, {input_name: _np(x)}, [_np(y) for y in ys]).items():
            arrays[f"{k}@{i}"] = v
    return arrays


class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16, 6)

    def forward(self, x):
        h = torch.relu(self.c2(torch.relu(self.c1(x))))
        return self.fc(h.mean(dim=(2, 3)))


def enumerated_image():
    torch.manual_seed(9)
    model = TinyCNN().eval()
    rng = np.random.default_rng(9)
    shapes = [(1, 3, 16, 16), (1, 3, 24, 32)]
    xs = [torch.from_numpy(rng.standard_normal(s, np.float32)) for s in shapes]
    shape = ct.EnumeratedShapes(shapes=[list(s) for s in shapes], default=list(shapes[0]))
    mlmodel = _convert(
        model, xs[0], [ct.TensorType(name="image", shape=shape)], [ct.TensorType(name="scores")]
    )
    return mlmodel, _calls(mlmodel, model, xs, "image"), FP32


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.Linear(32, 16), nn.LayerNorm(16))


class Classify(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone, self.head = backbone, nn.Linear(16, 3)

    def forward(self, x):
        return torch.softmax(self.head(self.backbone.body(x)), dim=-1)


class Embed(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone

    def forward(self, x):
        e = self.backbone.body(x)
        return e / e.norm(dim=-1, keepdim=True)


def multifunction():
    torch.manual_seed(10)
    backbone = Backbone()
    rng = np.random.default_rng(10)
    arrays = {}
    tmp = tempfile.mkdtemp()
    desc = ct.utils.MultiFunctionDescriptor()
    for fn, module, out, rows in [
        ("classify", Classify(backbone), "probs", 2),
        ("embed", Embed(backbone), "emb", 3),
    ]:
        module = module.eval()
        x = torch.from_numpy(rng.standard_normal((rows, 12), np.float32))
        mlmodel = _convert(
            module,
            x,
            [ct.TensorType(name="x", shape=x.shape)],
            [ct.TensorType(name=out)],
            target=ct.target.iOS18,
        )
        path = os.path.join(tmp, f"{fn}.mlpackage")
        mlmodel.save(path)
        desc.add_function(path, src_function_name="main", target_function_name=fn)
        with torch.no_grad():
            y = module(x)
        arrays.update({f"{k}@{fn}": v for k, v in _one_call(mlmodel, {"x": _np(x)}, [_np(y)]).items()})
    desc.default_function_name = "classify"
    path = os.path.join(tmp, "multi.mlpackage")
    ct.utils.save_multifunction(desc, path)
    return path, arrays, FP32


class Counter(nn.Module):
    """A running sum in a buffer: each call adds its input to the state and reads it back."""

    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.zeros(2, 4, dtype=torch.float16))
        self.register_buffer("w", torch.rand(2, 4, dtype=torch.float16) + 0.5)

    def forward(self, x):
        self.acc.add_(x)
        return torch.tanh(self.acc * self.w) + x


def stateful_counter():
    torch.manual_seed(11)
    model = Counter().eval()
    rng = np.random.default_rng(11)
    xs = [torch.from_numpy(rng.standard_normal((2, 4)).astype(np.float16)) for _ in range(3)]
    traced = torch.jit.trace(model, xs[0])
    mlmodel = ct.convert(
        traced,
        convert_to="mlprogram",
        inputs=[ct.TensorType(name="x", shape=(2, 4), dtype=np.float16)],
        outputs=[ct.TensorType(name="y", dtype=np.float16)],
        states=[ct.StateType(wrapped_type=ct.TensorType(shape=(2, 4), dtype=np.float16), name="acc")],
        minimum_deployment_target=ct.target.iOS18,
    )
    # The oracle: in fp32, from a zero state (tracing ran forward once: start afresh).
    ref = Counter()
    ref.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    ref.acc.zero_()
    ref = ref.float().eval()
    _, outs = _names(mlmodel)
    arrays = {}
    for i, x in enumerate(xs):
        with torch.no_grad():
            y = ref(x.float())
        arrays[f"in:x@{i}"] = _np(x)
        arrays[f"out:{outs[0]}@{i}"] = _np(y).astype(np.float16)
    return mlmodel, arrays, FP16


MAKERS = {
    f.__name__: f
    for f in [
        mobilenet_fp32,
        mobilenet_fp16,
        resnet_fp16,
        transformer_encoder,
        transformer_ios18,
        lstm_tagger,
        birnn,
        gru_encoder,
        segmenter,
        exported_program,
        control_flow,
        palettized,
        quantized_int8,
        palettized_ios18,
        quantized_int4_ios18,
        flexible_seq,
        enumerated_image,
        multifunction,
        stateful_counter,
    ]
}


def main(names: list[str]) -> None:
    failed = []
    for name in names or list(MAKERS):
        try:
            model, arrays, tolerance = MAKERS[name]()
        except Exception as e:  # report and go on: one model's conversion failing is not the others'
            failed.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:2000]}")
            continue
        _save(name, model, arrays, tolerance)
    if failed:
        raise SystemExit(f"failed: {failed}")


if __name__ == "__main__":
    main(sys.argv[1:])
