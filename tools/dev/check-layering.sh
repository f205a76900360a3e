#!/usr/bin/env bash
# Checks every #include "..." of the project against the layering table of STYLE.md: a layer
# includes only layers below it. Prints each violation as file:line and exits 1 if any.
set -uo pipefail
cd "$(dirname "$0")/../.."

# folder -> folders it may include (besides itself)
declare -A allowed=(
  [runtime/core]=""
  [runtime/kernels]="runtime/core"
  [comm]="runtime/core"
  [models]="runtime/core runtime/kernels comm"
  [optimizer]="runtime/core runtime/kernels comm"
  [checkpoint]="runtime/core comm"
  [runtime/train]="runtime/core runtime/kernels comm models optimizer checkpoint"
  [runtime/plan]="runtime/core runtime/kernels comm models optimizer checkpoint runtime/train"
  [runtime/supervisor]="runtime/core checkpoint"
  [runtime/chaos]="runtime/core checkpoint runtime/supervisor"
  [tools]="runtime/core runtime/kernels comm models optimizer checkpoint runtime/train runtime/plan runtime/supervisor runtime/chaos tools"
)
layer_of() {
  local f=$1
  for l in runtime/core runtime/kernels runtime/train runtime/plan runtime/supervisor runtime/chaos comm models optimizer checkpoint tools; do
    [[ $f == $l/* ]] && { echo "$l"; return; }
  done
}
bad=0
while IFS= read -r file; do
  src=$(layer_of "$file")
  [[ -z $src ]] && continue
  while IFS=: read -r line inc; do
    dst=$(layer_of "$inc")
    [[ -z $dst || $dst == "$src" ]] && continue
    if [[ " ${allowed[$src]} " != *" $dst "* ]]; then
      echo "$file:$line: $src may not include $inc (layer $dst)"
      bad=1
    fi
  done < <(grep -n '^#include "' "$file" | sed -E 's/^([0-9]+):#include "([^"]+)".*/\1:\2/')
done < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' 2>/dev/null; git ls-files --others --exclude-standard '*.h' '*.cc' '*.cu' '*.cuh' 2>/dev/null)
# Public headers must not expose third-party heavyweights.
if grep -nE '^#include <(yaml-cpp|mpi\.h|nccl\.h|boost/asio|rocksdb|oneapi/dnnl|dnnl)' $(git ls-files '*.h') 2>/dev/null; then
  echo "a public header includes yaml-cpp/MPI/NCCL/Asio/RocksDB/oneDNN (allowed only in .cc files)"
  bad=1
fi
# oneDNN is private to the CPU backend: only runtime/kernels/cpu/*.cc may include it.
while IFS= read -r file; do
  [[ $file == runtime/kernels/cpu/*.cc ]] && continue
  if grep -nE '^#include <(oneapi/dnnl|dnnl)' "$file" /dev/null; then
    echo "$file: oneDNN may be included only by runtime/kernels/cpu/*.cc"
    bad=1
  fi
done < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' 2>/dev/null; git ls-files --others --exclude-standard '*.h' '*.cc' '*.cu' '*.cuh' 2>/dev/null)
[[ $bad -eq 0 ]] && echo "layering: ok"
exit $bad
