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
from offload.frontends.tflite_node import RULES, same_pads
from offload.ir import TensorType
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator
from tests.delegates.opencl_support import needs_opencl
from tests.frontends.tflite.build import binary_model

HERE = Path(__file__).resolve().parent / "tflite"
FIXTURES = sorted(p.stem for p in HERE.glob("*.tflite"))
# float models; keras3_lstm is Keras 3's LSTM, a WHILE loop writing its outputs row by row
# (delegated once optimize_tensor_operation::slices_concat_to_scatter makes the writes ScatterNDs)
FLOAT32 = [name for name in FIXTURES if name.endswith("_f32")] + ["keras3_lstm"]
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
    data = binary_model(BuiltinOperator.SKIP_GRAM, np.ones(6, np.float32), external=False)
    with pytest.raises(UnsupportedOpError, match=r"operator 0 \(SKIP_GRAM, version 1\)"):
        offload.load(data)
    assert "SKIP_GRAM" not in RULES


def test_not_a_tflite_file():
    with pytest.raises(ModelFormatError, match="TFL3"):
        from offload.frontends.tflite import import_tflite

        import_tflite(b"\x00" * 16, "x.tflite")


@pytest.mark.parametrize("name", ["shapes_f32", "cnn_f16w"])
def test_truncations_and_byte_flips_end_in_offload_errors(name):
    """A damaged file either still imports or raises an OffloadError; nothing else escapes."""
    _mutants_end_in_offload_errors((HERE / f"{name}.tflite").read_bytes())


def _mutants_end_in_offload_errors(data: bytes, flips: int = 250) -> None:
    rng = np.random.default_rng(3)
    cuts = sorted({0, 4, 7, 8, 12, len(data) - 1, *rng.integers(8, len(data), 60).tolist()})
    mutants = [data[:n] for n in cuts]
    for _ in range(flips):
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


def delegated_share(lowered) -> float:
    """The share of a lowered program's ops that run inside delegates."""
    inside = sum(
        sum(1 for _ in op.attributes["fallback"].walk())
        for op in lowered.main.body.operations
        if op.op_type == "Delegate"
    )
    outside = sum(1 for op in lowered.main.body.walk() if op.op_type != "Delegate") - inside
    return inside / (inside + outside)


@pytest.mark.parametrize("name", FLOAT32)
def test_float_fixtures_run_delegated_on_opencl(name, tmp_path):
    from tests.delegates.opencl_support import require_opencl, run_on_opencl

    require_opencl()
    program = offload.load(HERE / f"{name}.tflite")
    feeds, want = oracle(name)
    lowered, got = run_on_opencl(program, feeds, tmp_path, passes="default")  # what a user gets
    assert_close(got, want)
    assert delegated_share(lowered) >= 0.95


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


def patched(data: bytes, path: list, field: str, value: int, fmt: str = "<i") -> bytes:
    """``data`` with one scalar field rewritten in place; ``path`` leads from the model table to
    the table holding it (a field name, an index into a vector, or "options" for the union)."""
    import struct

    from offload.frontends.tflite_reader import Buffer

    table = Buffer(data, "x").root()
    for step in path:
        if step == "options":
            _, table = table.get("builtin_options")
        elif isinstance(step, int):
            table = table[step]
        else:
            table = table.get(step)
    at = table._slot(table.fields[field].voffset, struct.calcsize(fmt), field)
    assert at, f"{field} is not stored in the file"
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def test_if_and_while_become_if_and_a_counted_loop():
    """IF's branch subgraphs are If's branches; WHILE's condition i < T against a counter the body
    steps by one gives the Loop a trip count (and no condition), so it can run on the GPU."""
    body = offload.load(HERE / "cond_f32.tflite").main.body
    (if_op,) = [op for op in body.operations if op.op_type == "If"]
    assert [op.op_type for op in if_op.attributes["then_branch"].operations] == ["Tanh", "Mul"]
    body = offload.load(HERE / "while_rnn_f32.tflite").main.body
    (loop,) = [op for op in body.operations if op.op_type == "Loop"]
    trips, cond = loop.inputs[:2]
    assert trips is not None and trips.producer.op_type == "Max"
    assert cond.const_value is not None and bool(cond.const_value)
    assert "Less" not in {op.op_type for op in loop.attributes["body"].walk()}


