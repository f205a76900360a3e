#!/usr/bin/env bash
# Quick start, first command: install what is missing, build, train the default job
# (configs/tiny.yaml: a tiny GPT-2 on the built-in synthetic corpus, about a minute on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/dev/build.sh --target tessera
exec build/tessera train configs/tiny.yaml "$@"
