"""Writes the TFLite test fixtures beside this script: small models converted by TensorFlow.

Each case is a ``tf.Module`` with one ``tf.function`` (or a Keras model: ``keras3_lstm``),
converted with TensorFlow's TFLite converter (float32, an fp16-weight, int8 or sparse-weight
variant where noted) to ``<case>.tflite``, plus
``<case>.npz``: the inputs (seeded) and LiteRT's outputs for them, the oracle the tests compare
offload with. TensorFlow is not a dependency of offload's tests; run this script in a separate
environment::

    python3 -m venv /work/tfvenv && /work/tfvenv/bin/pip install tensorflow-cpu ai-edge-litert
    /work/tfvenv/bin/python tests/frontends/tflite/generate.py [case ...]

The ``.npz`` holds ``input_names`` / ``output_names`` (tensor names of the main subgraph) and
arrays ``input_<i>`` / ``output_<i>`` in that order. ``signatures`` (run alone with that name)
writes signatures/codec.tflite, a model of two signatures, and its oracle (see ``signatures()``);
``variables`` writes variables/accumulator.tflite, a model with resource variables, and LiteRT's
outputs over a sequence of calls; ``lstm`` writes lstm/keras_lstm.tflite (needs ``tf-keras``: the
converter fuses Keras 2's LSTM only) and LiteRT's outputs over a sequence of calls.
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


class Image(tf.Module):
    """NHWC image ops beyond the CNN: transpose conv (SAME with its odd padding, VALID, fused
    bias), every RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR coordinate mode, depth ↔ space,
    L2 normalisation, both MIRROR_PAD modes, and GELU exact and approximate."""

    def __init__(self):
        rng = np.random.default_rng(4)
        self.tw1, self.tb1 = _const(rng, 3, 3, 6, 4), _const(rng, 6)
        self.tw2 = _const(rng, 2, 2, 4, 4)

    @tf.function(input_signature=[tf.TensorSpec([1, 5, 6, 4], tf.float32, name="x")])
    def __call__(self, x):
        t1 = tf.nn.conv2d_transpose(x, self.tw1, [1, 10, 12, 6], 2, "SAME") + self.tb1
        t2 = tf.nn.conv2d_transpose(x, self.tw2, [1, 10, 12, 4], 2, "VALID")
        v1 = tf.compat.v1
        bilinear = [
            v1.image.resize_bilinear(x, [9, 7]),
            v1.image.resize_bilinear(x, [9, 7], align_corners=True),
            v1.image.resize_bilinear(x, [9, 7], half_pixel_centers=True),
            v1.image.resize_bilinear(x, [3, 4], half_pixel_centers=True),
        ]
        nearest = [
            v1.image.resize_nearest_neighbor(x, [9, 7]),
            v1.image.resize_nearest_neighbor(x, [9, 7], align_corners=True),
            v1.image.resize_nearest_neighbor(x, [9, 7], half_pixel_centers=True),
            v1.image.resize_nearest_neighbor(x, [3, 4], half_pixel_centers=True),
        ]
        t3 = tf.nn.conv2d_transpose(x, self.tw2, [1, 11, 13, 4], 2, "VALID")  # one more than it fills
        d2s = tf.nn.depth_to_space(tf.concat([x, x * 2.0], -1), 2)  # [1, 10, 12, 2]
        s2d = tf.nn.space_to_depth(t2, 2)  # [1, 5, 6, 16]
        l2 = tf.math.l2_normalize(s2d, axis=-1)
        reflect = tf.pad(x, [[0, 0], [2, 1], [1, 2], [0, 0]], mode="REFLECT")
        symmetric = tf.pad(x, [[0, 0], [1, 2], [2, 0], [0, 0]], mode="SYMMETRIC")
        return {
            "transposed": tf.nn.relu(t1) + tf.concat([t2, t2[..., :2]], axis=-1),
            "transposed_wider": t3,
            "bilinear": tf.concat([tf.reshape(b, [-1]) for b in bilinear], 0),
            "nearest": tf.concat([tf.reshape(n, [-1]) for n in nearest], 0),
            "space": d2s * tf.reduce_sum(l2, axis=-1, keepdims=True)[:, :, :, :1][:, :1, :1],
            "l2": l2,
            "pads": tf.concat([tf.reshape(reflect, [-1]), tf.reshape(symmetric, [-1])], 0),
            "gelu": tf.nn.gelu(x) + tf.nn.gelu(x * 2.0, approximate=True),
        }


class Math(tf.Module):
    """Unary and binary math, comparisons and logic, select, cast, arg max / min, top-k,
    cumulative sums, tiling, broadcasting and gather_nd."""

    @tf.function(
        input_signature=[
            tf.TensorSpec([3, 8], tf.float32, name="a"),
            tf.TensorSpec([3, 8], tf.float32, name="b"),
        ]
    )
    def __call__(self, a, b):
        a3 = a * 3.0
        unary = tf.square(a) + tf.floor(a3) - tf.math.ceil(b * 3.0) + tf.sin(a) * tf.cos(b)
        power = tf.pow(tf.abs(a) + 0.5, b)
        floors = tf.math.floordiv(a3, b + 4.0) + tf.math.floormod(a3, b + 4.0)
        less, greater = tf.less(a, b), tf.greater(a, 0.0)
        logic = tf.logical_or(tf.logical_and(less, greater), tf.logical_not(tf.less_equal(b, 0.5)))
        compare = tf.math.logical_xor(tf.equal(tf.floor(a3), tf.floor(b * 3.0)), tf.greater_equal(a, -0.5))
        compare = tf.logical_or(compare, tf.not_equal(tf.floor(a3), 0.0))
        selected = tf.where(logic, a, b * 2.0)
        as_int = tf.cast(a3 * 2.0, tf.int32)
        top, top_index = tf.math.top_k(a, 3)
        index = tf.constant([[2, 1], [0, 7], [1, 3], [2, 2]])
        return {
            "unary": unary,
            "power": power,
            "floors": floors,
            "logic": logic,
            "compare": compare,
            "selected": selected,
            "as_int": as_int,
            "as_float": tf.cast(as_int, tf.float32) * 0.5,
            "argmax": tf.argmax(a, axis=1),
            "argmin": tf.argmin(b, axis=0, output_type=tf.int32),
            "top": top,
            "top_index": top_index,
            "cumsum": tf.cumsum(a, axis=1) + tf.cumsum(b, axis=1, exclusive=True, reverse=True),
            "tiled": tf.tile(a[:, :3], [2, 3]),
            "broadcast": tf.broadcast_to(tf.reduce_sum(b, axis=0), [2, 3, 8]),
            "gathered": tf.gather_nd(a, index) + tf.gather_nd(b, index[:, :1])[:, 0],
        }


class Mobile(tf.Module):
    """Operators of int8 mobile networks beyond the CNN: zero padding, a concatenation of two
    branches, bilinear resizing, standalone RELU6 and LOGISTIC, a squeeze-and-excite gate (keep-dims
    mean, dense layers on 4-D, a broadcast multiply), a subtraction and a fully connected head."""

    def __init__(self):
        rng = np.random.default_rng(6)
        self.w1, self.b1 = _const(rng, 3, 3, 4, 8), _const(rng, 8)
        self.w2 = _const(rng, 1, 1, 4, 8)
        self.dw = _const(rng, 3, 3, 16, 1)
        self.se1, self.se2 = _const(rng, 16, 4), _const(rng, 4, 16)
        self.fc, self.fb = _const(rng, 16, 6), _const(rng, 6)

    @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 4], tf.float32, name="x")])
    def __call__(self, x):
        p = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])  # zeros: the zero point in int8
        a = tf.nn.relu(tf.nn.conv2d(p, self.w1, 1, "VALID") + self.b1)
        b = tf.nn.relu6(tf.nn.conv2d(x, self.w2, 1, "SAME"))
        c = tf.concat([a, b * 2.0], axis=-1)  # [N, 8, 8, 16]
        d = tf.nn.depthwise_conv2d(c, self.dw, [1, 2, 2, 1], "SAME")  # 4×4
        se = tf.reduce_mean(d, axis=[1, 2], keepdims=True)
        se = tf.sigmoid(
            tf.einsum("nhwc,cd->nhwd", tf.nn.relu(tf.einsum("nhwc,cd->nhwd", se, self.se1)), self.se2)
        )
        e = tf.compat.v1.image.resize_bilinear(d * se, [8, 8], half_pixel_centers=True)
        f = tf.nn.relu6(e - c)
        g = tf.reduce_mean(f, axis=[1, 2])
        return {"logits": tf.matmul(g, self.fc) + self.fb, "gate": tf.sigmoid(g)}


class Dynamic(tf.Module):
    """Ops whose results depend on a shape known only when run: shape, range, fill, zeros_like."""

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        n = tf.shape(x)[0]
        steps = tf.cast(tf.range(0, n * 2, 2), tf.float32)  # RANGE with a limit read from SHAPE
        filled = tf.fill(tf.stack([n, 3]), 1.5)
        return {
            "shape": tf.shape(x),
            "steps": steps,
            "rows": x + tf.expand_dims(steps, 1) + tf.zeros_like(x),
            "filled": filled * tf.reduce_sum(x),
        }


class Cond(tf.Module):
    """tf.cond on a data-dependent predicate: the converter writes IF with two branch subgraphs,
    each taking the input."""

    @tf.function(input_signature=[tf.TensorSpec([2, 3], tf.float32, name="x")])
    def __call__(self, x):
        y = tf.cond(tf.reduce_sum(x) > 0.0, lambda: tf.tanh(x) * 2.0, lambda: tf.nn.relu(x) - 1.0)
        return {"y": y + 0.5}


class WhileRnn(tf.Module):
    """A small RNN written as tf.while_loop over time steps (i < T, i += 1): the converter writes
    WHILE with a condition subgraph (LESS) and a body subgraph that indexes xs[i]."""

    def __init__(self):
        rng = np.random.default_rng(6)
        self.w, self.u, self.b = _const(rng, 4, 4), _const(rng, 3, 4), _const(rng, 4)

    @tf.function(input_signature=[tf.TensorSpec([5, 2, 3], tf.float32, name="xs")])
    def __call__(self, xs):
        def step(i, h):
            return i + 1, tf.tanh(tf.matmul(h, self.w) + tf.matmul(xs[i], self.u) + self.b)

        _, h = tf.while_loop(lambda i, h: i < tf.shape(xs)[0], step, [tf.constant(0), tf.zeros([2, 4])])
        return {"h": h}


class WhileUntil(tf.Module):
    """A loop whose end depends on the data (grow x until its sum passes 10, at most 20 steps):
    WHILE with a condition subgraph that reduces, so no trip count is known before the loop."""

    @tf.function(input_signature=[tf.TensorSpec([2, 3], tf.float32, name="x")])
    def __call__(self, x):
        def grow(i, x):
            return i + 1, x * 1.5 + 0.25

        i, y = tf.while_loop(
            lambda i, x: tf.reduce_sum(x) < 10.0, grow, [tf.constant(0), x], maximum_iterations=20
        )
        return {"y": y, "steps": i}


class Keras3Lstm:
    """A Keras 3 LSTM layer (return_sequences), converted from the Keras model: Keras 3 has no
    fused-LSTM annotation, so the converter writes its loop as WHILE over time (two counters
    against constants) whose body updates the output sequence by slicing and concatenating at
    the counter."""

    def __init__(self):
        tf.keras.utils.set_random_seed(8)
        x = tf.keras.Input((6, 3), batch_size=2, name="x")
        self.keras_model = tf.keras.Model(x, tf.keras.layers.LSTM(5, return_sequences=True)(x))


class Pruned(tf.Module):
    """A dense layer and a convolution whose weights are 80 % zeros (as magnitude pruning leaves
    them): with EXPERIMENTAL_SPARSITY the converter stores them sparse (CSR with uint8 indices)
    behind DENSIFY operators."""

    def __init__(self):
        rng = np.random.default_rng(10)
        w = rng.standard_normal((16, 8)).astype(np.float32)
        w[rng.random(w.shape) < 0.8] = 0
        k = rng.standard_normal((3, 3, 4, 8)).astype(np.float32)
        k[rng.random(k.shape) < 0.8] = 0
        self.w, self.k = tf.constant(w), tf.constant(k)

    @tf.function(
        input_signature=[
            tf.TensorSpec([2, 16], tf.float32, name="x"),
            tf.TensorSpec([1, 6, 6, 4], tf.float32, name="image"),
        ]
    )
    def __call__(self, x, image):
        return {"dense": tf.nn.relu(tf.matmul(x, self.w)), "conv": tf.nn.conv2d(image, self.k, 1, "SAME")}


CASES = {
    "cnn_f32": (Cnn, "float32", {"image": (2, 16, 16, 3)}),
    "cnn_f16w": (Cnn, "float16", {"image": (2, 16, 16, 3)}),
    "shapes_f32": (Shapes, "float32", {"x": (2, 6, 8), "y": (2, 8, 5)}),
    "elementwise_f32": (Elementwise, "float32", {"a": (3, 4, 5), "b": (3, 1, 5)}),
    "cnn_dr8": (Cnn, "dynamic_int8", {"image": (2, 16, 16, 3)}),
    "cnn_int8": (Cnn, "int8", {"image": (2, 16, 16, 3)}),
    "elementwise_int8": (Elementwise, "int8", {"a": (3, 4, 5), "b": (3, 1, 5)}),
    "image_ops": (Image, "float32", {"x": (1, 5, 6, 4)}),
    "math_ops": (Math, "float32", {"a": (3, 8), "b": (3, 8)}),
    "dynamic_ops": (Dynamic, "float32", {"x": (5, 4)}),
    "cond_f32": (Cond, "float32", {"x": (2, 3)}),
    "while_rnn_f32": (WhileRnn, "float32", {"xs": (5, 2, 3)}),
    "while_until": (WhileUntil, "float32", {"x": (2, 3)}),
    "keras3_lstm": (Keras3Lstm, "float32", {"x": (2, 6, 3)}),
    "sparse_f32": (Pruned, "sparse", {"x": (2, 16), "image": (1, 6, 6, 4)}),
    "mobile_int8": (Mobile, "int8", {"x": (2, 8, 8, 4)}),
}


def convert(module: tf.Module, weights: str) -> bytes:
    if hasattr(module, "keras_model"):
        return tf.lite.TFLiteConverter.from_keras_model(module.keras_model).convert()
    fn = module.__call__.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn], module)
    if weights == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif weights == "sparse":  # weights of many zeros stored sparse, DENSIFY before use
        converter.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
    elif weights == "dynamic_int8":  # int8 weights, float activations
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    elif weights == "int8":  # int8 weights and activations, int8 inputs and outputs
        specs = fn.structured_input_signature[0]
        rng = np.random.default_rng(11)

        def samples():  # by name: the calibrator's input order is not the signature's
            for _ in range(32):
                yield {
                    s.name: rng.standard_normal([d or 1 for d in s.shape]).astype(np.float32) for s in specs
                }

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = samples
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
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
        x = rng.standard_normal(shape).astype(np.float32)
        if detail["dtype"] == np.int8:  # int8 I/O: the float sample quantized as the model says
            scale, zero = detail["quantization"]
            x = np.clip(np.round(x / scale) + zero, -128, 127).astype(np.int8)
        arrays[f"input_{i}"] = x
        interp.set_tensor(detail["index"], arrays[f"input_{i}"])
    interp.invoke()
    outputs = interp.get_output_details()
    arrays["output_names"] = np.array([d["name"] for d in outputs])
    for i, detail in enumerate(outputs):
        arrays[f"output_{i}"] = interp.get_tensor(detail["index"])
    return arrays


class Codec(tf.Module):
    """Two signatures over one set of weights: ``encode`` (x → code) and ``decode`` (code → recon,
    norm); converted from a SavedModel with both signature keys."""

    def __init__(self):
        rng = np.random.default_rng(5)
        self.w1, self.b1, self.w2 = (
            _const(rng, 4, 3, scale=1.0),
            _const(rng, 3, scale=1.0),
            _const(rng, 3, 4, scale=1.0),
        )

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def encode(self, x):
        return {"code": tf.nn.relu(tf.matmul(x, self.w1) + self.b1)}

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="code")])
    def decode(self, code):
        return {"recon": tf.tanh(tf.matmul(code, self.w2)), "norm": tf.reduce_sum(code * code, axis=1)}


def signatures() -> None:
    """signatures/codec.tflite and codec.npz: LiteRT's signature runners on seeded inputs, keyed
    ``<signature>/in:<name>`` and ``<signature>/out:<name>``."""
    import tempfile

    module = Codec()
    with tempfile.TemporaryDirectory() as saved:
        tf.saved_model.save(module, saved, signatures={"encode": module.encode, "decode": module.decode})
        model = tf.lite.TFLiteConverter.from_saved_model(saved, signature_keys=["encode", "decode"]).convert()
    folder = HERE / "signatures"
    folder.mkdir(exist_ok=True)
    (folder / "codec.tflite").write_bytes(model)
    interp = Interpreter(model_content=model)
    rng = np.random.default_rng(21)
    arrays = {}
    for key, width in (("encode", 4), ("decode", 3)):
        name = "x" if key == "encode" else "code"
        x = rng.standard_normal((2, width)).astype(np.float32)
        arrays[f"{key}/in:{name}"] = x
        for out, value in interp.get_signature_runner(key)(**{name: x}).items():
            arrays[f"{key}/out:{out}"] = value
    np.savez(folder / "codec.npz", **arrays)
    print(f"signatures/codec.tflite: {len(model)} bytes")


class Accumulator(tf.Module):
    """Two resource variables updated by every call (a decayed running total and a call count,
    initial values 0.5 and 0): the converter writes VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE
    and a CALL_ONCE subgraph assigning the initial values."""

    def __init__(self):
        self.total = tf.Variable(np.full((2, 3), 0.5, np.float32))
        self.count = tf.Variable(np.zeros((), np.float32))

    @tf.function(input_signature=[tf.TensorSpec([2, 3], tf.float32, name="x")])
    def __call__(self, x):
        self.total.assign(self.total * 0.9 + x)
        self.count.assign_add(1.0)
        return {"mean": self.total / self.count}


def variables() -> None:
    """variables/accumulator.tflite and .npz: LiteRT's outputs over four calls on one interpreter
    (``in:x@k`` / ``out:<name>@k``), the state carrying from call to call."""
    module = Accumulator()
    fn = module.__call__.get_concrete_function()
    model = tf.lite.TFLiteConverter.from_concrete_functions([fn], module).convert()
    folder = HERE / "variables"
    folder.mkdir(exist_ok=True)
    (folder / "accumulator.tflite").write_bytes(model)
    interp = Interpreter(model_content=model)
    interp.allocate_tensors()
    runner = interp.get_signature_runner()
    rng = np.random.default_rng(31)
    arrays = {}
    for k in range(4):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        arrays[f"in:x@{k}"] = x
        for out, value in runner(x=x).items():
            arrays[f"out:{out}@{k}"] = value
    np.savez(folder / "accumulator.npz", **arrays)
    print(f"variables/accumulator.tflite: {len(model)} bytes")


def lstm() -> None:
    """lstm/keras_lstm.tflite and .npz: a Keras 2 (tf_keras) LSTM layer, return_sequences, which
    the converter fuses into UNIDIRECTIONAL_SEQUENCE_LSTM (cell clip 10), and keras_bilstm, the
    same in a Bidirectional wrapper (two of them around REVERSE_V2, not the bidirectional
    operator); each LSTM's output and cell
    states are variable tensors LiteRT keeps from call to call, so the oracle is LiteRT's outputs
    over three calls on one interpreter (``in:x@k`` / ``out:y@k``), the last on larger inputs."""
    import tf_keras  # pip install tf-keras (the Keras 2 that TensorFlow's converter fuses)

    folder = HERE / "lstm"
    folder.mkdir(exist_ok=True)
    for seed, (name, wrap) in enumerate(
        [("keras_lstm", lambda layer: layer), ("keras_bilstm", tf_keras.layers.Bidirectional)]
    ):
        tf_keras.utils.set_random_seed(9 + seed)
        x = tf_keras.Input((6, 3), batch_size=2, name="x")
        keras_model = tf_keras.Model(x, wrap(tf_keras.layers.LSTM(5, return_sequences=True))(x))
        model = tf.lite.TFLiteConverter.from_keras_model(keras_model).convert()
        (folder / f"{name}.tflite").write_bytes(model)
        interp = Interpreter(model_content=model)
        interp.allocate_tensors()
        (inp,), (out,) = interp.get_input_details(), interp.get_output_details()
        rng = np.random.default_rng(41 + seed)
        arrays = {}
        for k in range(3):
            arrays[f"in:x@{k}"] = rng.standard_normal((2, 6, 3)).astype(np.float32) * (1 + 2 * (k == 2))
            interp.set_tensor(inp["index"], arrays[f"in:x@{k}"])
            interp.invoke()
            arrays[f"out:y@{k}"] = interp.get_tensor(out["index"])
        np.savez(folder / f"{name}.npz", **arrays)
        print(f"lstm/{name}.tflite: {len(model)} bytes")


def main() -> None:
    """Writes every case, or the cases named on the command line."""
    if sys.argv[1:] in ([], ["signatures"]):
        signatures()
        if sys.argv[1:]:
            return
    if sys.argv[1:] in ([], ["lstm"]):
        lstm()
        if sys.argv[1:]:
            return
    if sys.argv[1:] in ([], ["variables"]):
        variables()
        if sys.argv[1:]:
            return
    chosen = sys.argv[1:] or list(CASES)
    for seed, (name, (cls, weights, shapes)) in enumerate(CASES.items()):
        if name not in chosen:
            continue
        model = convert(cls(), weights)
        if len(model) > MAX_BYTES:
            sys.exit(f"{name}: {len(model)} bytes, over the {MAX_BYTES}-byte limit for a committed fixture")
        (HERE / f"{name}.tflite").write_bytes(model)
        np.savez(HERE / f"{name}.npz", **oracle(model, shapes, seed))
        print(f"{name}.tflite: {len(model)} bytes")


if __name__ == "__main__":
    main()
