"""What several of the CPU executor's test modules share: a check run on threads at once, the
conv path a plan takes with or without the compiled loops, a depthwise conv's float64 sums
(onnxruntime has no float64 or float16 Conv on the CPU), and a method checked against
onnxruntime and offload.evaluate."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def concurrently(work: Callable[[int], None], count: int = 2) -> None:
    """``work(k)`` for k in range(count), each on its own thread, all at once; an exception (a
    failed assertion) in any of them is raised here."""
    with ThreadPoolExecutor(count) as pool:
        list(pool.map(work, range(count)))


def plan_path(path: str, loops: str) -> str:
    """The path a depthwise plan takes under ``loops`` (the ``conv_loops`` fixture's value) where
    the numpy paths would take ``path``."""
    return "direct" if loops == "compiled" and path in ("rows", "last") else path


def depthwise_sums(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1)) -> np.ndarray:
    """The depthwise conv of x (N, C, H, W) with w (C, 1, KH, KW) as float64 sums over the taps of
    the zero-padded input (pads: top, left, bottom, right), plus b where given."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    (sh, sw), (dh, dw), (kh, kw) = strides, dilations, w.shape[2:]
    oh = (xp.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (xp.shape[3] - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(kh):
        for j in range(kw):
            window = xp[
                :, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw
            ]
            y += window * w[None, :, 0, i, j, None, None].astype(np.float64)
    return y if b is None else y + b[None, :, None, None]


def checked_method(data: bytes, feeds_list: list[dict], rtol: float, atol: float):
    """The forward method of the ONNX model ``data`` after two runs on each of ``feeds_list``:
    each within rtol / atol of onnxruntime and bit for bit offload.evaluate's (the kernels)."""
    import onnxruntime as ort

    import offload

    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        (want,) = session.run(None, feeds)
        for _ in range(2):  # the second run reuses the bound calls
            got = method.run(feeds)["y"]
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
            np.testing.assert_array_equal(got, offload.evaluate(program, feeds)["y"])
    return method