def test_a_while_that_does_not_count_keeps_its_condition():
    """while_until: a loop until the values grow past a bound (a data-dependent condition, LiteRT's
    outputs checked by the fixture tests): the condition subgraph is inlined before the loop and
    after the body, and the Loop has no trip count."""
    body = offload.load(HERE / "while_until.tflite").main.body
    (loop,) = [op for op in body.operations if op.op_type == "Loop"]
    assert loop.inputs[0] is None and loop.inputs[1].producer is not None
    assert "ReduceSum" in {op.op_type for op in loop.attributes["body"].walk()}


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("cond_subgraph_index", 0, r"cycle \(0 → 0\)"),
        ("body_subgraph_index", 0, "takes 1 values for 4"),
        ("body_subgraph_index", 99, "outside the model's 3 subgraphs"),
        ("cond_subgraph_index", -1, "outside the model's 3 subgraphs"),
        ("cond_subgraph_index", 2, "takes|returns|condition"),
    ],
)
def test_bad_subgraph_calls_are_format_errors(field, value, match):
    data = patched(
        (HERE / "while_rnn_f32.tflite").read_bytes(),
        ["subgraphs", 0, "operators", 0, "options"],
        field,
        value,
    )
    with pytest.raises(ModelFormatError, match=match):
        offload.load(data)


def test_an_if_calling_its_own_subgraph_is_a_cycle():
    data = patched(
        (HERE / "cond_f32.tflite").read_bytes(),
        ["subgraphs", 0, "operators", 2, "options"],
        "then_subgraph_index",
        0,
    )
    with pytest.raises(ModelFormatError, match="cycle"):
        offload.load(data)


@pytest.mark.parametrize("name", ["while_rnn_f32", "cond_f32", "keras3_lstm", "sparse_f32"])
def test_subgraph_and_sparse_fixture_mutants_end_in_offload_errors(name):
    test_truncations_and_byte_flips_end_in_offload_errors(name)


def _lstm_module(program, backend, tmp_path):
    """The program (lowered to ``backend`` when given: its LSTM wholly delegated) saved, loaded:
    (module, the name of its one output)."""
    lowered = program if backend is None else offload.to_backend(program, backend)
    if backend:
        assert not {"Loop", "LSTM"} & {op.op_type for op in lowered.main.body.operations}
    offload.save(lowered, tmp_path / "m.pte")
    module = offload.runtime.load(str(tmp_path / "m.pte"))
    (name,) = [p.name for p in module.method("forward").outputs]
    return module, name


def _lstm_calls(name: str) -> list[tuple[dict, np.ndarray]]:
    with np.load(HERE / "lstm" / f"{name}.npz") as z:
        return [({"serving_default_x:0": z[f"in:x@{k}"]}, z[f"out:y@{k}"]) for k in range(3)]


def _without_cell_clip(data: bytes) -> bytes:
    """Every LSTM's cell clip (10, as the converter writes Keras's) set to 0."""
    from offload.frontends.tflite_reader import Buffer

    for n, op in enumerate(Buffer(data, "x").root().get("subgraphs")[0].items("operators")):
        _, options = op.get("builtin_options")
        if options is not None and "cell_clip" in options.fields:
            data = patched(data, ["subgraphs", 0, "operators", n, "options"], "cell_clip", 0, "<f")
    return data


