"""TFLite's RFFT2D, COMPLEX_ABS, REAL, IMAG and the shape operators on complex tensors
(frontends/tflite_fft.py) in hand-built models, LiteRT live as the reference; offload runs each
with ``evaluate`` and from a ``.pte`` (one on opencl too).

Tolerance: LiteRT transforms in double and rounds to float32, the IR's DFT transforms in float32,
so a bin may be off by float32 rounding of sums over the slice: atol is 2e-7 · sqrt(h · w) times
the largest magnitude (measured: at most 1.9e-6 on magnitudes of 30, slices of 8 × 16), rtol 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest

import offload
from offload.errors import ModelFormatError, UnsupportedOpError
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator as B
from offload.schemas.generated.tflite.TensorType import TensorType as TT
from tests.delegates.opencl_support import needs_opencl
from tests.frontends.tflite.build import Graph, Op, T, build
from tests.frontends.tflite.litert import check, litert, options

pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT is the reference")

RNG = np.random.default_rng(20261128)
C64, I32 = TT.COMPLEX64, TT.INT32


def floats(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def spectrum_shape(shape, fft) -> list:
    return [*shape[:-2], fft[0], fft[1] // 2 + 1]


def fft_length(fft, name="fft") -> T:
    return T(name, [len(fft)], I32, np.array(fft, np.int32))


def check_spectrum(data, feeds, tmp_path, fft, backend=None) -> None:
    want = litert(data, feeds)
    scale = max(float(np.abs(w).max()) for w in want.values())
    atol = 2e-7 * np.sqrt(fft[0] * fft[1]) * scale
    check(data, feeds, tmp_path, rtol=1e-5, atol=atol, backend=backend, want=want)


def rfft_parts_model(shape, fft) -> bytes:
    """x → RFFT2D → COMPLEX_ABS, REAL and IMAG, the model's three outputs."""
    out = spectrum_shape(shape, fft)
    tensors = [T("x", shape), fft_length(fft), T("z", out, C64), T("abs", out), T("re", out), T("im", out)]
    ops = [Op(B.RFFT2D, [0, 1], [2]), Op(B.COMPLEX_ABS, [2], [3]), Op(B.REAL, [2], [4]), Op(B.IMAG, [2], [5])]
    return build([Graph(tensors, ops, [0], [3, 4, 5])])


@pytest.mark.parametrize(
    "shape, fft, dfts",
    [
        ([2, 8, 16], (8, 16), 2),  # fft_length equal to the input
        ([3, 10, 20], (8, 16), 2),  # smaller: rows and columns cropped
        ([5, 12], (8, 16), 2),  # larger: zero-padded
        ([4, 1, 30], (1, 32), 1),  # a 1-D rfft written as RFFT2D: one DFT
        ([4, 3, 30], (1, 16), 1),  # one row of three kept
        ([2, 3, 4, 8], (4, 8), 2),  # two batch dimensions
    ],
)
def test_rfft2d_then_abs_real_imag(shape, fft, dfts, tmp_path):
    data = rfft_parts_model(shape, fft)
    program = offload.load(data)
    assert [op.op_type for op in program.main.body.operations].count("DFT") == dfts
    check_spectrum(data, {"x": floats(*shape) * 4}, tmp_path, fft)


def test_lengths_litert_refuses_are_computed(tmp_path):
    """LiteRT takes powers of two only; any positive length is the DFT of numpy in float64."""
    shape, fft = [2, 5, 7], (3, 6)
    data = rfft_parts_model(shape, fft)
    with pytest.raises(RuntimeError):
        litert(data, {"x": floats(*shape)})
    x = floats(*shape)
    z = np.fft.rfft2(x.astype(np.float64), s=fft)
    want = {"abs": np.abs(z), "re": z.real, "im": z.imag}
    want = {k: v.astype(np.float32) for k, v in want.items()}
    check(data, {"x": x}, tmp_path, rtol=1e-5, atol=2e-7 * np.sqrt(18) * float(np.abs(z).max()), want=want)


def test_complex_constants_and_reshapes(tmp_path):
    """A complex64 constant split into pairs, and RESHAPE (to a computed shape), EXPAND_DIMS,
    SQUEEZE of complex tensors (negative axes counted before the pair axis)."""
    c = (floats(2, 17) + 1j * floats(2, 17)).astype(np.complex64)
    tensors = [
        T("x", [4, 1, 30]),  # 0
        fft_length((1, 32)),
        T("z", [4, 1, 17], C64),
        T("shape", [3], I32),  # a model input: the shape is computed
        T("r", [2, 2, 17], C64),  # 4
        T("axis", [], I32, np.array(-1, np.int32)),
        T("e", [2, 2, 17, 1], C64),
        T("s", [2, 2, 17], C64),
        T("c", [2, 17], C64, c),  # 8
        T("abs_e", [2, 2, 17, 1]),
        T("im_s", [2, 2, 17]),
        T("re_c", [2, 17]),
        T("abs_c", [2, 17]),  # 12
    ]
    ops = [
        Op(B.RFFT2D, [0, 1], [2]),
        Op(B.RESHAPE, [2, 3], [4]),
        Op(B.EXPAND_DIMS, [4, 5], [6]),
        Op(B.SQUEEZE, [6], [7], options("SqueezeOptions", squeeze_dims=np.array([-1], np.int32))),
        Op(B.COMPLEX_ABS, [6], [9]),
        Op(B.IMAG, [7], [10]),
        Op(B.REAL, [8], [11]),
        Op(B.COMPLEX_ABS, [8], [12]),
    ]
    data = build([Graph(tensors, ops, [0, 3], [9, 10, 11, 12])])
    feeds = {"x": floats(4, 1, 30), "shape": np.array([2, 2, 17], np.int32)}
    check_spectrum(data, feeds, tmp_path, (1, 32))


