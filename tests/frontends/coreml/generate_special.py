"""Make the Core ML fixtures of special/ with coremltools: a stateful program and an image input.

accumulator: an iOS18 MIL-builder program with one fp16 state ``acc`` (2×3): each call adds its
input ``x`` to the state and returns 2·(acc + x) and acc·x (acc as the call found it); a second
read_state after the update would be merged with the first by coremltools' passes, so the
program makes none. The oracle in special/accumulator.npz is numpy's: the calls' inputs
``in:x@k`` and outputs ``out:<name>@k`` for k = 0, 1, 2 from a zero state (Core ML's initial
state), then ``reset`` and call 0's input again (``@reset``).

image_input: a torch Conv2d + ReLU converted with an ``ImageType`` input (BGR, scale 1/255,
per-channel bias), fp32 compute; the oracle is torch's output on (x·scale + bias) for pixel
values x in 0…255, which is what Core ML feeds its program (the program applies scale and bias).

    /tmp/ctvenv/bin/python tests/frontends/coreml/generate_special.py   (coremltools 9.0, torch 2.14)
"""

from __future__ import annotations

import os
import shutil
import warnings

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "special")


@mb.program(
    input_specs=[mb.StateTensorSpec((2, 3), dtype=types.fp16), mb.TensorSpec((2, 3), dtype=types.fp16)],
    opset_version=ct.target.iOS18,
)
def accumulator(acc, x):
    before = mb.read_state(input=acc)
    total = mb.add(x=before, y=x)
    mb.coreml_update_state(state=acc, value=total)
    return mb.mul(x=total, y=np.float16(2.0), name="doubled"), mb.mul(x=before, y=x, name="scaled")


def main() -> None:
    os.makedirs(HERE, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ct.convert(accumulator, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18)
    path = os.path.join(HERE, "accumulator.mlpackage")
    shutil.rmtree(path, ignore_errors=True)
    model.save(path)
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((2, 3)).astype(np.float16) for _ in range(3)]
    acc = np.zeros((2, 3), np.float16)
    arrays = {}
    for k, x in enumerate(xs):
        total = (acc + x).astype(np.float16)
        arrays[f"in:x@{k}"] = x
        arrays[f"out:doubled@{k}"] = (total * np.float16(2)).astype(np.float16)
        arrays[f"out:scaled@{k}"] = (acc * x).astype(np.float16)
        acc = total
    arrays["in:x@reset"] = xs[0]
    arrays["out:doubled@reset"] = (xs[0] * np.float16(2)).astype(np.float16)
    arrays["out:scaled@reset"] = np.zeros((2, 3), np.float16)
    np.savez(os.path.join(HERE, "accumulator.npz"), **arrays)
    image_input()


def image_input() -> None:
    import torch

    torch.manual_seed(3)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    scale, bias = 1 / 255.0, [-0.5, -0.4, -0.3]
    pixels = np.random.default_rng(5).integers(0, 256, (1, 3, 8, 8)).astype(np.float32)
    traced = torch.jit.trace(module, torch.from_numpy(pixels))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ct.convert(
            traced,
            inputs=[
                ct.ImageType(
                    name="img", shape=pixels.shape, scale=scale, bias=bias, color_layout=ct.colorlayout.BGR
                )
            ],
            outputs=[ct.TensorType(name="features")],
            convert_to="mlprogram",
            compute_precision=ct.precision.FLOAT32,
        )
    path = os.path.join(HERE, "image_input.mlpackage")
    shutil.rmtree(path, ignore_errors=True)
    model.save(path)
    x = pixels * np.float32(scale) + np.asarray(bias, np.float32).reshape(1, 3, 1, 1)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.savez(os.path.join(HERE, "image_input.npz"), **{"in:img": pixels, "out:features": want})


if __name__ == "__main__":
    main()