@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
@pytest.mark.parametrize("clip", [True, False], ids=["cell_clip", "no_clip"])
@pytest.mark.parametrize("name", ["keras_lstm", "keras_bilstm"])
def test_keras_lstm_matches_litert_over_calls(name, backend, clip, tmp_path):
    """UNIDIRECTIONAL_SEQUENCE_LSTM: with its cell clip, a counted Loop over time steps; without,
    ONNX's LSTM. Its states are variable tensors LiteRT keeps between calls: three runs of one
    module give LiteRT's three outputs (stored, and live for the unclipped mutant), and again after
    reset_state. On opencl the whole LSTM is delegated. keras_bilstm: two LSTMs, one between
    REVERSE_V2s."""
    data = (HERE / "lstm" / f"{name}.tflite").read_bytes()
    calls = _lstm_calls(name)
    if not clip:
        if Interpreter is None:
            pytest.skip("the unclipped mutant's oracle is LiteRT live")
        data = _without_cell_clip(data)
        interp = Interpreter(model_content=data)
        interp.allocate_tensors()
        (inp,), (out,) = interp.get_input_details(), interp.get_output_details()
        live = []
        for feeds, _ in calls:
            interp.set_tensor(inp["index"], feeds[inp["name"]])
            interp.invoke()
            live.append((feeds, interp.get_tensor(out["index"])))
        calls = live
    program = offload.load(data)
    kinds = {op.op_type for op in program.main.body.operations}
    assert ("Loop" in kinds) == clip and ("LSTM" in kinds) == (not clip)
    assert ("Slice" in kinds) == (name == "keras_bilstm")
    lstms = 2 if name == "keras_bilstm" else 1  # keras_bilstm: forward and backward, around REVERSE_V2
    assert len(program.main.states) == 2 * lstms + 1  # output and cell states, variables_initialized
    module, name = _lstm_module(program, backend, tmp_path)
    for _ in range(2):
        for feeds, want in calls:
            assert_close({"y": module.run(feeds)[name]}, {"y": want})
        module.reset_state()


def test_lstm_options_offload_does_not_read_are_refused():
    data = (HERE / "lstm" / "keras_lstm.tflite").read_bytes()
    relu_n1 = patched(data, ["subgraphs", 0, "operators", 0, "options"], "fused_activation_function", 2, "<b")
    with pytest.raises(UnsupportedOpError, match="cell activation 2"):
        offload.load(relu_n1)
    negative = patched(data, ["subgraphs", 0, "operators", 0, "options"], "cell_clip", -1, "<f")
    with pytest.raises(ModelFormatError, match="negative clip"):
        offload.load(negative)


def test_lstm_mutants_end_in_offload_errors():
    test_truncations_and_byte_flips_end_in_offload_errors("lstm/keras_lstm")


@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_call_once_computing_its_initial_value(backend, tmp_path):
    """A CALL_ONCE subgraph computing the variable's initial value (exp(2c), built with the
    flatbuffers builder): four runs of a loaded module, then again after reset_state, give
    acc_k = exp(2c) + x_0 + … + x_k, and LiteRT's outputs of the same calls on one interpreter."""
    from tests.frontends.tflite.build import INIT_CONSTANT, computed_init_model

    data = computed_init_model()
    program = offload.load(data)
    assert program.main.states == ["acc", "variables_initialized"]
    lowered = program if backend is None else offload.to_backend(program, backend)
    offload.save(lowered, tmp_path / "m.pte")
    module = offload.runtime.load(str(tmp_path / "m.pte"))
    (name,) = [p.name for p in module.method("forward").outputs]
    rng = np.random.default_rng(12)
    xs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(4)]
    want = np.exp(2 * INIT_CONSTANT) + np.cumsum(xs, axis=0)
    if Interpreter is not None:
        interp = Interpreter(model_content=data)
        interp.allocate_tensors()
        (inp,), (out,) = interp.get_input_details(), interp.get_output_details()
        live = []
        for x in xs:
            interp.set_tensor(inp["index"], x)
            interp.invoke()
            live.append(interp.get_tensor(out["index"]))
        np.testing.assert_allclose(live, want, rtol=1e-5)
        want = np.array(live)
    for _ in range(2):
        for x, w in zip(xs, want):
            np.testing.assert_allclose(module.run({"x": x})[name], w, rtol=1e-5, atol=1e-6)
        module.reset_state()


