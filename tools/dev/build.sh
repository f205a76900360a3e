#!/usr/bin/env bash
# Installs missing packages, then configures and builds Tessera in Release into build/.
#   tools/dev/build.sh [--target NAME] [CMAKE_ARGS...]
# --target builds one target (e.g. tessera) instead of everything (tests included);
# other arguments go to CMake's configure step (e.g. -DTESSERA_SANITIZE=ON).
set -euo pipefail
cd "$(dirname "$0")/../.."
target=()
if [[ ${1:-} == --target ]]; then
  target=(--target "$2")
  shift 2
fi
bash tools/dev/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$jobs" "${target[@]}"
