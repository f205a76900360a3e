#!/usr/bin/env bash
# tools/gpu/h200-check.sh — issue 20's GPU checks in one run on a GPU machine (an H200 lent for a
# few minutes): the CUDA kernel and model tests, the trainer's device path end to end, NCCL on
# one GPU, `tessera bench gpu` of GPT-2 124M in fp32 and bf16, and short `tessera train` runs of
# the tiny GPT-2 and the tiny MoE on the GPU. Run from the repo root after tools/gpu/pack.sh
# packed .gpu/ on the build machine (that machine has Tessera's Debian dependencies; this one
# has only CUDA). Logs go to $OUT (the device tool's output folder) or /tmp/gpu-out; each step
# is bounded by `timeout`, so one hang cannot eat the lease. About 3-4 minutes.
set -uo pipefail
root=$(pwd)
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
log() { echo "== $* ($(date +%T))" | tee -a "$out/summary.txt"; }

# Dependencies into a prefix of their own (unpacking into / could break the image).
deps=/opt/tessera-deps
mkdir -p "$deps"
for d in .gpu/debs/*.deb; do dpkg -x "$d" "$deps"; done
# The tests have the build machine's paths compiled in (TESSERA_SOURCE_DIR, TESSERA_BINARY),
# which pack.sh wrote down: give this tree and the binaries those paths.
read -r src build <.gpu/paths.txt
if [[ $src != "$root" ]]; then mkdir -p "$(dirname "$src")"; [[ -e $src ]] || ln -s "$root" "$src"; fi
mkdir -p "$build" && tar -C "$build" -xJf .gpu/bin.tar.xz
cuda_dirs=$(for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
              find / -xdev -name "$lib" 2>/dev/null | head -1 | xargs -r dirname; done | sort -u | paste -sd:)
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:$deps/lib/x86_64-linux-gnu:$deps/usr/lib/x86_64-linux-gnu/openblas-openmp:$deps/usr/lib/x86_64-linux-gnu/openmpi/lib:$cuda_dirs:${LD_LIBRARY_PATH:-}
export OPAL_PREFIX=$deps/usr PATH=$deps/usr/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
T=$build/tessera
log "machine"; { nvidia-smi; echo "cuda libs: $cuda_dirs"; ldd "$T" | grep 'not found'; } >"$out/machine.txt" 2>&1
head -15 "$out/machine.txt" | tee -a "$out/summary.txt"

run() {  # name timeout_s command...
  local name=$1 limit=$2; shift 2
  log "$name"
  timeout "$limit" "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  echo "   exit $rc" | tee -a "$out/summary.txt"
  tail -4 "$out/$name.txt" | tee -a "$out/summary.txt"
}
cd "$build"
run env 30 "$T" env
run cuda_backend_test 120 tests/cuda_backend_test
run cuda_model_test 120 tests/cuda_model_test
run comm_nccl_test 60 tests/comm_nccl_test
run device_train_test 180 tests/device_train_test
run bench_gpu 240 "$T" bench gpu --precision fp32,bf16 --batch 4 --seq 1024 --steps 10
run train_tiny_gpu 120 "$T" train "$src/configs/tiny.yaml" --set train.device=cuda \
    --set train.steps=300 --set train.out_dir=/tmp/gpu-runs/tiny
run train_moe_gpu 120 "$T" train "$src/configs/moe-tiny.yaml" --set train.device=cuda \
    --set train.steps=100 --set train.out_dir=/tmp/gpu-runs/moe
run train_tiny_gpu_bf16 120 "$T" train "$src/configs/tiny.yaml" --set train.device=cuda \
    --set precision=bf16 --set train.steps=300 --set train.out_dir=/tmp/gpu-runs/tiny_bf16
log "done"