@pytest.mark.parametrize("index, match", [(0, r"cycle \(0 → 0\)"), (7, "outside the model's 2 subgraphs")])
def test_call_once_of_a_bad_subgraph_is_a_format_error(index, match):
    from tests.frontends.tflite.build import computed_init_model

    with pytest.raises(ModelFormatError, match=match):
        offload.load(computed_init_model(init_index=index))


def _scaled_softplus_model() -> bytes:
    import struct

    from tests.frontends.tflite.build import custom_model

    return custom_model("ScaledSoftplus", struct.pack("<f", 1.5))


def _softplus_reference(x: np.ndarray) -> np.ndarray:
    return np.log1p(np.exp(1.5 * x.astype(np.float64))).astype(np.float32)


def test_custom_operator_without_a_rule_is_named():
    with pytest.raises(UnsupportedOpError, match=r"CUSTOM 'ScaledSoftplus'.*register_custom_op"):
        offload.load(_scaled_softplus_model())


@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_custom_operator_with_a_registered_rule(backend, tmp_path):
    """A rule reading the custom options (a float scale) and writing IR ops: the program saves,
    loads and runs with no rule registered any more, and on opencl the ops are delegated."""
    import struct

    from offload.frontends.tflite import register_custom_op
    from offload.frontends.tflite_custom import unregister_custom_op

    def scaled_softplus(node):
        (scale,) = struct.unpack("<f", node.custom_options)
        return node.op("Softplus", [node.one("Mul", [node.inputs[0], node.scalar(scale)])])

    register_custom_op("ScaledSoftplus", scaled_softplus)
    try:
        program = offload.load(_scaled_softplus_model())
    finally:
        unregister_custom_op("ScaledSoftplus")
    x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    lowered = program if backend is None else offload.to_backend(program, backend)
    if backend:
        assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    offload.save(lowered, tmp_path / "m.pte")
    got = offload.runtime.load(str(tmp_path / "m.pte")).run({"x": x})["y"]
    np.testing.assert_allclose(got, _softplus_reference(x), rtol=1e-5)


def test_custom_operator_as_a_numpy_kernel_survives_save_and_load(tmp_path):
    """A rule emitting one op of the user's domain, run by a kernel registered with the CPU
    executor: the .pte stores the op by domain and name, and the loading process (this one) runs
    it with the registered kernel."""
    import struct

    from offload.frontends.tflite import register_custom_op
    from offload.frontends.tflite_custom import unregister_custom_op
    from offload.ir import register
    from offload.ir.registry import _REGISTRY, parse_schema_line
    from offload.runtime.kernels import KERNELS, kernel

    def as_kernel(node):
        (scale,) = struct.unpack("<f", node.custom_options)
        return node.op("ScaledSoftplus", [node.inputs[0]], {"scale": scale}, domain="com.example")

    @kernel("ScaledSoftplus", domain="com.example")
    def scaled_softplus(ctx, x, scale=None):
        return np.log1p(np.exp(scale * x)).astype(x.dtype)

    # the schema lays out the op's inputs and attributes in the .pte; its inference types y
    schema = register(parse_schema_line("com.example", "ScaledSoftplus(x) -> y | scale: float = 1.0 @1"))
    schema.infer = lambda op, attrs: [op.inputs[0].type]
    register_custom_op("ScaledSoftplus", as_kernel)
    try:
        program = offload.load(_scaled_softplus_model())
        assert [op.qualified_type for op in program.main.body.operations] == ["com.example::ScaledSoftplus"]
        x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
        np.testing.assert_allclose(
            offload.evaluate(program, {"x": x})["y"], _softplus_reference(x), rtol=1e-5
        )
        offload.save(program, tmp_path / "m.pte")
        got = offload.runtime.load(str(tmp_path / "m.pte")).run({"x": x})["y"]
        np.testing.assert_allclose(got, _softplus_reference(x), rtol=1e-5)
    finally:
        unregister_custom_op("ScaledSoftplus")
        KERNELS.pop(("com.example", "ScaledSoftplus"), None)
        _REGISTRY.pop(("com.example", "ScaledSoftplus"), None)


