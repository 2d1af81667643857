#!/usr/bin/env bash
# Regenerates every file under schemas/generated/ from the schemas beside this script.
# protoc 25.1 (grpcio-tools 1.62.3) is pinned on purpose: its Python output carries no
# runtime-version check, so the generated module runs on every protobuf from 4.21 to today.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${OFFLOAD_CODEGEN_VENV:-/tmp/offload-codegen}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q grpcio-tools==1.62.3
fi
out="$here/generated"
mkdir -p "$out"
"$venv/bin/python" -m grpc_tools.protoc -I"$here" --python_out="$out" "$here/onnx.proto"
