#!/usr/bin/env bash
# Installs missing packages, then configures and builds Tessera in Release into build/.
# Extra arguments go to CMake's configure step (e.g. -DTESSERA_SANITIZE=ON).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tools/dev/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$jobs"