def _pruned(shape=(4, 6)) -> np.ndarray:
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    w[:, 2:4] = 0
    w[1] = 0
    return w


SPARSE_FORMS = {  # (blocks, traversal order, formats, index type)
    "csr": ({}, [0, 1], [0, 1], "int32"),
    "csr_uint16_column_major": ({}, [1, 0], [0, 1], "uint16"),
    "both_sparse": ({}, [0, 1], [1, 1], "uint8"),
    "blocks_1x2": ({1: 2}, [0, 1, 2], [0, 1, 0], "uint8"),
    "blocks_2x2": ({0: 2, 1: 2}, [0, 1, 2, 3], [0, 1, 0, 0], "int32"),
}


@pytest.mark.parametrize("form", SPARSE_FORMS)
def test_sparse_constants_densify_like_litert(form):
    """Sparse constants in each layout of TFLite's format (built here by an encoder written from
    the schema): x + DENSIFY(w) equals x + w, and LiteRT's output for the same file."""
    from tests.frontends.tflite.build import Sparse, densify_model

    w = _pruned()
    blocks, order, formats, index_type = SPARSE_FORMS[form]
    sparse = Sparse(w, blocks, order, formats, index_type)
    assert sparse.values.size < w.size
    data = densify_model(sparse)
    program = offload.load(data)
    (c,) = program.main.body.constants.values()
    np.testing.assert_array_equal(c.const_value, w)
    x = np.random.default_rng(1).standard_normal(w.shape).astype(np.float32)
    got = offload.evaluate(program, {"x": x})["y"]
    np.testing.assert_array_equal(got, x + w)
    if Interpreter is not None:
        np.testing.assert_array_equal(got, litert(data, {"x": x})["y"])


def _bad_sparse(change):
    from tests.frontends.tflite.build import Sparse

    sparse = Sparse(_pruned(), {1: 2}, [0, 1, 2], [0, 1, 0])
    change(sparse)
    return sparse


def _set(name, value):
    return lambda s: setattr(s, name, value)


def _edit(field, level, at, value):
    def change(s):
        getattr(s, field)[level][at] = value

    return change


@pytest.mark.parametrize(
    "change, match",
    [
        (_set("order", [0, 0, 2]), "not a permutation"),
        (_set("order", [0, 1]), "not a permutation"),
        (_set("block_map", [5]), "block map"),
        (_set("formats", [0, 1, 1]), "block dimension 2 is not DENSE"),
        (_set("formats", [0, 7, 0]), "format 7 is neither DENSE nor SPARSE_CSR"),
        (_edit("indices", 1, 0, 99), "an index outside dimension 1"),
        (_edit("segments", 1, 2, 0), "segments decrease"),
        (_edit("segments", 1, 2, 1000), "segments decrease or run past"),
        (_edit("segments", 1, 1, -5), "segments decrease"),
        (_set("values", np.ones(3, np.float32)), "describes 12 values, the buffer holds 3"),
    ],
)
def test_bad_sparsity_metadata_is_a_format_error(change, match):
    from tests.frontends.tflite.build import densify_model

    with pytest.raises(ModelFormatError, match=match):
        offload.load(densify_model(_bad_sparse(change)))


def test_block_size_must_divide_its_dimension():
    from tests.frontends.tflite.build import Sparse, densify_model

    sparse = Sparse(_pruned((4, 6)), {1: 2}, [0, 1, 2], [0, 1, 0])
    sparse.dense = np.zeros((4, 7), np.float32)  # the tensor's declared shape: 7 columns
    with pytest.raises(ModelFormatError, match="block size 2 does not divide dimension 1 of size 7"):
        offload.load(densify_model(sparse))


