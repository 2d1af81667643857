"""Malformed and hostile Core ML packages end in ModelFormatError (or UnsupportedOpError for a
well-formed model offload cannot run), never in another exception, a crash or a read outside the
package: bad manifests, paths leaving the package, truncated and corrupted weight files, offsets
past the end, and a corpus of seeded byte mutations of a real package."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import offload
from offload.errors import ModelFormatError, UnsupportedOpError
from offload.frontends.coreml import import_coreml
from offload.runtime.evaluate import evaluate
from offload.schemas.generated.coreml import Model_pb2
from tests.frontends.coreml.test_ops import OPS, check, load_case

CASE = "linear_3d"  # its weight is a blob of weight.bin; its bias is inline
SPEC = os.path.join("Data", "com.apple.CoreML", "model.mlmodel")
WEIGHTS = os.path.join("Data", "com.apple.CoreML", "weights", "weight.bin")


@pytest.fixture
def pkg(tmp_path):
    """A writable copy of the case's package."""
    path = tmp_path / "m.mlpackage"
    shutil.copytree(os.path.join(OPS, f"{CASE}.mlpackage"), path)
    return path


def runs(path) -> None:
    """The package imports and gives the case's reference outputs."""
    inputs, want, tolerance = load_case(CASE)
    check(CASE, evaluate(import_coreml(path), inputs), want, tolerance)


def refused(path, match: str | None = None) -> None:
    with pytest.raises(ModelFormatError, match=match):
        offload.load(path)


def blob_offsets(path) -> list[int]:
    spec = Model_pb2.Model()
    spec.ParseFromString((path / SPEC).read_bytes())
    fn = spec.mlProgram.functions["main"]
    ops = fn.block_specializations[fn.opset].operations
    return [
        op.attributes["val"].blobFileValue.offset
        for op in ops
        if op.attributes["val"].HasField("blobFileValue")
    ]


def rewrite_spec(path, edit) -> None:
    spec = Model_pb2.Model()
    spec.ParseFromString((path / SPEC).read_bytes())
    edit(spec)
    (path / SPEC).write_bytes(spec.SerializeToString())


def test_the_untouched_package_runs(pkg):
    runs(pkg)
    assert blob_offsets(pkg) == [64]


@pytest.mark.parametrize(
    "manifest, match",
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[]", "itemInfoEntries"),
        (json.dumps({"itemInfoEntries": {}, "rootModelIdentifier": "x"}).encode(), "no entry"),
        (json.dumps({"itemInfoEntries": {"x": {"path": 3}}, "rootModelIdentifier": "x"}).encode(), "no entry"),
        (json.dumps({"itemInfoEntries": {"x": {"path": "../../m"}}, "rootModelIdentifier": "x"}).encode(), "leaves"),
        (json.dumps({"itemInfoEntries": {"x": {"path": "/etc/passwd"}}, "rootModelIdentifier": "x"}).encode(), "relative"),
        (json.dumps({"itemInfoEntries": {"x": {"path": "nothing"}}, "rootModelIdentifier": "x"}).encode(), "not a file"),
        (b"[" * 100000 + b"]" * 100000, "not JSON"),
        (b'{"itemInfoEntries": {}, "x": ' + b"1" * 5000 + b"}", "Manifest.json is not JSON: Exceeds the limit"),
    ],
)  # fmt: skip
def test_bad_manifests(pkg, manifest, match):
    (pkg / "Manifest.json").write_bytes(manifest)
    refused(pkg, match)


def test_manifest_too_large(pkg):
    (pkg / "Manifest.json").write_bytes(b" " * (2 << 20))
    refused(pkg, "larger than")


def test_symlink_out_of_the_package(pkg, tmp_path):
    outside = tmp_path / "outside.mlmodel"
    shutil.copy(pkg / SPEC, outside)
    os.remove(pkg / SPEC)
    os.symlink(outside, pkg / SPEC)
    refused(pkg, "leaves the package")


def test_weight_file_name_leaving_the_package(pkg):
    def edit(spec):
        fn = spec.mlProgram.functions["main"]
        for op in fn.block_specializations[fn.opset].operations:
            if op.attributes["val"].HasField("blobFileValue"):
                op.attributes["val"].blobFileValue.fileName = "@model_path/../../../Manifest.json"

    rewrite_spec(pkg, edit)
    refused(pkg, "leaves the package")


@pytest.mark.parametrize("size", [0, 10, 63, 64, 100, 127, 128, 150, 207])
def test_truncated_weight_file(pkg, size):
    data = (pkg / WEIGHTS).read_bytes()
    (pkg / WEIGHTS).write_bytes(data[:size])
    refused(pkg)


@pytest.mark.parametrize("offset", [0, 32, 65, 128, 192, 1 << 40, (1 << 64) - 64])
def test_blob_offsets_past_the_records(pkg, offset):
    def edit(spec):
        fn = spec.mlProgram.functions["main"]
        for op in fn.block_specializations[fn.opset].operations:
            if op.attributes["val"].HasField("blobFileValue"):
                op.attributes["val"].blobFileValue.offset = offset

    rewrite_spec(pkg, edit)
    refused(pkg, "blob record")