def log_mel_model(frames: int, length: int, fft: int, mels: int) -> bytes:
    """YAMNet's front end in the form the converter gives a 1-D rfft: frames (their count known at
    run time only) → RESHAPE [-1, 1, length] → RFFT2D [1, fft] → RESHAPE of the complex tensor to
    [-1, fft / 2 + 1] → COMPLEX_ABS → FULLY_CONNECTED (a mel matrix) → ADD 0.001 → LOG."""
    bins = fft // 2 + 1
    mel = np.abs(floats(mels, bins)) / bins
    tensors = [
        T("frames", [frames, length], signature=[-1, length]),  # 0
        T("shape", [3], I32, np.array([-1, 1, length], np.int32)),
        T("framed", [frames, 1, length]),
        fft_length((1, fft)),
        T("z", [frames, 1, bins], C64),  # 4
        T("z2", [frames, bins], C64),
        T("magnitude", [frames, bins]),
        T("mel", [mels, bins], data=mel),
        T("energy", [frames, mels]),  # 8
        T("offset", [], data=np.array(0.001, np.float32)),
        T("shifted", [frames, mels]),
        T("log_mel", [frames, mels]),
        T("bins", [2], I32, np.array([-1, bins], np.int32)),  # 12
    ]
    ops = [
        Op(B.RESHAPE, [0, 1], [2]),
        Op(B.RFFT2D, [2, 3], [4]),
        Op(B.RESHAPE, [4, 12], [5]),
        Op(B.COMPLEX_ABS, [5], [6]),
        Op(B.FULLY_CONNECTED, [6, 7, -1], [8], options("FullyConnectedOptions")),
        Op(B.ADD, [8, 9], [10], options("AddOptions")),
        Op(B.LOG, [10], [11]),
    ]
    return build([Graph(tensors, ops, [0], [11])])


@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_yamnet_like_log_mel_chain(backend, tmp_path):
    data = log_mel_model(frames=6, length=400, fft=512, mels=16)
    # a log spectrum: a bin's absolute error over its (small) value, so atol as the spectrum's
    check(data, {"frames": floats(6, 400)}, tmp_path, rtol=1e-5, atol=1e-4, backend=backend)


def _rfft_model(fft_tensor: T, out_shape=(2, 8, 9), graph_inputs=(0,), outputs=(3,)) -> bytes:
    tensors = [T("x", [2, 8, 16]), fft_tensor, T("z", list(out_shape), C64), T("abs", list(out_shape))]
    ops = [Op(B.RFFT2D, [0, 1], [2]), Op(B.COMPLEX_ABS, [2], [3])]
    return build([Graph(tensors, ops, list(graph_inputs), list(outputs))])


@pytest.mark.parametrize(
    "fft_tensor, graph_inputs, error, match",
    [
        (T("fft", [2], I32), (0, 1), UnsupportedOpError, r"RFFT2D\): input 1 must be a constant"),
        (fft_length((1, 8, 16)), (0,), ModelFormatError, r"RFFT2D\): fft_length \[1, 8, 16\] .* not two"),
        (fft_length((0, 16)), (0,), ModelFormatError, r"RFFT2D\): fft_length \[0, 16\] is not positive"),
        (fft_length((8, -16)), (0,), ModelFormatError, r"RFFT2D\): fft_length \[8, -16\] is not positive"),
    ],
)
def test_a_wrong_fft_length_is_refused_naming_the_operator(fft_tensor, graph_inputs, error, match):
    with pytest.raises(error, match=match):
        offload.load(_rfft_model(fft_tensor, graph_inputs=graph_inputs))


def test_complex_model_inputs_outputs_and_other_operators_are_refused():
    with pytest.raises(UnsupportedOpError, match=r"model output 'z' is complex64.*COMPLEX_ABS, REAL or IMAG"):
        offload.load(_rfft_model(fft_length((8, 16)), outputs=(2, 3)))
    z = [T("z", [3], C64), T("abs", [3])]
    with pytest.raises(UnsupportedOpError, match=r"model input 'z' is complex64"):
        offload.load(build([Graph(z, [Op(B.COMPLEX_ABS, [0], [1])], [0], [1])]))
    tensors = [
        T("x", [8, 16]),
        fft_length((8, 16)),
        T("z", [8, 9], C64),
        T("zz", [8, 9], C64),
        T("abs", [8, 9]),
    ]
    ops = [
        Op(B.RFFT2D, [0, 1], [2]),
        Op(B.ADD, [2, 2], [3], options("AddOptions")),
        Op(B.COMPLEX_ABS, [3], [4]),
    ]
    with pytest.raises(
        UnsupportedOpError, match=r"operator 1 \(ADD\): complex tensors are supported only by"
    ):
        offload.load(build([Graph(tensors, ops, [0], [4])]))


def test_files_whose_types_contradict_the_operators_are_refused():
    """COMPLEX_ABS of a float32 tensor, RFFT2D writing a float32 one: LiteRT refuses both."""
    real = [T("x", [3, 2]), T("abs", [3])]
    with pytest.raises(ModelFormatError, match=r"COMPLEX_ABS\): input 0 \('x'\) is not a complex tensor"):
        offload.load(build([Graph(real, [Op(B.COMPLEX_ABS, [0], [1])], [0], [1])]))
    tensors = [T("x", [2, 8, 16]), fft_length((8, 16)), T("z", [2, 8, 9]), T("y", [2, 8, 9])]
    ops = [Op(B.RFFT2D, [0, 1], [2]), Op(B.RELU, [2], [3])]
    with pytest.raises(ModelFormatError, match=r"RFFT2D\): its output is not complex64"):
        offload.load(build([Graph(tensors, ops, [0], [3])]))
