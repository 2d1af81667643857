"""Valid inputs for the ONNX fixtures in this folder (made by ``generate.py``).

``inputs(name, case, rng)`` gives feeds for shape case ``case`` (``0 <= case < CASES[name]``):
each case changes the symbolic dims (batch, height/width or sequence length), and masks agree
with the sequence lengths they describe. Only numpy is needed: the generator and the tests
share these cases.
"""

from __future__ import annotations

import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# Sizes the generator builds the models with; the feeds below must agree with them.
VOCAB = 100  # token ids of transformer_encoder and lstm_model are in [0, VOCAB)
MAX_SEQ = 64  # transformer_encoder's learned position table
GRU_FEATURES = 8
CONTROL_FEATURES = 8

# name -> the shape cases: (batch, height, width) for images, (batch, seq) for sequences,
# (batch, sign of the input's mean (picks the If branch), Loop trip count) for control_flow.
_SHAPES: dict[str, list[tuple[int, ...]]] = {
    "cnn_classifier": [(1, 32, 32), (2, 64, 48), (3, 72, 100)],
    "segmenter": [(1, 32, 32), (2, 64, 48), (3, 50, 70)],
    "transformer_encoder": [(1, 5), (2, 9), (3, 16)],
    "lstm_model": [(1, 4), (2, 11), (3, 20)],
    "gru_model": [(1, 3), (2, 10), (3, 17)],
    "control_flow": [(1, 1, 2), (2, -1, 3), (3, 1, 1), (4, -1, 0)],
}

FIXTURES: list[str] = list(_SHAPES)
CASES: dict[str, int] = {name: len(shapes) for name, shapes in _SHAPES.items()}


def path(name: str) -> str:
    """The fixture's .onnx file."""
    return os.path.join(HERE, f"{name}.onnx")


def shape_of(name: str, case: int) -> tuple[int, ...]:
    return _SHAPES[name][case]


def case_id(name: str, case: int) -> str:
    """A short test id for the shape case, e.g. ``b2-64x48`` or ``b2-else-steps3``."""
    shape = _SHAPES[name][case]
    if name == "control_flow":
        b, sign, steps = shape
        return f"b{b}-{'then' if sign > 0 else 'else'}-steps{steps}"
    return f"b{shape[0]}-{'x'.join(map(str, shape[1:]))}"


def _lengths(batch: int, seq: int, rng: np.random.Generator) -> np.ndarray:
    """Valid lengths per batch row: the first row is full, the others 1..seq."""
    lens = rng.integers(1, seq + 1, size=batch)
    lens[0] = seq
    return lens


def inputs(name: str, case: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Feeds for fixture ``name`` in shape case ``case``."""
    shape = _SHAPES[name][case]
    if name in ("cnn_classifier", "segmenter"):
        b, h, w = shape
        return {"image": rng.standard_normal((b, 3, h, w)).astype(np.float32)}
    if name == "transformer_encoder":
        b, s = shape
        lens = _lengths(b, s, rng)
        mask = np.arange(s)[None, :] >= lens[:, None]  # True marks padding (PyTorch's convention)
        tokens = rng.integers(0, VOCAB, size=(b, s)).astype(np.int64)
        tokens[mask] = 0
        return {"tokens": tokens, "padding_mask": mask}
    if name == "lstm_model":
        b, s = shape
        return {"tokens": rng.integers(0, VOCAB, size=(b, s)).astype(np.int64)}
    if name == "gru_model":
        b, s = shape
        return {"x": rng.standard_normal((b, s, GRU_FEATURES)).astype(np.float32)}
    if name == "control_flow":
        b, sign, steps = shape
        x = np.abs(rng.standard_normal((b, CONTROL_FEATURES))).astype(np.float32) * sign
        return {"x": x, "steps": np.array(steps, dtype=np.int64)}
    raise KeyError(name)
