#!/usr/bin/env bash
# Quick start, second command: install what is missing, build (warnings as errors), and run
# the whole test suite with CTest. Extra arguments go to ctest (e.g. -L kernels). Tests labelled
# long (timings that need a quiet machine, e.g. tessera plan's step-time validation) are left
# out; run them with `cd build && ctest -L long`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/dev/build.sh -DTESSERA_WERROR=ON
bash tools/dev/check-layering.sh
cd build
ctest --output-on-failure -j2 --timeout 600 -LE long "$@"
