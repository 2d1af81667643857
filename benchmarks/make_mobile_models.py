"""Writes the mobile convnet fixtures: torchvision models exported to ONNX with their weights stripped.

Usage: python benchmarks/make_mobile_models.py  (needs torch and torchvision, which offload does not:
    python3 -m venv /tmp/torch && /tmp/torch/bin/pip install torch torchvision onnx)

MobileNetV3-Small, MobileNetV2 and ShuffleNetV2 x0.5 (torchvision, untrained, eval mode), batch 1,
3 x 224 x 224, opset 17, exported by the TorchScript exporter (``dynamo=False``: it needs no
onnxscript) with constant folding (BatchNormalization folds into the convolutions). Each float
initializer keeps its name, type and shape but no data, and the model's metadata lists them under
``offload.stripped``, so that the committed files are tens of KB, not megabytes;
``benchmarks/common.py`` (``filled_model``) gives them seeded values before a benchmark runs.
Integer initializers (Reshape's shapes and the like) keep their values.
"""

from __future__ import annotations

import io
import os

import onnx
import torch
import torchvision
from common import MOBILE, STRIPPED_KEY  # benchmarks/common.py (run as a script)

MODELS = {
    "mobilenet_v3_small": torchvision.models.mobilenet_v3_small,
    "mobilenet_v2": torchvision.models.mobilenet_v2,
    "shufflenet_v2_x0_5": torchvision.models.shufflenet_v2_x0_5,
}


def export(build) -> onnx.ModelProto:
    """The model, untrained and in eval mode, as ONNX (opset 17, batch 1, 3 x 224 x 224)."""
    torch.manual_seed(0)
    model = build(weights=None).eval()
    buffer = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(
            model,
            (torch.zeros(1, 3, 224, 224),),
            buffer,
            input_names=["input"],
            output_names=["logits"],
            opset_version=17,
            do_constant_folding=True,
            dynamo=False,
        )
    return onnx.load_from_string(buffer.getvalue())


def strip(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each float initializer's data dropped (name, type and dims kept)."""
    stripped = []
    for t in model.graph.initializer:
        if t.data_type != onnx.TensorProto.FLOAT:
            continue
        t.ClearField("raw_data")
        t.ClearField("float_data")
        stripped.append(t.name)
    entry = model.metadata_props.add()
    entry.key, entry.value = STRIPPED_KEY, ",".join(stripped)
    return model


def main() -> None:
    os.makedirs(MOBILE, exist_ok=True)
    for name, build in MODELS.items():
        model = strip(export(build))
        path = os.path.join(MOBILE, f"{name}.onnx")
        onnx.save(model, path)
        print(f"{path}: {os.path.getsize(path)} bytes, {len(model.graph.node)} nodes")


if __name__ == "__main__":
    main()
