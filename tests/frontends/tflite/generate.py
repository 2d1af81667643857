"""Writes the TFLite test fixtures beside this script: small models converted by TensorFlow.

Each case is a ``tf.Module`` with one ``tf.function``, converted with TensorFlow's TFLite
converter (float32, and an fp16-weight variant where noted) to ``<case>.tflite``, plus
``<case>.npz``: the inputs (seeded) and LiteRT's outputs for them, the oracle the tests compare
offload with. TensorFlow is not a dependency of offload's tests; run this script in a separate
environment::

    python3 -m venv /work/tfvenv && /work/tfvenv/bin/pip install tensorflow-cpu ai-edge-litert
    /work/tfvenv/bin/python tests/frontends/tflite/generate.py

The ``.npz`` holds ``input_names`` / ``output_names`` (tensor names of the main subgraph) and
arrays ``input_<i>`` / ``output_<i>`` in that order.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

HERE = Path(__file__).resolve().parent
MAX_BYTES = 100_000  # fixtures are committed: keep each one small


def _const(rng, *shape, scale=0.5):
    return tf.constant(rng.standard_normal(shape).astype(np.float32) * scale)


class Cnn(tf.Module):
    """A mobile-style CNN on a batch of 16×16×3 images: every layout-sensitive op, SAME padding
    with its extra row/column at the end (16 → 8 with stride 2 and a 3×3 window), depthwise with
    a channel multiplier, dilation, fused activations, a residual add, a global mean and a dense
    head."""

    def __init__(self):
        rng = np.random.default_rng(1)
        self.w1, self.b1 = _const(rng, 3, 3, 3, 8), _const(rng, 8)
        self.dw, self.db = _const(rng, 3, 3, 8, 2), _const(rng, 16)
        self.w2, self.b2 = _const(rng, 3, 3, 16, 16, scale=0.2), _const(rng, 16)
        self.w3, self.b3 = _const(rng, 1, 1, 16, 16, scale=0.3), _const(rng, 16)
        self.fc, self.fb = _const(rng, 16, 10), _const(rng, 10)

    @tf.function(input_signature=[tf.TensorSpec([None, 16, 16, 3], tf.float32, name="image")])
    def __call__(self, x):
        x = tf.nn.relu6(tf.nn.conv2d(x, self.w1, 2, "SAME") + self.b1)  # 8×8, pads (0, 1)
        x = tf.nn.depthwise_conv2d(x, self.dw, [1, 1, 1, 1], "SAME") + self.db
        x = x * tf.nn.relu6(x + 3.0) / 6.0  # hard swish
        x = tf.nn.conv2d(x, self.w2, 1, "SAME", dilations=2) + self.b2
        x = tf.nn.max_pool2d(x, 3, 2, "SAME")  # 4×4, pads (0, 1)
        y = tf.tanh(tf.nn.conv2d(x, self.w3, 1, "VALID") + self.b3)
        x = tf.nn.relu(x + y)
        x = tf.nn.avg_pool2d(x, 3, 1, "SAME")  # the border averages fewer elements
        x = tf.nn.leaky_relu(x, 0.2)
        x = tf.reduce_mean(x, axis=[1, 2])
        return tf.nn.softmax(tf.matmul(x, self.fc) + self.fb)


class Shapes(tf.Module):
    """Shape and elementwise ops on rank-3 tensors: batch matmul (plain and adjoint), transpose,
    reshape, concat, pad, strided slices (negative stride, shrink axis), squeeze, a keep-dims mean,
    broadcast sub/mul/div, sigmoid, tanh and softmax."""

    def __init__(self):
        rng = np.random.default_rng(2)
        self.k = _const(rng, 1, 5, 8)
        self.bias = _const(rng, 8)
        self.scale = _const(rng, 6, 1)

    @tf.function(
        input_signature=[
            tf.TensorSpec([2, 6, 8], tf.float32, name="x"),
            tf.TensorSpec([2, 8, 5], tf.float32, name="y"),
        ]
    )
    def __call__(self, x, y):
        a = tf.matmul(x, y)  # [2, 6, 5]
        b = tf.matmul(a, tf.tile(self.k, [2, 1, 1]) + x[:, :5, :], transpose_b=False)  # [2, 6, 8]
        c = tf.matmul(x, b, transpose_b=True)  # [2, 6, 6]
        t = tf.transpose(b, [0, 2, 1])  # [2, 8, 6]
        r = tf.reshape(t, [2, 6, 8])
        cat = tf.concat([r * self.scale, (x - self.bias) / 3.0], axis=2)  # [2, 6, 16]
        p = tf.pad(cat, [[0, 0], [1, 2], [0, 0]])  # [2, 9, 16]
        s1 = p[:, 1:-1:2, ::-1]  # [2, 4, 16]
        s2 = p[:, 3, 2:10]  # [2, 8]
        sq = tf.squeeze(tf.reshape(s2, [2, 1, 8]), axis=1)
        m = tf.reduce_mean(s1, axis=1, keepdims=True)  # [2, 1, 16]
        out1 = tf.nn.softmax(tf.sigmoid(s1) * tf.tanh(m))
        out2 = tf.concat([sq, tf.reshape(c, [2, 36])], axis=1)
        return {"probs": out1, "mixed": out2}


class Elementwise(tf.Module):
    """Standalone activations, unary math, binary ops between two inputs, reductions, and the
    slicing family (slice, gather, split, pack, squeeze)."""

    @tf.function(
        input_signature=[
            tf.TensorSpec([3, 4, 5], tf.float32, name="a"),
            tf.TensorSpec([3, 1, 5], tf.float32, name="b"),
        ]
    )
    def __call__(self, a, b):
        d = a / (b * b + 1.0)
        e = tf.maximum(tf.nn.relu(a), tf.nn.relu6(b * 4.0)) + tf.minimum(a, b)
        f = tf.exp(-tf.abs(d)) + tf.math.rsqrt(b * b + 0.5) + tf.math.squared_difference(a, b)
        g = tf.squeeze(b, axis=1) + tf.reduce_sum(e, axis=1) - tf.reduce_max(f, axis=1)
        h = tf.slice(f, [1, 0, 2], [2, -1, 3])  # [2, 4, 3]
        i = tf.gather(a, [3, 0, 0], axis=1)  # [3, 3, 5]
        p, q = tf.split(i, [2, 1], axis=1)
        r = tf.stack([p[:, 0], q[:, 0]], axis=1)  # [3, 2, 5]
        return {
            "g": tf.nn.log_softmax(g),
            "h": tf.nn.elu(h),
            "r": tf.sigmoid(r) * tf.expand_dims(g, 1),
        }


CASES = {
    "cnn_f32": (Cnn, "float32", {"image": (2, 16, 16, 3)}),
    "cnn_f16w": (Cnn, "float16", {"image": (2, 16, 16, 3)}),
    "shapes_f32": (Shapes, "float32", {"x": (2, 6, 8), "y": (2, 8, 5)}),
    "elementwise_f32": (Elementwise, "float32", {"a": (3, 4, 5), "b": (3, 1, 5)}),
}


def convert(module: tf.Module, weights: str) -> bytes:
    fn = module.__call__.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn], module)
    if weights == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


def oracle(model: bytes, shapes: dict, seed: int) -> dict:
    """Seeded inputs and LiteRT's outputs for them, keyed as the tests read them.

    ``shapes`` maps each input's TensorSpec name to the shape to run it at; the converter names
    the tensor ``serving_default_<name>:0``.
    """
    interp = Interpreter(model_content=model)
    inputs = interp.get_input_details()
    shapes = [shapes[d["name"].removeprefix("serving_default_").removesuffix(":0")] for d in inputs]
    for detail, shape in zip(inputs, shapes):
        if tuple(detail["shape"]) != shape:
            interp.resize_tensor_input(detail["index"], shape)
    interp.allocate_tensors()
    rng = np.random.default_rng(seed)
    arrays = {"input_names": np.array([d["name"] for d in inputs])}
    for i, (detail, shape) in enumerate(zip(inputs, shapes)):
        arrays[f"input_{i}"] = rng.standard_normal(shape).astype(np.float32)
        interp.set_tensor(detail["index"], arrays[f"input_{i}"])
    interp.invoke()
    outputs = interp.get_output_details()
    arrays["output_names"] = np.array([d["name"] for d in outputs])
    for i, detail in enumerate(outputs):
        arrays[f"output_{i}"] = interp.get_tensor(detail["index"])
    return arrays


def main() -> None:
    for seed, (name, (cls, weights, shapes)) in enumerate(CASES.items()):
        model = convert(cls(), weights)
        if len(model) > MAX_BYTES:
            sys.exit(f"{name}: {len(model)} bytes, over the {MAX_BYTES}-byte limit for a committed fixture")
        (HERE / f"{name}.tflite").write_bytes(model)
        np.savez(HERE / f"{name}.npz", **oracle(model, shapes, seed))
        print(f"{name}.tflite: {len(model)} bytes")


if __name__ == "__main__":
    main()