@pytest.mark.parametrize(
    "field, value, match",
    [
        (0, 0xABADCAFE, "sentinel"),  # sentinel
        (1, 1, "holds float16"),  # data type
        (1, 99, "holds code 99"),
        (2, 1 << 62, "run past the end"),  # size
        (2, 76, "holds 19 values"),
        (3, 1 << 62, "run past the end"),  # data offset
        (3, 0, "run past the end"),
    ],
)
def test_corrupted_blob_records(pkg, field, value, match):
    data = bytearray((pkg / WEIGHTS).read_bytes())
    fmt = "<IIQQQ"
    fields = list(struct.unpack_from(fmt, data, 64))
    fields[field] = value
    struct.pack_into(fmt, data, 64, *fields)
    (pkg / WEIGHTS).write_bytes(bytes(data))
    refused(pkg, match)


@pytest.mark.parametrize("value", [3, 11751492080, (1 << 64) - 1])
def test_the_padding_field_of_a_whole_byte_blob_is_not_read(pkg, value):
    """Files written before sub-byte types hold other bytes where ``padding bits`` is now: a
    float blob loads whatever the field holds, with the case's reference outputs."""
    data = bytearray((pkg / WEIGHTS).read_bytes())
    struct.pack_into("<Q", data, 64 + 24, value)
    (pkg / WEIGHTS).write_bytes(bytes(data))
    runs(pkg)


def test_weight_file_of_another_version(pkg):
    data = bytearray((pkg / WEIGHTS).read_bytes())
    struct.pack_into("<I", data, 4, 1)
    (pkg / WEIGHTS).write_bytes(bytes(data))
    refused(pkg, "version 1")


@pytest.mark.parametrize("size", [1, 5, 50, 200, 899])
def test_truncated_model_file(pkg, size):
    (pkg / SPEC).write_bytes((pkg / SPEC).read_bytes()[:size])
    with pytest.raises((ModelFormatError, UnsupportedOpError)):
        offload.load(pkg)


def test_a_neural_network_model_is_named(tmp_path):
    spec = Model_pb2.Model(specificationVersion=4)
    spec.neuralNetwork.SetInParent()
    path = tmp_path / "old.mlmodel"
    path.write_bytes(spec.SerializeToString())
    with pytest.raises(UnsupportedOpError, match="neuralNetwork model"):
        offload.load(path)


def test_an_unknown_op_is_named(pkg):
    def edit(spec):
        fn = spec.mlProgram.functions["main"]
        for op in fn.block_specializations[fn.opset].operations:
            if op.type == "linear":
                op.type = "frobnicate"

    rewrite_spec(pkg, edit)
    with pytest.raises(UnsupportedOpError, match="MIL op 'frobnicate'"):
        offload.load(pkg)


@pytest.mark.parametrize("seed", range(120))
def test_mutation_corpus(pkg, seed):
    """Seeded byte flips, insertions and cuts in the model file or the weight file: each ends in
    an offload error or imports a program (a flip inside a weight's values is still a model)."""
    rng = np.random.default_rng(seed)
    target = pkg / (SPEC if seed % 3 else WEIGHTS)
    data = bytearray(target.read_bytes())
    for _ in range(int(rng.integers(1, 6))):
        at = int(rng.integers(0, len(data)))
        kind = rng.integers(0, 3)
        if kind == 0:
            data[at] = int(rng.integers(0, 256))
        elif kind == 1:
            data[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8))
        else:
            del data[at : at + int(rng.integers(1, 9))]
    target.write_bytes(bytes(data))
    with contextlib.suppress(ModelFormatError, UnsupportedOpError):
        offload.load(pkg)


REWRITTEN_CHILD = """
import sys
import numpy as np
import offload
from tests.frontends.coreml.test_hostile import CASE, WEIGHTS
from tests.frontends.coreml.test_ops import check, load_case

pkg, how = sys.argv[1], sys.argv[2]
program = offload.load(pkg)
with open(f"{pkg}/{WEIGHTS}", "r+b") as f:  # rewritten in place, as a tool saving over it does
    if how == "truncated":
        f.truncate(64)
    else:
        size = f.seek(0, 2)
        f.seek(64)
        f.write(bytes(size - 64))
inputs, want, tolerance = load_case(CASE)
check(CASE, offload.evaluate(program, inputs), want, tolerance)
check(CASE, offload.runtime.load(offload.save(program)).run(inputs), want, tolerance)
print("kept")
"""


@pytest.mark.parametrize("how", ["truncated", "same-size"])
def test_an_imported_program_keeps_its_weights_when_the_package_is_rewritten(pkg, how):
    """In a child process: a weight file mapped by the program would end it with SIGBUS."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    done = subprocess.run(
        [sys.executable, "-c", REWRITTEN_CHILD, str(pkg), how],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )
    assert done.returncode == 0, f"child ended with {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.split() == ["kept"]


def test_a_weight_file_truncated_while_it_is_read_is_named(pkg):
    from offload.frontends.coreml_reader import WeightFile

    weights = WeightFile(str(pkg / WEIGHTS), str(pkg))
    os.truncate(pkg / WEIGHTS, 100)
    with pytest.raises(
        ModelFormatError, match=r"weight\.bin changed while it was read: the blob record at 64"
    ):
        weights.blob(64, 2, 20, "const 'w'")
