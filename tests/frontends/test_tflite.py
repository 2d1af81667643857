"""TFLite import: converter-made fixtures against LiteRT, on the CPU executor and on opencl.

The fixtures in tests/frontends/tflite/ were written by generate.py there (TensorFlow's converter);
each ``.npz`` holds seeded inputs and the outputs LiteRT computed for them. When ai_edge_litert
is installed, LiteRT is also run live on the same file and inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import offload
from offload.errors import ModelFormatError, OffloadError, UnsupportedOpError
from offload.frontends.tflite import RULES, same_pads
from offload.ir import TensorType
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator
from tests.delegates.opencl_support import needs_opencl
from tests.frontends.tflite.build import binary_model

HERE = Path(__file__).resolve().parent / "tflite"
FIXTURES = sorted(p.stem for p in HERE.glob("*.tflite"))
FLOAT32 = [name for name in FIXTURES if name.endswith("_f32")]
QUANTIZED = (np.int8, np.uint8, np.int16)

try:
    from ai_edge_litert.interpreter import Interpreter
except ImportError:  # the stored oracles still check every fixture
    Interpreter = None
needs_litert = pytest.mark.skipif(Interpreter is None, reason="ai_edge_litert (LiteRT) is not installed")


def oracle(name: str) -> tuple[dict, dict]:
    with np.load(HERE / f"{name}.npz") as z:
        feeds = {str(n): z[f"input_{i}"] for i, n in enumerate(z["input_names"])}
        want = {str(n): z[f"output_{i}"] for i, n in enumerate(z["output_names"])}
    return feeds, want


def assert_close(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        if w.dtype.kind in "biu":
            assert got[name].dtype == w.dtype, name
            if w.dtype in QUANTIZED:  # quantized values: within one unit of LiteRT's
                diff = np.abs(got[name].astype(np.int64) - w)
                assert diff.max(initial=0) <= 1, (name, diff.max())
            else:  # indices, shapes, masks: exact
                np.testing.assert_array_equal(got[name], w, err_msg=name)
            continue
        # 1e-4 relative to the output's scale: softmax outputs hold values near 0
        scale = max(float(np.abs(w).max()), 1e-6)
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-4 * scale, err_msg=name)


def litert(model: bytes | Path, feeds: dict) -> dict:
    interp = (
        Interpreter(model_path=str(model)) if isinstance(model, Path) else Interpreter(model_content=model)
    )
    for d in interp.get_input_details():
        if tuple(d["shape"]) != feeds[d["name"]].shape:
            interp.resize_tensor_input(d["index"], feeds[d["name"]].shape)
    interp.allocate_tensors()
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], feeds[d["name"]])
    interp.invoke()
    return {d["name"]: interp.get_tensor(d["index"]) for d in interp.get_output_details()}


def test_fixtures_exist():
    assert {"cnn_f32", "cnn_f16w", "shapes_f32", "elementwise_f32"} <= set(FIXTURES)
    for name in FIXTURES:
        assert (HERE / f"{name}.tflite").stat().st_size < 100_000


@pytest.mark.parametrize("name", FIXTURES)
def test_matches_the_stored_litert_outputs(name):
    program = offload.load(HERE / f"{name}.tflite")
    feeds, want = oracle(name)
    assert [v.name for v in program.main.inputs] == sorted(feeds, key=list(feeds).index)
    assert_close(offload.evaluate(program, feeds), want)


def random_like(rng, array: np.ndarray, quant: tuple = (1.0, 0)) -> np.ndarray:
    """Seeded standard-normal inputs like ``array``'s; for an int8 input, quantized by its
    (scale, zero point), the distribution the model was calibrated on."""
    x = rng.standard_normal(array.shape).astype(np.float32)
    if array.dtype == np.float32:
        return x
    info = np.iinfo(array.dtype)
    scale, zero = quant
    return np.clip(np.round(x / scale) + zero, info.min, info.max).astype(array.dtype)


def input_quantization(model: Path) -> dict:
    return {d["name"]: d["quantization"] for d in Interpreter(model_path=str(model)).get_input_details()}


@needs_litert
@pytest.mark.parametrize("name", FIXTURES)
def test_matches_litert_live(name):
    feeds, _ = oracle(name)
    rng = np.random.default_rng(7)
    quant = input_quantization(HERE / f"{name}.tflite")
    feeds = {k: random_like(rng, v, quant[k]) for k, v in feeds.items()}
    got = offload.evaluate(offload.load(HERE / f"{name}.tflite"), feeds)
    assert_close(got, litert(HERE / f"{name}.tflite", feeds))


def test_dynamic_batch_is_symbolic_and_runs_at_other_sizes():
    program = offload.load(HERE / "cnn_f32.tflite")
    (image,) = program.main.inputs
    assert isinstance(image.type, TensorType) and isinstance(image.type.shape[0], str)
    assert image.type.shape[1:] == (16, 16, 3)
    feeds, want = oracle("cnn_f32")
    one = {k: v[:1] for k, v in feeds.items()}  # the batch rows are independent
    assert_close(offload.evaluate(program, one), {k: v[:1] for k, v in want.items()})


def test_layout_is_explicit_and_same_padding_asymmetric():
    body = offload.load(HERE / "cnn_f32.tflite").main.body
    convs = [op for op in body.operations if op.op_type == "Conv"]
    assert len(convs) == 4 and convs[1].attributes["group"] == 8  # the depthwise conv
    first = convs[0]
    assert first.inputs[0].producer.op_type == "Transpose"
    assert first.inputs[0].producer.attributes["perm"] == [0, 3, 1, 2]
    assert first.inputs[1].const_value.shape == (8, 3, 3, 3)  # OIHW
    # 16 rows, a 3-row window, stride 2: TFLite pads one row, after the last
    assert first.attributes["pads"] == [0, 0, 1, 1]
    assert {op.op_type for op in body.operations} >= {"Clip", "HardSwish", "MaxPool", "AveragePool", "Gemm"}


def test_fp16_weights_stay_fp16_behind_a_cast():
    body = offload.load(HERE / "cnn_f16w.tflite").main.body
    casts = [op for op in body.operations if op.op_type == "Cast"]
    assert casts and all(op.inputs[0].const_value.dtype == np.float16 for op in casts)


def test_same_pads_follow_tflite():
    # out = ceil(in / stride); total = (out - 1)·stride + (k - 1)·d + 1 - in; the odd one after
    assert same_pads(16, 3, 2, 1) == (0, 1)
    assert same_pads(15, 3, 2, 1) == (1, 1)
    assert same_pads(8, 3, 1, 2) == (2, 2)
    assert same_pads(4, 2, 1, 1) == (0, 1)
    assert same_pads(5, 1, 2, 1) == (0, 0)


@pytest.mark.parametrize("external", [False, True], ids=["inline", "after_flatbuffer"])
def test_constant_buffers_inline_and_after_the_flatbuffer(external):
    const = np.arange(6, dtype=np.float32) - 2.5
    data = binary_model(BuiltinOperator.MUL, const, external=external)
    program = offload.load(data)
    x = np.linspace(-1, 1, 6, dtype=np.float32)
    got = offload.evaluate(program, {"x": x})["y"]
    want = litert(data, {"x": x})["y"] if Interpreter is not None else x * const
    np.testing.assert_allclose(got, want, rtol=1e-6)
    (c,) = program.main.body.constants.values()
    if external:  # read in place from the file's bytes
        assert not c.const_value.flags.owndata and not c.const_value.flags.writeable


def test_external_buffer_past_the_end_is_a_format_error():
    data = binary_model(BuiltinOperator.MUL, np.ones(6, np.float32), external=True)
    with pytest.raises(ModelFormatError, match=r"buffers\[1\].*past the end"):
        offload.load(data[:-4])


def test_unsupported_operator_is_named_with_its_index():
    data = binary_model(BuiltinOperator.ATAN2, np.ones(6, np.float32), external=False)
    with pytest.raises(UnsupportedOpError, match=r"operator 0 \(ATAN2, version 1\)"):
        offload.load(data)
    assert "ATAN2" not in RULES


def test_not_a_tflite_file():
    with pytest.raises(ModelFormatError, match="TFL3"):
        from offload.frontends.tflite import import_tflite

        import_tflite(b"\x00" * 16, "x.tflite")


@pytest.mark.parametrize("name", ["shapes_f32", "cnn_f16w"])
def test_truncations_and_byte_flips_end_in_offload_errors(name):
    """A damaged file either still imports or raises an OffloadError; nothing else escapes."""
    data = (HERE / f"{name}.tflite").read_bytes()
    rng = np.random.default_rng(3)
    cuts = sorted({0, 4, 7, 8, 12, len(data) - 1, *rng.integers(8, len(data), 60).tolist()})
    mutants = [data[:n] for n in cuts]
    for _ in range(250):
        flipped = bytearray(data)
        for at in rng.integers(0, len(data), 1 + int(rng.integers(0, 3))):
            flipped[at] ^= 1 << int(rng.integers(0, 8))
        mutants.append(bytes(flipped))
    errors = 0
    for i, mutant in enumerate(mutants):
        try:
            offload.load(mutant)
        except OffloadError:
            errors += 1
        except Exception as e:  # pragma: no cover - the failure this test exists for
            pytest.fail(f"mutant {i} raised {type(e).__name__}: {e}")
    assert errors >= len(cuts)  # every truncation at least is refused


@pytest.mark.parametrize("name", FLOAT32)
def test_float_fixtures_run_delegated_on_opencl(name, tmp_path):
    from tests.delegates.opencl_support import needs_opencl, run_on_opencl

    if needs_opencl.args[0]:
        pytest.skip(needs_opencl.kwargs["reason"])
    program = offload.load(HERE / f"{name}.tflite")
    feeds, want = oracle(name)
    lowered, got = run_on_opencl(program, feeds, tmp_path)
    assert_close(got, want)
    inside = sum(
        sum(1 for _ in op.attributes["fallback"].walk())
        for op in lowered.main.body.operations
        if op.op_type == "Delegate"
    )
    outside = sum(1 for op in lowered.main.body.walk() if op.op_type != "Delegate") - inside
    assert inside / (inside + outside) >= 0.95, (inside, outside)


def test_schema_parser_agrees_with_flatc():
    """The reader's field slots, parsed from tflite.fbs, are the ones flatc's code reads."""
    import re

    from offload.frontends.tflite_reader import schema

    generated = Path(__file__).resolve().parents[2] / "schemas" / "generated" / "tflite"
    accessor = re.compile(
        r"def (\w+)\(self\):\n\s+o = flatbuffers\.number_types\.UOffsetTFlags\.py_type\(self\._tab\.Offset\((\d+)\)\)"
    )
    checked = 0
    for table, fields in schema().tables.items():
        offsets = {m[0]: int(m[1]) for m in accessor.findall((generated / f"{table}.py").read_text())}
        for f in fields.values():
            camel = "".join(part[:1].upper() + part[1:] for part in f.name.split("_"))
            if f.type in schema().unions:
                assert offsets.get(camel + "Type") == f.voffset and offsets.get(camel) == f.voffset + 2, f
                checked += 1
            elif camel in offsets:
                assert offsets[camel] == f.voffset, (table, f)
                checked += 1
    assert checked > 200  # of the 313 fields; the rest are flatc accessors of another shape


def test_int8_model_runs_integer_ops_on_raw_int8_weights():
    program = offload.load(HERE / "cnn_int8.tflite")
    (image,) = program.main.inputs
    (probs,) = program.main.outputs
    for v in (image, probs):
        assert v.type.dtype.name == "INT8" and v.type.quant is not None and v.type.quant.scale.size == 1
    with np.load(HERE / "cnn_int8.npz") as z:
        assert z["output_0"].dtype == np.int8 and len(np.unique(z["output_0"])) > 5  # not saturated
    body = program.main.body
    convs = [op for op in body.operations if op.op_type == "Conv"]
    assert len(convs) == 4 and all(op.domain == "offload.tflite" for op in convs)
    assert all(op.inputs[1].const_value.dtype == np.int8 for op in convs)  # the file's weights
    assert len(convs[0].attributes["w_scales"]) == 8  # per output channel
    integer = {op.op_type for op in body.operations if op.domain == "offload.tflite"}
    assert integer >= {"Conv", "FullyConnected", "Add", "AveragePool", "Mean", "Lookup"}
    lookups = {op.attributes["function"] for op in body.operations if op.op_type == "Lookup"}
    assert lookups == {"HardSwish", "Tanh", "LeakyRelu"}


FULL_INTEGER = [name for name in FIXTURES if name.endswith("_int8")]


@needs_litert
@pytest.mark.parametrize("name", FULL_INTEGER)
def test_full_integer_models_match_litert_within_one_unit_on_40_inputs(name):
    """LiteRT's default CPU path (XNNPACK for the operators it takes, builtin kernels for the
    rest) against the integer ops, over 40 seeded in-distribution inputs."""
    program = offload.load(HERE / f"{name}.tflite")
    stored, _ = oracle(name)
    quant = input_quantization(HERE / f"{name}.tflite")
    rng = np.random.default_rng(12)
    worst, equal, total = 0, 0, 0
    for _ in range(40):
        feeds = {k: random_like(rng, v, quant[k]) for k, v in stored.items()}
        got = offload.evaluate(program, feeds)
        for k, w in litert(HERE / f"{name}.tflite", feeds).items():
            diff = np.abs(got[k].astype(np.int64) - w)
            worst, equal, total = (
                max(worst, int(diff.max())),
                equal + int((diff == 0).sum()),
                total + diff.size,
            )
    assert worst <= 1, worst
    assert equal / total > 0.999, equal / total


def test_dynamic_range_model_quantizes_hybrid_inputs_like_litert():
    body = offload.load(HERE / "cnn_dr8.tflite").main.body
    # one conv has int8 weights: LiteRT quantizes its input per batch row; so does the import
    assert sum(op.op_type == "Round" for op in body.operations) == 2  # zero point and values
    convs = [op for op in body.operations if op.op_type == "Conv"]
    assert all(op.inputs[1].const_value.dtype == np.float32 for op in convs)  # weights dequantized


def _signature_oracle() -> dict[str, tuple[dict, dict]]:
    calls: dict[str, tuple[dict, dict]] = {}
    with np.load(HERE / "signatures" / "codec.npz") as z:
        for key in z.files:
            sig, rest = key.split("/")
            kind, name = rest.split(":")
            calls.setdefault(sig, ({}, {}))[kind == "out"][name] = z[key]
    return calls


@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_several_signatures_are_several_methods(backend, tmp_path):
    """Each signature def becomes a method named by its key (in the file's order), its inputs and
    outputs named as LiteRT's signature runner names them; each matches LiteRT's outputs (stored
    by generate.py)."""
    program = offload.load(HERE / "signatures" / "codec.tflite")
    assert sorted(program.functions) == ["decode", "encode"]
    assert [v.name for v in program.functions["decode"].inputs] == ["code"]
    assert sorted(v.name for v in program.functions["decode"].outputs) == ["norm", "recon"]
    lowered = program if backend is None else offload.to_backend(program, backend)
    if backend:
        assert all(
            any(op.op_type == "Delegate" for op in fn.body.operations) for fn in lowered.functions.values()
        )
    offload.save(lowered, tmp_path / "m.pte")
    module = offload.runtime.load(str(tmp_path / "m.pte"))
    assert module.method_names == list(program.functions)
    for sig, (feeds, want) in _signature_oracle().items():
        assert_close(module.method(sig).run(feeds), want)


@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_resource_variables_are_state_across_runs(backend, tmp_path):
    """VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE with CALL_ONCE's initial values: four runs of
    one loaded module give LiteRT's outputs of four calls on one interpreter (stored by
    generate.py); after reset_state the sequence starts again from the initial values."""
    with np.load(HERE / "variables" / "accumulator.npz") as z:
        calls = [({"serving_default_x:0": z[f"in:x@{k}"]}, z[f"out:mean@{k}"]) for k in range(4)]
    program = offload.load(HERE / "variables" / "accumulator.tflite")
    assert program.main.states == ["Variable", "Variable_1", "variables_initialized"]
    lowered = program if backend is None else offload.to_backend(program, backend)
    offload.save(lowered, tmp_path / "m.pte")
    module = offload.runtime.load(str(tmp_path / "m.pte"))
    (name,) = [p.name for p in module.method("forward").outputs]
    for _ in range(2):
        for feeds, want in calls:
            np.testing.assert_allclose(module.run(feeds)[name], want, rtol=1e-5, atol=1e-6)
        module.reset_state()


# Bounds on the difference (output units) from LiteRT of the int8 models run as float on a GPU
# backend (docs/tflite.md "Quantization"; measured over 300 seeded inputs: 18, 12 and 4). LiteRT
# rounds every inner tensor, the float path only the outputs: cnn_int8's logits stay within 2 of
# LiteRT's steps (0.1), which its softmax turns into up to 18 steps of 1/256; elementwise_int8's
# int8 DIV saturates a numerator one unit from its zero point. The float32 models are 41 and 847
# units away.
AS_FLOAT_UNITS = {"cnn_int8": 20, "elementwise_int8": 14, "mobile_int8": 6}


@needs_opencl
@needs_litert
@pytest.mark.parametrize("name", FULL_INTEGER)
def test_full_integer_models_run_as_float_on_opencl(name, tmp_path):
    from tests.delegates.opencl_support import run_on_opencl

    program = offload.load(HERE / f"{name}.tflite")
    stored, _ = oracle(name)
    quant = input_quantization(HERE / f"{name}.tflite")
    rng = np.random.default_rng(12)
    feeds = [{k: random_like(rng, v, quant[k]) for k, v in stored.items()} for _ in range(8)]
    lowered, _ = run_on_opencl(program, feeds[0], tmp_path)
    inside = sum(
        sum(1 for _ in op.attributes["fallback"].walk())
        for op in lowered.main.body.operations
        if op.op_type == "Delegate"
    )
    outside = sum(1 for op in lowered.main.body.walk() if op.op_type != "Delegate") - inside
    assert inside / (inside + outside) >= 0.95, (inside, outside)
    assert not any(op.domain == "offload.tflite" for op in lowered.main.body.walk())
    module = offload.runtime.load(str(tmp_path / "m.pte"))
    worst, close, total = 0, 0, 0
    for f in feeds:
        got, want = module.run(f), litert(HERE / f"{name}.tflite", f)
        for k, w in want.items():
            assert got[k].dtype == w.dtype == np.int8
            diff = np.abs(got[k].astype(np.int64) - w)
            worst, close, total = (
                max(worst, int(diff.max())),
                close + int((diff <= 1).sum()),
                total + diff.size,
            )
    assert worst <= AS_FLOAT_UNITS[name], worst
    assert close / total >= 0.85, close / total  # most outputs within one step


def test_a_non_positive_int8_scale_is_a_format_error_naming_the_operator():
    data = (HERE / "cnn_int8.tflite").read_bytes()
    scale = np.float32(0.03365812450647354).tobytes()  # the image's scale, stored once
    assert data.count(scale) == 1
    with pytest.raises(ModelFormatError, match=r"operator 0 \(CONV_2D\).*scale -1\.0"):
        offload.load(data.replace(scale, np.float32(-1.0).tobytes()))


@pytest.mark.parametrize("name", FULL_INTEGER)
def test_full_integer_models_saved_as_pte_keep_their_integer_ops(name, tmp_path):
    """The .pte of the CPU path carries the offload.tflite ops and their attributes exactly."""
    offload.save(offload.load(HERE / f"{name}.tflite"), tmp_path / "m.pte")
    module = offload.runtime.load(str(tmp_path / "m.pte"))
    feeds, want = oracle(name)
    got = module.run(feeds)
    for k, w in want.items():
        np.testing.assert_array_equal(got[k], w, err_msg=k)
