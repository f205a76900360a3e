#!/usr/bin/env bash
# tests/fuzz/run_fuzz.sh — runs one libFuzzer target the way ctest does (tests/fuzz/README.md).
#
#   run_fuzz.sh replay BINARY NAME                 every seed and regression input once
#   run_fuzz.sh fuzz   BINARY NAME WORK SECONDS    fuzz for SECONDS from them
#
# NAME picks tests/fuzz/corpus/NAME, tests/fuzz/regressions/NAME and tests/fuzz/dict/NAME.dict.
# New inputs go to WORK/corpus (emptied first: the repository is never written), crash,
# leak, timeout and OOM inputs to WORK/artifacts/. Any of those fails the run: libFuzzer exits
# non-zero on a crash, a sanitizer report, a leak, an input slower than the per-input timeout,
# an RSS above the limit, or a single allocation above the malloc limit.
set -euo pipefail
mode=$1 binary=$2 name=$3
here=$(cd "$(dirname "$0")" && pwd)
inputs=()
for dir in "$here/corpus/$name" "$here/regressions/$name"; do
  [[ -d $dir ]] && inputs+=("$dir")
done
[[ ${#inputs[@]} -gt 0 ]] || { echo "run_fuzz: no corpus for $name" >&2; exit 1; }
# Inputs are at most a few tens of KiB: 10 s for one, 2 GiB in all or 256 MiB in one
# allocation can only mean a hang or a length field believed.
limits=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

case $mode in
  replay)
    mapfile -t files < <(find "${inputs[@]}" -type f ! -name '.*' | sort)
    echo "run_fuzz: replaying ${#files[@]} inputs of $name"
    exec "$binary" "${limits[@]}" "${files[@]}"
    ;;
  fuzz)
    work=$4 seconds=$5
    rm -rf "$work/corpus"
    mkdir -p "$work/corpus" "$work/artifacts"
    dict=()
    [[ -f $here/dict/$name.dict ]] && dict=(-dict="$here/dict/$name.dict")
    echo "run_fuzz: fuzzing $name for $seconds s; crashing inputs go to $work/artifacts/"
    exec "$binary" "${limits[@]}" "${dict[@]}" -max_total_time="$seconds" -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/" "$work/corpus" "${inputs[@]}"
    ;;
  *)
    echo "usage: $0 replay BINARY NAME | fuzz BINARY NAME WORK SECONDS" >&2
    exit 2
    ;;
esac