def test_nested_ifs_run_like_litert():
    """Three IFs, each calling the next subgraph from both branches (built here): one If inside
    another, and the innermost computes x + x."""
    from tests.frontends.tflite.build import if_chain_model

    data = if_chain_model(3)
    program = offload.load(data)
    assert sum(op.op_type == "If" for op in program.main.body.walk()) == 2 + 4 + 1  # 1 + 2 + 4
    feeds = {"c": np.array(True), "x": np.array([1.5, -2.0], np.float32)}
    got = offload.evaluate(program, feeds)["y"]
    np.testing.assert_array_equal(got, [3.0, -4.0])
    if Interpreter is not None:
        np.testing.assert_array_equal(got, litert(data, feeds)["y"])


@pytest.mark.parametrize(
    "depth, targets, match",
    [
        (3, lambda k: 1 if k == 2 else k + 1, r"cycle \(0 → 1 → 2 → 1\)"),
        (20, None, "nest deeper than 16"),
        (14, None, "called more than 8× their number"),  # 2¹⁴ translations otherwise
    ],
)
def test_hostile_subgraph_calls_are_refused_quickly(depth, targets, match):
    import time

    from tests.frontends.tflite.build import if_chain_model

    data = if_chain_model(depth, targets)
    start = time.perf_counter()
    with pytest.raises(ModelFormatError, match=match):
        offload.load(data)
    assert time.perf_counter() - start < 5


