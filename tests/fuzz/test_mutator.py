"""The structure-aware ONNX mutator: every mutation yields a parseable model that differs from its
input, and bytes that are not a model go to the byte mutator."""

from __future__ import annotations

import random

import pytest

from fuzz import mutate_onnx, seeds
from offload.schemas.generated import onnx_pb2 as pb

SEEDS = seeds.onnx_seeds(small=True)


def _fallback(data: bytes, max_size: int) -> bytes:
    return b"<bytes mutated>"


@pytest.mark.parametrize("name", sorted(mutate_onnx.MUTATIONS))
def test_each_mutation_changes_a_model(name):
    applied = changed = 0
    for i, data in enumerate(SEEDS):
        model = pb.ModelProto()
        model.ParseFromString(data)
        if mutate_onnx.MUTATIONS[name](model, random.Random(i)):
            out = model.SerializeToString()
            again = pb.ModelProto()
            again.ParseFromString(out)
            applied += 1
            changed += out != data
    assert applied >= len(SEEDS) // 4, f"{name} applied to {applied} of {len(SEEDS)} seeds"
    assert changed >= 0.8 * applied, f"{name} changed {changed} of the {applied} seeds it applied to"


def test_mutate_never_raises_and_keeps_models_parseable():
    structural = 0
    for i in range(3000):
        data = SEEDS[i % len(SEEDS)]
        out = mutate_onnx.mutate(data, 1 << 20, i, _fallback)
        if out == b"<bytes mutated>":
            continue
        model = pb.ModelProto()
        model.ParseFromString(out)
        assert model.HasField("graph")
        structural += 1
    assert structural > 2000  # about 7 in 8 mutate the structure


def test_bytes_that_are_not_a_model_fall_back():
    assert mutate_onnx.mutate(b"\xff\xff\xff", 100, 0, _fallback) == b"<bytes mutated>"


def test_mutations_reach_nested_graphs():
    loop = next((s for s in SEEDS if b"Loop" in s or b"If" in s), None)
    assert loop is not None
    model = pb.ModelProto()
    model.ParseFromString(loop)
    assert len(mutate_onnx.graphs(model)) > 1
