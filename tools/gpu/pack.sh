#!/usr/bin/env bash
# tools/gpu/pack.sh — packs what tools/gpu/h200-check.sh needs into .gpu/ (git-ignored), on a
# Debian 12 build machine with the CUDA toolkit, for the GPU machine that runs the check.
#
# That machine has CUDA (cudart, cuBLAS, NCCL), but none of Tessera's Debian dependencies and
# no package registry, and it receives only the working tree (64 MiB at most). So: the built
# binaries (the CLI and the GPU test programs) as one xz tarball, and the Debian packages of
# every non-CUDA shared library they load (OpenMPI with its runtime, OpenBLAS, oneDNN, RocksDB,
# yaml-cpp, ...), fetched here with apt-get download, unpacked there into a prefix of their own.
# usage: tools/gpu/pack.sh [BUILD_DIR]   (default build/; configure it with the CUDA toolkit on)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=$root/.gpu
bins=(tessera tests/cuda_backend_test tests/cuda_model_test tests/device_train_test
      tests/comm_nccl_test)
for b in "${bins[@]}"; do
  [[ -x $build/$b ]] || { echo "pack.sh: $build/$b is missing: build it first" >&2; exit 1; }
done
grep -qx '/.gpu/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpu/' >>"$root/.git/info/exclude"
rm -rf "$out"
mkdir -p "$out/debs"
tar -C "$build" -cJf "$out/bin.tar.xz" "${bins[@]}"
# The packages owning the libraries the binaries load, less the C/C++ runtime every Linux has
# and the CUDA libraries the GPU machine brings; plus OpenMPI's launcher package (a singleton
# MPI_Init starts orted) and its plugins' package.
libs=$(for b in "${bins[@]}"; do ldd "$build/$b"; done | awk '/=>/ {print $3}' | sort -u |
       grep -v '/usr/local/cuda' | xargs -r readlink -f)
pkgs=$(for l in $libs; do dpkg -S "$l" 2>/dev/null | cut -d: -f1; done | sort -u |
       grep -v -x -E 'libc6|libgcc-s1|libstdc\+\+6|zlib1g|libbz2-1.0|libudev1|libcap2|libzstd1|liblzma5')
pkgs="$pkgs openmpi-bin openmpi-common libopenmpi3 libpmix2 libhwloc-plugins libfabric1 libpsm2-2 libucx0 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libpsm-infinipath1 libnuma1 libxnvctrl0 libltdl7"
(cd "$out/debs" && apt-get download $pkgs 2>/dev/null)
echo "$root $build" >"$out/paths.txt"  # compiled into the tests: h200-check.sh recreates them
du -sh "$out"
echo "packed: run on the GPU machine, from the repo root: bash tools/gpu/h200-check.sh"