def test_every_rule_is_in_the_documented_operator_table():
    """docs/tflite.md's table names each operator a rule exists for (and no other)."""
    import re

    import offload.frontends.tflite  # noqa: F401  (its rule modules fill RULES)
    from offload.frontends.tflite_node import RULES

    text = (Path(__file__).resolve().parents[2] / "docs" / "tflite.md").read_text()
    documented = set()
    for line in text.splitlines():
        m = re.match(r"^\| ([A-Z0-9_, ]+) \|", line)
        if m:
            documented |= {name.strip() for name in m.group(1).split(",")}
    variables = {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"}  # not rules: state
    builtin = {name for name in RULES if not name.startswith("CUSTOM ")}
    assert builtin == documented - variables


def test_stablehlo_while_is_a_while():
    """STABLEHLO_WHILE (built here; its options in the second options union) imports as WHILE
    does, here counted; LiteRT has no kernel for it, so the oracle is LiteRT running the same
    subgraphs under WHILE, and the loop written out in numpy."""
    from tests.frontends.tflite.build import loop_model

    program = offload.load(loop_model(stablehlo=True))
    (loop,) = [op for op in program.main.body.operations if op.op_type == "Loop"]
    assert loop.inputs[0] is not None  # a trip count
    feeds = {"i": np.array(1, np.int32), "x": np.array([1.0, -2.0, 0.5], np.float32)}
    got = offload.evaluate(program, feeds)
    x = feeds["x"].copy()
    for _ in range(1, 5):
        x = x * np.float32(1.5) + np.float32(1.0)
    np.testing.assert_array_equal(got["y"], x)
    assert got["i_out"] == 5
    if Interpreter is not None:
        want = litert(loop_model(stablehlo=False), feeds)
        np.testing.assert_array_equal(got["y"], want["y"])
        np.testing.assert_array_equal(got["i_out"], want["i_out"])
    with pytest.raises(ModelFormatError, match="outside the model's 3 subgraphs"):
        offload.load(loop_model(stablehlo=True, body=9))


def _builder_models() -> dict:
    from tests.frontends.tflite.build import (
        Sparse,
        computed_init_model,
        densify_model,
        if_chain_model,
        loop_model,
    )

    return {
        "if_chain": lambda: if_chain_model(3),
        "stablehlo_while": lambda: loop_model(stablehlo=True),
        "computed_init": computed_init_model,
        "sparse_blocks": lambda: densify_model(Sparse(_pruned(), {1: 2}, [0, 1, 2], [0, 1, 0], "uint8")),
        "sparse_column_major": lambda: densify_model(Sparse(_pruned(), {}, [1, 0], [1, 1], "uint16")),
    }


@pytest.mark.parametrize(
    "name", ["if_chain", "stablehlo_while", "computed_init", "sparse_blocks", "sparse_column_major"]
)
def test_builder_model_mutants_end_in_offload_errors(name):
    """Subgraph calls, a CALL_ONCE and sparse metadata damaged at random: an OffloadError or an
    import, nothing else (a CALL_ONCE without its options once crashed the importer)."""
    _mutants_end_in_offload_errors(_builder_models()[name](), flips=600)


@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_a_loop_bounded_by_a_loop_variable_is_counted(backend, tmp_path):
    """WHILE i < n with n a loop variable the body passes through (built here): trip count
    max(n - i, 0), so it runs on opencl; equal to LiteRT for n above, at and below i."""
    from tests.frontends.tflite.build import bounded_loop_model

    data = bounded_loop_model()
    program = offload.load(data)
    (loop,) = [op for op in program.main.body.operations if op.op_type == "Loop"]
    assert loop.inputs[0] is not None and "Less" not in {op.op_type for op in loop.attributes["body"].walk()}
    lowered = program if backend is None else offload.to_backend(program, backend)
    if backend:
        assert "Loop" not in {op.op_type for op in lowered.main.body.operations}
    offload.save(lowered, tmp_path / "m.pte")
    module = offload.runtime.load(str(tmp_path / "m.pte"))
    for n in (7, 2, -3):
        feeds = {
            "i": np.array(2, np.int32),
            "n": np.array(n, np.int32),
            "x": np.array([1, -2, 0.5], np.float32),
        }
        got = module.run(feeds)
        x = feeds["x"]
        for _ in range(max(n - 2, 0)):
            x = x * np.float32(1.5) + np.float32(1)
        want = {"i_out": np.array(max(n, 2), np.int32), "n_out": feeds["n"], "y": x}
        if Interpreter is not None:
            live = litert(data, feeds)
            for k in want:
                np.testing.assert_array_equal(live[k], want[k])
        for k, w in want.items():
            np.testing.assert_allclose(got[k], w, rtol=1e-6)


LSTM_VARIANTS = {
    "plain": {},
    "peepholes": {"peepholes": True},
    "cifg": {"cifg": True},
    "cifg_peepholes_time_major": {"cifg": True, "peepholes": True, "time_major": True},
    "projection": {"projection": 3},
    "projection_clips_peepholes": {"projection": 3, "proj_clip": 0.3, "cell_clip": 0.5, "peepholes": True},
    "cell_clip_cifg": {"cell_clip": 0.4, "cifg": True},
}


@needs_litert
@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
@pytest.mark.parametrize("variant", LSTM_VARIANTS)
def test_lstm_variants_match_litert(variant, backend, tmp_path):
    """The LSTM's optional parts no converter fixture has (built here): peepholes, CIFG (ONNX's
    input_forget couples the gates the other way round), projection, clips, time-major input;
    two calls of a loaded module against two LiteRT calls on one interpreter, inputs large
    enough for the clips to bite."""
    from tests.frontends.tflite.build import lstm_model

    data = lstm_model(**LSTM_VARIANTS[variant])
    program = offload.load(data)
    module, name = _lstm_module(program, backend, tmp_path)
    interp = Interpreter(model_content=data)
    interp.allocate_tensors()
    (inp,), (out,) = interp.get_input_details(), interp.get_output_details()
    rng = np.random.default_rng(2)
    for _ in range(2):
        x = rng.standard_normal(inp["shape"]).astype(np.float32) * 2
        interp.set_tensor(inp["index"], x)
        interp.invoke()
        assert_close({"y": module.run({"x": x})[name]}, {"y": interp.get_tensor(out["index"])})


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
    assert delegated_share(lowered) >= 0.95
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
