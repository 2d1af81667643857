"""Every input a fuzzer found is replayed through its harness's contract, with the error it must
now give: only ``offload.errors`` exceptions, each within the time bound, and the message its
fix wrote (so a fix that regresses into a different error, or none, fails here)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fuzz.harnesses import HARNESSES

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus"
TIME_BOUND = 3.0  # seconds: the fuzzers' 1 s bound, with room for a loaded test machine

# harness/file → (the OffloadError class, a fragment of its message); None: the input now runs.
EXPECTED = {
    # a resize whose int64 work (8 bytes an output element) was not bounded: 49 s, found in CI
    "tflite/int8-resize-bilinear-to-a-million-columns.tflite": (
        "ShapeError",
        "offload.tflite::ResizeBilinear: a result of shape (2, 8, 1048584, 16) would take",
    ),
    # a fused RELU6 whose int8 output scale is subnormal: 6 / scale is inf (OverflowError), found in CI
    "tflite/int8-relu6-bound-of-a-subnormal-scale.tflite": ("ModelFormatError", "has an invalid name"),
    # windows just under the 16 GiB constant (a 14 GiB padded input), refused by the machine's
    # budget (the harness's 256 MiB here) from the declared shapes, before anything is padded
    "tflite/maxpool-same-window-30643-wide.tflite": (
        "ShapeError",
        "MaxPool 'MaxPool' (padded input): a result of shape (1, 4, 30650, 30650) would take 15030760000 bytes",
    ),
    "tflite/depthwise-conv-dilated-15321-times.tflite": (
        "ShapeError",
        "Conv 'Conv' (padded input): a result of shape (1, 4, 30650, 30650) would take 15030760000 bytes",
    ),
    "tflite/averagepool-window-4096-wide.tflite": (  # 64 MiB padded, 16.8 million taps an output
        "ShapeError",
        "a window of 16777216 taps (4096 x 4096) over 64 outputs would take 275951648768 element steps",
    ),
    "onnx_proto/conv-depthwise-dilation-65536-pads-65536.onnx": (  # ran 13.6 s before a MemoryError
        "ShapeError",
        "Conv 'y' (padded input): a result of shape (1, 4, 131080, 131080) would take 274911462400 bytes",
    ),
    # an int8 SUB whose constant operand has no quantization (AttributeError), found in a short run
    "tflite/int8-sub-of-an-unquantized-constant.tflite": (
        "ModelFormatError",
        "operator 7 (SUB): input 1 is not an int8 tensor with one quantization scale",
    ),
    "onnx_proto/add-v6-broadcast-missing-input.onnx": ("ModelFormatError", "Add input 0 (A) is required"),
    "onnx_proto/add-v6-huge-negative-axis.onnx": (
        "ModelFormatError",
        "not a valid Add of opset 6: axis -2147483646 does not place a rank-1 operand in a rank-2 one",
    ),
    "onnx_proto/add-v6-string-axis.onnx": ("ModelFormatError", "not a valid Add of opset 6"),
    # a Gemm of [3, 4] by [2, 3]: its prepared call refused to bind at load (TypeError), found in
    # a short run; the steps now run unbound and the kernel names the op
    "onnx_proto/gemm-v13-k-mismatch.onnx": ("KernelError", "op 'Gemm' (onnx::Gemm) failed on inputs"),
    "onnx_proto/concatfromsequence-string-new-axis.onnx": (
        "ModelFormatError",
        "attribute 'new_axis' of ConcatFromSequence must be of type int",
    ),
    "onnx_proto/constant-without-output.onnx": ("ModelFormatError", "a Constant has one named output"),
    "onnx_proto/expand-65536-long-shape.onnx": ("KernelError", "maximum supported dimension"),
    "onnx_proto/node-output-not-utf8.onnx": (
        "ModelFormatError",
        "model.graph.node[0].output[0] b'\\xb1' is not UTF-8 text",
    ),
    "onnx_proto/unsqueeze-2g-long-axes.onnx": (
        "UnsupportedOpError",
        "dimension 2147483648 does not fit a .pte tensor size",
    ),
    "onnx_proto/gradient-graph-for-strings.onnx": (
        "ModelFormatError",
        "attribute 'xs' of Gradient must be of type strs, not Block",
    ),
    "onnx_proto/pad-v0-no-pads.onnx": ("ModelFormatError", "not a valid Pad of opset 0"),
    "onnx_proto/reshape-ints-allowzero.onnx": (
        "ModelFormatError",
        "attribute 'allowzero' of Reshape must be of type int, not []",
    ),
    "onnx_proto/resize-a-million-scales.onnx": (
        "ShapeError",
        "Resize: 1000000 scales values for 4 resized axes (expected 4)",
    ),
    "onnx_proto/resize-v6-one-input.onnx": ("ModelFormatError", "not a valid Resize of opset 6"),
    "onnx_proto/slice-v6-no-starts.onnx": (
        "ModelFormatError",
        "not a valid Slice of opset 6: it has no attribute 'starts'",
    ),
    "onnx_proto/softmax-2g-by-2g-input.onnx": (  # type inference refuses the shape (byte limit)
        "ShapeError",
        "would take 18446744056529682436 bytes, over the",
    ),
    "onnx_proto/softmax-empty-2g-rows.onnx": None,
    "onnx_proto/softmax-v1-no-input.onnx": ("ModelFormatError", "not a valid Softmax of opset 1"),
    "onnx_proto/transpose-int-perm.onnx": (
        "ModelFormatError",
        "attribute 'perm' of Transpose must be of type ints, not 256",
    ),
    "pte/tile-huge-repeats-and-a-zero.pte": ("KernelError", "op 'Tile' (onnx::Tile) failed"),
    "coreml/argsort-axis-past-the-rank.pkg": (
        "ModelFormatError",
        "its inputs do not fit MIL's definition of 'argsort'",
    ),
    "coreml/const-strings-declared-uint8.pkg": (
        "ModelFormatError",
        "strings values for a constant of type UINT8",
    ),
    "nnpackage/zip-version-10.1.zip": (
        "ModelFormatError",
        "not a readable zip archive: zip file version 10.1",
    ),
    # JSON integers past Python's 4,300-digit limit raise ValueError, not JSONDecodeError
    "nnpackage/manifest-5000-digit-integer.zip": (
        "ModelFormatError",
        "<bytes>: metadata/MANIFEST is not JSON: Exceeds the limit (4300 digits)",
    ),
    "coreml/manifest-5000-digit-integer.pkg": (
        "ModelFormatError",
        "Manifest.json is not JSON: Exceeds the limit (4300 digits)",
    ),
    # a RecursionError inside the JSON parser, in each loader that reads JSON from the file
    "nnpackage/manifest-nested-10000-deep.zip": (
        "ModelFormatError",
        "<bytes>: metadata/MANIFEST is not JSON",
    ),
    "coreml/manifest-nested-10000-deep.pkg": ("ModelFormatError", "Manifest.json is not JSON"),
    "nnpackage/end-record-declares-65535-entries.zip": (  # refused before zipfile reads the directory
        "ModelFormatError",
        "the zip declares 65535 entries in a 100-byte central directory; a package has at most 4096",
    ),
    "nnpackage/stored-model-entry-says-lzma.zip": (  # lzma's own error class
        "ModelFormatError",
        "entry 'model.tflite': cannot be read as zip compression method 14",
    ),
    "nnpackage/one-model-listed-64-times.zip": (  # each listing was read and imported again
        "ModelFormatError",
        "model 'model.tflite' is listed twice",
    ),
    "pte/arena-of-a-petabyte.pte": (  # the arena budget, before np.zeros is asked
        "ModelFormatError",
        "plan 'forward': its arenas (non_const_buffer_sizes) take 1125899906842624 bytes, over the",
    ),
    "pte/input-names-nested-100000-deep.pte": (  # a RecursionError inside the JSON parser
        "ModelFormatError",
        "plan 'forward': the input names are not JSON",
    ),
}


def _regressions() -> list[str]:
    return sorted(
        f"{h}/{p.name}"
        for h in HARNESSES
        for p in (CORPUS / h / "regressions").glob("*")
        if p.is_file() and not p.name.startswith(".")
    )


@pytest.mark.parametrize("key", _regressions())
def test_regression_keeps_the_contract(key):
    harness, name = key.split("/", 1)
    data = (CORPUS / harness / "regressions" / name).read_bytes()
    start = time.perf_counter()
    error = HARNESSES[harness].check(data)  # a finding raises out of here
    elapsed = time.perf_counter() - start
    assert elapsed < TIME_BOUND, f"{key} took {elapsed:.2f} s"
    assert key in EXPECTED, f"{key}: add the error it gives now ({error!r}) to EXPECTED"
    if EXPECTED[key] is None:
        assert error is None, f"{key} should run now, but stopped at {error!r}"
        return
    kind, fragment = EXPECTED[key]
    assert type(error).__name__ == kind and fragment in str(error), f"{key}: {error!r}"


def test_every_expectation_has_its_file():
    assert set(EXPECTED) <= set(_regressions())
