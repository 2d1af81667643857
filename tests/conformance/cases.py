"""ONNX's backend test cases, loaded from the installed onnx package (the independent reference).

Node cases are generated in memory by ``collect_testcases()``; model cases come from the
package's on-disk data folders; the light models' inputs come from onnx's own runner.
"""

from __future__ import annotations

import glob
import json
import os
import warnings
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import onnx
from onnx import numpy_helper

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
MODEL_KINDS = ("simple", "pytorch-converted", "pytorch-operator")


@dataclass
class Case:
    name: str
    kind: str  # node | simple | pytorch-converted | pytorch-operator | light
    model: bytes
    model_dir: str | None
    data_sets: list  # [(inputs: dict name -> value, outputs: list of values)]
    rtol: float
    atol: float


def to_value(item):
    """A test-data item as offload's runtime holds it: ndarray, list (sequence) or None."""
    if isinstance(item, onnx.TensorProto):
        return numpy_helper.to_array(item)
    if isinstance(item, onnx.SequenceProto):
        return [to_value(x) for x in numpy_helper.to_list(item)]
    if isinstance(item, onnx.OptionalProto):
        return to_value(numpy_helper.to_optional(item))
    if isinstance(item, (list, tuple)):
        return [to_value(x) for x in item]
    if item is None:
        return None
    return np.asarray(item)


def _input_names(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def _load_pb(path: str, type_proto: onnx.TypeProto):
    with open(path, "rb") as f:
        data = f.read()
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        proto = onnx.SequenceProto()
    elif kind == "optional_type":
        proto = onnx.OptionalProto()
    else:
        proto = onnx.TensorProto()
    proto.ParseFromString(data)
    return to_value(proto)


@lru_cache(maxsize=1)
def node_cases() -> list[Case]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = collect_testcases()
    out = []
    for c in raw:
        names = _input_names(c.model)
        sets = [
            (dict(zip(names, (to_value(x) for x in ins))), [to_value(x) for x in outs])
            for ins, outs in c.data_sets
        ]
        out.append(Case(c.name, "node", c.model.SerializeToString(), None, sets, c.rtol, c.atol))
    return out


def _dir_case(kind: str, model_dir: str) -> Case:
    model = onnx.load(os.path.join(model_dir, "model.onnx"), load_external_data=False)
    sets = []
    for ds in sorted(glob.glob(os.path.join(model_dir, "test_data_set*"))):
        n_in = len(glob.glob(os.path.join(ds, "input_*.pb")))
        n_out = len(glob.glob(os.path.join(ds, "output_*.pb")))
        ins = [_load_pb(os.path.join(ds, f"input_{i}.pb"), model.graph.input[i].type) for i in range(n_in)]
        outs = [
            _load_pb(os.path.join(ds, f"output_{i}.pb"), model.graph.output[i].type) for i in range(n_out)
        ]
        graph_inputs = [i.name for i in model.graph.input][:n_in]
        sets.append((dict(zip(graph_inputs, ins)), outs))
    with open(os.path.join(model_dir, "model.onnx"), "rb") as f:
        data = f.read()
    return Case(os.path.basename(model_dir), kind, data, model_dir, sets, 1e-3, 1e-7)


@lru_cache(maxsize=1)
def model_cases() -> list[Case]:
    out = []
    for kind in MODEL_KINDS:
        for d in sorted(glob.glob(os.path.join(DATA, kind, "test_*"))):
            if os.path.isfile(os.path.join(d, "model.onnx")):
                out.append(_dir_case(kind, d))
    return out


@lru_cache(maxsize=1)
def light_cases() -> list[Case]:
    from onnx.backend.test.runner import Runner

    tolerances = {}
    for path in glob.glob(os.path.join(DATA, "real", "*", "data.json")):
        with open(path) as f:
            info = json.load(f)
        tolerances[os.path.basename(info.get("url", ""))] = (info.get("rtol", 1e-3), info.get("atol", 1e-7))
    out = []
    for path in sorted(glob.glob(os.path.join(DATA, "light", "*.onnx"))):
        model = onnx.load(path)
        inits = {t.name for t in model.graph.initializer}
        stem = os.path.basename(path)[: -len(".onnx")]
        inputs = {
            i.name: Runner.generate_dummy_data(i, seed=0, name=stem, random=False)
            for i in model.graph.input
            if i.name not in inits
        }
        outputs = [
            _load_pb(os.path.join(DATA, "light", f"{stem}_output_{k}.pb"), o.type)
            for k, o in enumerate(model.graph.output)
        ]
        rtol, atol = tolerances.get(os.path.basename(path), (1e-3, 1e-7))
        with open(path, "rb") as f:
            data = f.read()
        out.append(Case(stem, "light", data, os.path.dirname(path), [(inputs, outputs)], rtol, atol))
    return out


# An expanded case (``*_expanded``: a function op's body as a graph of plain ops) prescribes a
# rounding to float16 after every op of the body, while ONNX's expected data come from its
# reference implementation of the whole op, which rounds at other points. Where both end in a
# softmax and a MatMul with its probabilities (attention), each side's output errs by at most
# half an ulp for its last rounding plus half an ulp carried from rounding the probabilities
# (weights of a convex combination): the two are within 2 ulps of float16, which the cases'
# rtol = 1e-3 does not allow at the bottom of a binade (2 ulps there are 2^-9 = 1.95e-3 of the
# value). Float16 outputs of expanded attention cases pass within that bound or the case's.
EXPANDED_FP16_ULPS = 2


def assert_similar(ref, out, rtol: float, atol: float, where: str = "", fp16_ulps: int = 0) -> None:
    """The comparison of onnx's backend runner: shapes, dtypes, then values within tolerance;
    ``fp16_ulps``: float16 values within that many ulps of the expected one pass too."""
    if isinstance(ref, list):
        assert isinstance(out, list), f"{where}: expected a sequence, got {type(out).__name__}"
        assert len(out) == len(ref), f"{where}: sequence of {len(out)} items, expected {len(ref)}"
        for k, (r, o) in enumerate(zip(ref, out)):
            assert_similar(r, o, rtol, atol, f"{where}[{k}]", fp16_ulps)
        return
    if ref is None:
        assert out is None, f"{where}: expected an empty optional"
        return
    assert isinstance(out, np.ndarray) or np.isscalar(out), f"{where}: got {type(out).__name__}"
    out = np.asarray(out)
    assert out.shape == ref.shape, f"{where}: shape {out.shape}, expected {ref.shape}"
    if ref.dtype == object:
        np.testing.assert_array_equal(out.astype(object), ref, err_msg=where)
        return
    assert out.dtype == ref.dtype, f"{where}: dtype {out.dtype}, expected {ref.dtype}"
    if out.dtype.name == "bfloat16":
        rtol = max(rtol, 2**-6)
    if out.dtype.kind not in "fciub":  # ml_dtypes narrow floats: compare as float32
        out, ref = out.astype(np.float32), ref.astype(np.float32)
    if fp16_ulps and out.dtype == np.float16:
        near = np.abs(out.astype(np.float64) - ref) <= fp16_ulps * np.spacing(np.abs(ref)).astype(np.float64)
        out = np.where(near, ref, out)  # within the ulps: compared as equal below
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, err_msg=where)
