#!/usr/bin/env bash
# Installs the Debian 12 packages Tessera needs, only those that are missing.
# Idempotent and quiet; safe to run before every build. Needs root (or sudo) on a fresh machine.
set -euo pipefail
pkgs=(build-essential cmake git pkg-config ca-certificates iproute2
      libopenblas-openmp-dev libdnnl-dev libyaml-cpp-dev librocksdb-dev libboost-dev
      libopenmpi-dev openmpi-bin liburing-dev libgtest-dev libgmock-dev python3-numpy
      libsentencepiece-dev sentencepiece  # tokenizer.model; spm_train/spm_encode: tests' reference
      python3-regex                       # tests' reference pre-tokenizer (\p{L}, \p{N})
      clang libclang-rt-14-dev  # clang + its libFuzzer/sanitizer runtimes: tests/fuzz
      slurm-wlm munge)          # a real Slurm on the test hosts: tests/multirank/slurm_equivalence.py
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
