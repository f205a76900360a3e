#!/usr/bin/env bash
# The threaded units under ThreadSanitizer (CI runs this after the main suite, .ci/run).
#   tools/test-tsan.sh [EXTRA_CTEST_ARGS...]
# Configures a second build directory, build-tsan (TESSERA_TSAN=ON, tests only, no fuzz
# sub-build), builds only the test executables below and runs their tests with CTest. A data
# race, lock-order inversion or similar report fails the test that produced it (halt_on_error:
# TSan exits 66). What runs, and why these:
#   comm_fake_test            the fake backend: N ranks as threads meeting in one hub, aborts
#                             and timeouts that wake waiters from other threads
#   comm_mpi_driver           the MPI communicator's progress thread (singleton and 2 ranks)
#   control_transport_test,   the supervisor's control plane: server and client I/O threads
#   control_plane_test        against the caller's thread
#   launcher_test             ProcessSession (real child processes, signals, waits)
#   checkpointer_test         the async checkpoint writer and its copier thread
# Suppressions: tools/dev/tsan.supp, only for libraries that are not built with TSan (libgomp,
# RocksDB and its compressors); never for Tessera's own code.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(comm_fake_test comm_mpi_driver control_transport_test control_plane_test launcher_test
         checkpointer_test host_tier_test)
# The GoogleTest suites of those files, and the MPI communicator's two CTest entries.
suites='FakeComm|FakeRanks|Reduce|ControlTransport|ControlPlane|ControlProtocol|MpirunCommandTest'
suites+='|MpirunSessionTest|ProcessSessionTest|Checkpointer|CheckpointerFaults|CheckpointerResume'
suites+='|ReplicaChannel|HostTier'
tests="^((${suites})\\.|comm_mpi_singleton\$|comm_mpi_collectives_np2\$)"
bash tools/dev/install-deps.sh
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Release -DTESSERA_TSAN=ON -DTESSERA_FUZZ=OFF \
      -DTESSERA_WERROR=ON "${launcher[@]}" >/dev/null
jobs=$(nproc 2>/dev/null || echo 2)
cmake --build build-tsan -j"$jobs" --target "${targets[@]}"
# GCC 12's libtsan dies at the first dlopen after start-up if a called_from_lib library has
# two executable segments (tools/dev/tsan.supp says why OpenBLAS has no such line): refuse one
# here, by name, instead of letting every test that loads a library fail for no visible reason.
linked=$(ldd build-tsan/tests/checkpointer_test)
while read -r lib; do
  for path in $(awk -v l="$lib" 'index($1, l) == 1 && $3 ~ /^\// {print $3}' <<<"$linked"); do
    if [ "$(readelf -lW "$path" | grep -c 'LOAD.* R E ')" -gt 1 ]; then
      echo "tools/dev/tsan.supp: called_from_lib:$lib names $path, which has more than one" \
           "executable segment; GCC 12's libtsan dies at the next dlopen. Remove the line." >&2
      exit 1
    fi
  done
done < <(sed -n 's/^called_from_lib://p' tools/dev/tsan.supp)
# OpenMP at one thread whatever the code asks (omp_set_num_threads, num_threads clauses):
# libgomp's barriers are invisible to TSan, so a second OpenMP thread makes every parallel
# region look racy (false positives; tools/dev/tsan.supp says why they are not suppressed).
export OMP_THREAD_LIMIT=1
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tools/dev/tsan.supp ${TSAN_OPTIONS:-}"
cd build-tsan
# Left out: FakeComm.ActivityCountsLaunchedOpsBlockedWaitersAndWaitTime asserts that a wait's
# recorded time is at least the wall time it was blocked, while comm/activity.h by design leaves
# out stretches in which the waiting thread woke more than 10 ms late (a starved process).
# TSan's slowdown on a shared 2-core machine makes such late wakeups the rule, so it fails there
# for a reason that is not a race (it also fails now and then in the Release build under load).
skip='^FakeComm\.ActivityCountsLaunchedOpsBlockedWaitersAndWaitTime$'
ctest --output-on-failure -j2 --timeout 600 -R "$tests" -E "$skip" "$@"
