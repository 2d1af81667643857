"""nnpackage import: packages built here from the committed TFLite fixtures, and hostile zips."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import offload
from offload.errors import ModelFormatError, OffloadError, UnsupportedOpError
from offload.frontends import nnpackage
from tests.delegates.opencl_support import needs_opencl
from tests.frontends.test_tflite import HERE, assert_close, oracle

MODEL = "elementwise_f32"
NEW_MANIFEST = {
    "major-version": "1",
    "minor-version": "2",
    "patch-version": "0",
    "configs": [],
    "models": ["model.tflite"],
    "model-types": ["tflite"],
}


def zipped(entries: dict, compression=zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return out.getvalue()


def package(manifest: dict, model_name: str = "model.tflite", model: bytes | None = None) -> dict:
    model = (HERE / f"{MODEL}.tflite").read_bytes() if model is None else model
    return {"metadata/MANIFEST": json.dumps(manifest), model_name: model}


def check_runs(program) -> None:
    feeds, want = oracle(MODEL)  # LiteRT's outputs, stored by generate.py
    assert_close(offload.evaluate(program, feeds), want)


@pytest.mark.parametrize(
    "manifest",
    [NEW_MANIFEST, {"main-model": "model.tflite"}, {**NEW_MANIFEST, "model-types": None}],
    ids=["versioned", "main-model", "type-from-extension"],
)
def test_zip_package_matches_litert(manifest, tmp_path):
    data = zipped(package({k: v for k, v in manifest.items() if v is not None}))
    path = tmp_path / "m.nnpkg"
    path.write_bytes(data)
    program = offload.load(path)
    assert program.metadata["format"] == "nnpackage/tflite"
    check_runs(program)
    check_runs(offload.load(data))  # bytes sniffed as a zip


def test_stored_entries_and_subfolders(tmp_path):
    manifest = {**NEW_MANIFEST, "models": ["models/m.tflite"]}
    check_runs(offload.load(zipped(package(manifest, "models/m.tflite"), zipfile.ZIP_STORED)))


def test_folder_package(tmp_path):
    for name, data in package(NEW_MANIFEST).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data.encode() if isinstance(data, str) else data)
    check_runs(offload.load(tmp_path))


def test_folder_without_manifest_is_refused(tmp_path):
    with pytest.raises(ModelFormatError, match="neither metadata/MANIFEST"):
        offload.load(tmp_path)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="the file system has no symbolic links")
def test_folder_symlink_out_of_the_package_is_refused(tmp_path):
    outside = tmp_path / "outside.tflite"
    outside.write_bytes((HERE / f"{MODEL}.tflite").read_bytes())
    pkg = tmp_path / "pkg"
    (pkg / "metadata").mkdir(parents=True)
    (pkg / "metadata" / "MANIFEST").write_text(json.dumps(NEW_MANIFEST))
    (pkg / "model.tflite").symlink_to(outside)
    with pytest.raises(ModelFormatError, match="outside the package"):
        offload.load(pkg)


def test_circle_model_reads_as_tflite():
    data = bytearray((HERE / f"{MODEL}.tflite").read_bytes())
    data[4:8] = b"CIR0"
    manifest = {**NEW_MANIFEST, "models": ["m.circle"], "model-types": ["circle"]}
    program = offload.load(zipped(package(manifest, "m.circle", bytes(data))))
    assert program.metadata["format"] == "nnpackage/circle"
    check_runs(program)


@pytest.mark.parametrize(
    "entries, match",
    [
        ({"metadata/MANIFEST": json.dumps({"main-model": "../evil.tflite"})}, "leaves the package"),
        ({"metadata/MANIFEST": json.dumps({"main-model": "/etc/passwd"})}, "not a relative path"),
        ({"metadata/MANIFEST": json.dumps({"main-model": "C:/m.tflite"})}, "not a relative path"),
        ({"../metadata/MANIFEST": "{}"}, "leaves the package"),
        ({"model.tflite": b"x"}, "MANIFEST' is not in the package"),
        ({"metadata/MANIFEST": "{not json"}, "not JSON"),
        ({"metadata/MANIFEST": "[1]"}, "not a JSON object"),
        ({"metadata/MANIFEST": "{}"}, "names no model"),
        ({"metadata/MANIFEST": json.dumps({"models": []})}, "non-empty list"),
        ({"metadata/MANIFEST": json.dumps({"models": ["a"], "model-types": []})}, "one type per model"),
        ({"metadata/MANIFEST": json.dumps({"main-model": "missing.tflite"})}, "not in the package"),
        (package({**NEW_MANIFEST, "model-types": ["circle"]}), "MANIFEST says circle"),
    ],
)
def test_bad_packages_are_format_errors(entries, match):
    with pytest.raises(ModelFormatError, match=match):
        offload.load(zipped(entries))


HUGE_INT_MANIFEST = '{"main-model": "model.tflite", "x": %s}' % ("1" * 5000)  # past int's digit limit
DEEP_MANIFEST = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("manifest", [HUGE_INT_MANIFEST, DEEP_MANIFEST], ids=["5000-digits", "deep"])
def test_unparsable_manifest_json_names_the_package(manifest, tmp_path):
    entries = {**package({}), "metadata/MANIFEST": manifest}
    with pytest.raises(ModelFormatError, match=r"<bytes>: metadata/MANIFEST is not JSON"):
        offload.load(zipped(entries))
    for name, data in entries.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data.encode() if isinstance(data, str) else data)
    with pytest.raises(ModelFormatError, match=f"{tmp_path}: metadata/MANIFEST is not JSON"):
        offload.load(tmp_path)


def _with_method(data: bytes, entry: bytes, method: int) -> bytes:
    """``data`` with the compression method of ``entry`` changed in both of its zip headers."""
    data = bytearray(data)
    for magic, at, name_len, name_at in ((b"PK\x01\x02", 10, 28, 46), (b"PK\x03\x04", 8, 26, 30)):
        i = data.find(magic)
        while i >= 0:
            n = int.from_bytes(data[i + name_len : i + name_len + 2], "little")
            if data[i + name_at : i + name_at + n] == entry:
                data[i + at : i + at + 2] = method.to_bytes(2, "little")
            i = data.find(magic, i + 4)
    return bytes(data)


@pytest.mark.parametrize("method", [12, 14], ids=["bzip2", "lzma"])
def test_an_entry_whose_method_lies_is_a_format_error(method):
    data = _with_method(zipped(package(NEW_MANIFEST), zipfile.ZIP_STORED), b"model.tflite", method)
    with pytest.raises(
        ModelFormatError, match=f"'model.tflite': cannot be read as zip compression method {method}"
    ):
        offload.load(data)


def test_unknown_files_are_refused_by_name():
    onnx_inside = package({"main-model": "m.onnx"}, "m.onnx", b"\x08\x07" * 20)
    with pytest.raises(UnsupportedOpError, match="TFLite and circle"):
        offload.load(zipped(onnx_inside))


def test_zip_bomb_is_refused_before_inflating(monkeypatch):
    monkeypatch.setattr(nnpackage, "RATIO_FLOOR", 1 << 10)
    bomb = package({"main-model": "model.tflite"}, model=bytes(1 << 20))  # 1 MiB of zeros: ~1000:1
    with pytest.raises(ModelFormatError, match="compressed 100:1"):
        offload.load(zipped(bomb))


def test_entry_over_the_size_limit_is_refused(monkeypatch):
    monkeypatch.setattr(nnpackage, "MAX_ENTRY_BYTES", 1000)
    with pytest.raises(ModelFormatError, match="over the limit"):
        offload.load(zipped(package(NEW_MANIFEST)))


def test_lying_size_header_is_caught():
    data = bytearray(zipped(package(NEW_MANIFEST), zipfile.ZIP_STORED))
    # shrink the declared size of the model entry in its central directory record
    model = (HERE / f"{MODEL}.tflite").read_bytes()
    size = len(model).to_bytes(4, "little")
    central = data.rfind(b"PK\x01\x02")
    at = data.index(size, central)
    data[at : at + 4] = (len(model) - 16).to_bytes(4, "little")
    with pytest.raises(ModelFormatError):
        offload.load(bytes(data))


def test_mutated_zips_end_in_offload_errors():
    data = zipped(package(NEW_MANIFEST))
    rng = np.random.default_rng(5)
    mutants = [data[:n] for n in sorted({4, 30, len(data) // 2, len(data) - 22, len(data) - 1})]
    for _ in range(150):
        flipped = bytearray(data)
        for at in rng.integers(0, len(data), 1 + int(rng.integers(0, 3))):
            flipped[at] ^= 1 << int(rng.integers(0, 8))
        mutants.append(bytes(flipped))
    for i, mutant in enumerate(mutants):
        try:
            offload.load(mutant)
        except OffloadError:
            pass
        except Exception as e:  # pragma: no cover - the failure this test exists for
            pytest.fail(f"mutant {i} raised {type(e).__name__}: {e}")


def test_sniffing_a_folder_path_string(tmp_path):
    for name, data in package({"main-model": "model.tflite"}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data.encode() if isinstance(data, str) else data)
    check_runs(offload.load(str(tmp_path)))
    assert Path(tmp_path, "metadata", "MANIFEST").is_file()


CHAINED = {
    **NEW_MANIFEST,
    "minor-version": "3",
    "models": ["cond.tflite", "until.tflite"],
    "model-types": ["tflite", "tflite"],
    "pkg-inputs": ["0:0:0"],
    "pkg-outputs": ["1:0:0", "0:0:0", "1:0:1"],
    "model-connect": [{"from": "0:0:0", "to": ["1:0:0"]}],
}


def chained(manifest: dict) -> bytes:
    models = {"cond.tflite": "cond_f32", "until.tflite": "while_until"}
    entries = {name: (HERE / f"{fixture}.tflite").read_bytes() for name, fixture in models.items()}
    return zipped({"metadata/MANIFEST": json.dumps(manifest), **entries})


@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_two_models_chained_as_the_manifest_connects_them(backend, tmp_path):
    """cond_f32's output feeds while_until's input: one function whose outputs are the package
    outputs, equal to LiteRT running the two models one after the other."""
    program = offload.load(chained(CHAINED))
    assert list(program.functions) == ["forward"] and len(program.main.inputs) == 1
    x = np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)
    (name,) = [v.name for v in program.main.inputs]
    lowered = program if backend is None else offload.to_backend(program, backend)
    offload.save(lowered, tmp_path / "m.pte")
    got = offload.runtime.load(str(tmp_path / "m.pte")).run({name: x})
    outs = [v.name for v in program.main.outputs]
    first = litert_outputs("cond_f32", {"serving_default_x:0": x})
    (y,) = first.values()
    second = litert_outputs("while_until", {"serving_default_x:0": y})
    want = [second["PartitionedCall:0"], y, second["PartitionedCall:1"]]
    for name, w in zip(outs, want):
        assert_close({name: got[name]}, {name: w})


def litert_outputs(fixture: str, feeds: dict) -> dict:
    from tests.frontends.test_tflite import Interpreter, litert

    if Interpreter is None:
        pytest.skip("the chained package's oracle is LiteRT live")
    return litert(HERE / f"{fixture}.tflite", feeds)


def test_several_models_without_connections_are_methods():
    manifest = {k: v for k, v in CHAINED.items() if k not in ("pkg-inputs", "pkg-outputs", "model-connect")}
    program = offload.load(chained(manifest))
    assert list(program.functions) == ["forward", "model_1"]
    feeds, want = oracle("while_until")
    assert_close(offload.evaluate(program, feeds, "model_1"), want)


@pytest.mark.parametrize(
    "change, match",
    [
        ({"pkg-inputs": ["0:0:0", "1:0:0"]}, "input 0 of model 1 is fed twice"),
        ({"pkg-inputs": []}, "input 0 of model 0 is fed by nothing"),
        ({"pkg-inputs": ["0:0"]}, "not a 'model:subgraph:io' triple"),
        ({"pkg-inputs": ["5:0:0"]}, "outside the package's 2 models"),
        ({"pkg-outputs": ["1:0:9"]}, "model 1 has 2 outputs, not 10"),
        ({"pkg-outputs": []}, "'pkg-outputs' is empty"),
        ({"model-connect": [{"from": "0:0:0", "to": ["0:0:0"]}]}, "feeds itself"),
        ({"model-connect": [{"from": "0:0:0"}]}, "is not"),
        ({"model-connect": [{"from": "1:0:1", "to": ["1:0:0"]}]}, "feeds itself"),
        ({"model-connect": "x"}, "not a list"),
        ({"models": ["cond.tflite"] * 65, "model-types": ["tflite"] * 65}, "more than 64"),
        (
            {"model-connect": [{"from": "1:0:0", "to": ["0:0:0"]}], "pkg-inputs": ["1:0:0"]},
            "int32|INT32|does not fit",
        ),
    ],
)
def test_bad_connections_are_format_errors(change, match):
    with pytest.raises(ModelFormatError, match=match):
        offload.load(chained({**CHAINED, **change}))


def test_models_connected_in_a_cycle_are_refused():
    two_way = {
        **CHAINED,
        "pkg-inputs": [],
        "model-connect": [{"from": "0:0:0", "to": ["1:0:0"]}, {"from": "1:0:0", "to": ["0:0:0"]}],
    }
    with pytest.raises(ModelFormatError, match="cycle"):
        offload.load(chained(two_way))


def _folder(tmp_path, entries: dict):
    for name, data in entries.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return tmp_path


def test_a_folder_loads_under_a_4_gib_address_space(tmp_path):
    """A file is read by its size, not into a buffer of the 4 GiB entry limit."""
    _folder(tmp_path, package(NEW_MANIFEST))
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
        "import offload\n"
        "offload.load(sys.argv[1])\n"
        "print('loaded')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == ["loaded"], done.stderr[-2000:]


def test_a_model_listed_twice_is_refused(tmp_path):
    manifest = {**NEW_MANIFEST, "models": ["model.tflite"] * 64, "model-types": ["tflite"] * 64}
    for load in (
        lambda: offload.load(zipped(package(manifest))),
        lambda: offload.load(_folder(tmp_path, package(manifest))),
    ):
        start = time.monotonic()
        with pytest.raises(ModelFormatError, match=r"model 'model\.tflite' is listed twice"):
            load()
        assert time.monotonic() - start < 1


def test_a_folder_package_has_one_byte_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(nnpackage, "MAX_TOTAL_BYTES", 1000)
    with pytest.raises(ModelFormatError, match=r"'model\.tflite': \d+ bytes is over the limit"):
        offload.load(_folder(tmp_path, package(NEW_MANIFEST)))


def _end_record(data: bytes, entries: int, size: int) -> bytes:
    at = data.rindex(b"PK\x05\x06")
    head = data[: at + 8] + entries.to_bytes(2, "little") * 2 + size.to_bytes(4, "little")
    return head + data[at + 16 :]


@pytest.mark.parametrize("entries, size", [(65535, 100), (10, 1 << 31)], ids=["entries", "directory-bytes"])
def test_a_huge_central_directory_is_refused_before_it_is_read(entries, size):
    start = time.monotonic()
    with pytest.raises(ModelFormatError, match="a package has at most 4096 entries"):
        offload.load(_end_record(zipped(package(NEW_MANIFEST)), entries, size))
    assert time.monotonic() - start < 1


def test_a_zip_of_5000_entries_is_refused_at_its_end_record():
    names = {f"f{i}": b"" for i in range(5000)}
    start = time.monotonic()
    with pytest.raises(ModelFormatError, match="declares 5002 entries"):
        offload.load(zipped({**package(NEW_MANIFEST), **names}, zipfile.ZIP_STORED))
    assert time.monotonic() - start < 2
