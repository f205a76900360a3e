#!/usr/bin/env bash
# Quick start, second command: install what is missing, build (warnings as errors), and run
# the whole test suite with CTest. Extra arguments go to ctest (e.g. -L kernels).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/dev/build.sh -DTESSERA_WERROR=ON
bash tools/dev/check-layering.sh
cd build
ctest --output-on-failure -j2 --timeout 600 "$@"
