"""Shared by the device-array tests (opencl, cuda, the CPU's inputs): a model with a delegated
and a deniable part, its input, and a DLPack exporter of host memory."""

from __future__ import annotations

import numpy as np
from onnx import helper

import offload
from offload import runtime
from offload.partitioner import Partitioner

from .opencl_support import model

N = 16 * 32 * 4  # bytes of one (16, 32) float32 tensor: the input of ``mlp``


class Exporter:
    """Only the DLPack protocol of an array (what a torch CPU tensor or a JAX array offers)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def mlp():
    """y = relu(x @ w); s = sigmoid(x), on the CPU where Sigmoid is denied (then x has a CPU reader)."""
    w = np.random.default_rng(5).standard_normal((32, 8)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["y"]),
        helper.make_node("Sigmoid", ["x"], ["s"]),
    ]
    return model(nodes, [("x", [16, 32])], ["y", "s"], [("w", w)])


def delegated(program, backend: str, deny=()):
    """``program`` lowered to ``backend`` (``deny``: ops kept on the CPU) and loaded; its one
    delegate must run on the backend."""
    low = offload.to_backend(program, Partitioner(backend, deny_ops=list(deny)), passes="none")
    module = runtime.load(offload.save(low))
    assert [d.runs_on for d in module.method("forward").delegates] == ["backend"]
    return module


def x(seed=0):
    return np.random.default_rng(seed).standard_normal((16, 32)).astype(np.float32)
