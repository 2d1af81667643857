"""LiteRT as the reference for hand-built models: run one, and compare offload's runs with it
(``evaluate`` and a ``.pte``'s run on the CPU, or opencl); build a one-operator model."""

from __future__ import annotations

import importlib

import numpy as np

import offload
from offload import runtime
from offload.schemas.generated.tflite.BuiltinOptions import BuiltinOptions
from tests.delegates.opencl_support import run_on_opencl
from tests.frontends.tflite.build import Graph, Op, T, build


def litert(data: bytes, feeds: dict) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=data)
    interp.allocate_tensors()
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], feeds[d["name"]])
    interp.invoke()
    return {d["name"]: interp.get_tensor(d["index"]) for d in interp.get_output_details()}


def check(data: bytes, feeds: dict, tmp_path, rtol=1e-6, atol=1e-6, backend=None, want=None) -> None:
    """offload on ``data`` against LiteRT (or ``want``, where LiteRT cannot run the model):
    evaluate and the .pte's run (CPU), or opencl."""
    want = litert(data, feeds) if want is None else want
    program = offload.load(data)
    if backend == "opencl":
        _, got = run_on_opencl(program, feeds, tmp_path)
        runs = [got]
    else:
        path = tmp_path / "m.pte"
        offload.save(program, path)
        runs = [offload.evaluate(program, feeds), runtime.load(str(path)).run(feeds)]
    for got in runs:
        assert sorted(got) == sorted(want)
        for name, w in want.items():
            assert got[name].shape == w.shape and got[name].dtype == w.dtype, (name, got[name].dtype, w.dtype)
            np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol, err_msg=name)


def options(table: str, union=BuiltinOptions, **fields) -> callable:
    """A builder of the ``table`` options (e.g. "UnpackOptions") with ``fields`` set (a numpy
    array for a vector field: float32, int64, uint8 or int32; a str for a string); ``union`` BuiltinOptions2 for the
    operators whose options sit in the second union."""
    module = importlib.import_module(f"offload.schemas.generated.tflite.{table}")

    def camel(field: str) -> str:
        return "".join(p[:1].upper() + p[1:] for p in field.split("_"))

    def write(b):
        values = {}
        for field, value in fields.items():
            if isinstance(value, np.ndarray):  # a vector: written before the table
                getattr(module, f"Start{camel(field)}Vector")(b, len(value))
                prepend = {
                    np.float32: b.PrependFloat32,
                    np.int64: b.PrependInt64,
                    np.uint8: b.PrependUint8,
                }.get(value.dtype.type, b.PrependInt32)
                for v in reversed(value.tolist()):
                    prepend(v)
                value = b.EndVector()
            elif isinstance(value, str):
                value = b.CreateString(value)
            values[field] = value
        module.Start(b)
        for field, value in values.items():
            getattr(module, f"Add{camel(field)}")(b, value)
        return getattr(union, table), module.End(b)

    return write


def one_op(code: int, inputs: list[T], outputs: list[T], opts=None, opts_2=None) -> bytes:
    """A model of one operator: its inputs without data are the model's inputs."""
    tensors = [*inputs, *outputs]
    graph_inputs = [i for i, t in enumerate(inputs) if t.data is None]
    outs = list(range(len(inputs), len(tensors)))
    return build(
        [
            Graph(
                tensors,
                [Op(code, list(range(len(inputs))), outs, opts, options_2=opts_2)],
                graph_inputs,
                outs,
            )
        ]
    )
