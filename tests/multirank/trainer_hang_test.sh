#!/usr/bin/env bash
# trainer_hang_test.sh TESSERA CONFIG LAUNCHER...: a hung peer in a real training job becomes a
# bounded, named timeout and a clean job exit (issue 3), with the fault injected from OUTSIDE
# the runtime.
#
#   LAUNCHER...  how to start 2 ranks without the "-np 2", e.g. `mpirun --mca pml ob1 ...` or
#                `tools/dev/mpirun.sh`; "-np 2 TESSERA train CONFIG ..." is appended.
#   HANG_EXTRA_SETS (environment, optional): more "--set key=value" words for the job, e.g.
#                "--set parallel.zero=3" so the stuck collective is a per-layer parameter
#                all-gather inside forward/backward rather than a gradient reduction.
#
# Steps: start `tessera train` with dp=2 and comm.timeout_s=5 for far more steps than it will
# run; wait until rank 0 has printed 3 step lines (training is in its collectives); find the
# rank-1 process among mpirun's children by OMPI_COMM_WORLD_RANK in /proc/PID/environ and
# SIGSTOP it. Pass when, on its own, mpirun exits within 30 s of the SIGSTOP with
# kExitCommTimeout (6), rank 0's output names the timeout (group, rank, op, sequence number,
# the 5000 ms bound), and no process of this job is left.
#
# Only the generous bounds are timings (90 s to start, 30 s to exit after a 5 s timeout,
# 10 s for the ranks to be reaped), so a loaded 2-core machine does not make it flaky. The EXIT
# trap resumes and kills every process of this job (the ranks recorded, mpirun, and anything
# whose command line holds this run's unique out_dir) so a failure never leaves a stopped rank
# behind; CTest's TIMEOUT is the backstop for the script itself.
set -uo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 TESSERA CONFIG LAUNCHER..." >&2
  exit 2
fi
tessera=$1 config=$2
shift 2

readonly kTimeoutS=5          # comm.timeout_s given to the job
readonly kStartLimitS=90      # training must print step 3 within this
readonly kExitLimitS=30       # mpirun must exit within this after the SIGSTOP
readonly kReapLimitS=10       # the ranks must be gone within this after mpirun exits
readonly kWantExit=6          # kExitCommTimeout (runtime/core/exit_codes.h)

work=$(mktemp -d "${TMPDIR:-/tmp}/trainer_hang.XXXXXX") || exit 1
out_dir=$work/out
log=$work/job.log
job_pid=""
rank_pids=()     # "pid:starttime" of each rank, so a reused pid is never signalled
passed=0
# shellcheck source=job_lib.sh
source "$(dirname "$0")/job_lib.sh"

# Start time of PID (field 22 of /proc/PID/stat), empty when gone. The command name in field 2
# may hold spaces, so fields are counted after its closing parenthesis.
StartTime() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0; s=${s##*) }; set -- $s; echo "${20}"; }
State() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0; s=${s##*) }; echo "${s%% *}"; }
# True while PID is the same, not yet exited process (a zombie counts as exited).
SameAlive() {
  local pid=${1%%:*} start=${1##*:}
  [[ "$(StartTime "$pid")" == "$start" && "$(State "$pid")" != Z ]]
}
# Processes of this job still running: recorded ranks plus anything naming our out_dir.
Leftovers() {
  local r
  for r in "${rank_pids[@]}"; do SameAlive "$r" && echo "${r%%:*}"; done
  ProcessesOfThisRun
}

Cleanup() {
  local r
  # The recorded ranks first, resumed then killed: a stopped process only takes SIGKILL, and
  # mpirun's own SIGTERM handling would otherwise wait on it.
  for r in "${rank_pids[@]}"; do
    if SameAlive "$r"; then kill -CONT "${r%%:*}" 2>/dev/null; kill -KILL "${r%%:*}" 2>/dev/null; fi
  done
  StopJobAndShowLog
  rm -rf "$work"
}
trap Cleanup EXIT
trap 'echo "FAIL: interrupted"; exit 1' INT TERM

"$@" -np 2 "$tessera" train "$config" \
  --set parallel.dp=2 --set comm.timeout_s=$kTimeoutS --set train.steps=100000 \
  --set train.log_interval=1 --set train.micro_batch_size=2 --set train.seq_len=16 \
  --set train.eval_batches=1 --set train.out_dir="$out_dir" ${HANG_EXTRA_SETS:-} >"$log" 2>&1 &
job_pid=$!
t_launch=$(Now)

# 1. Training is running: 3 progress lines from rank 0.
WaitForSteps 3 $kStartLimitS
echo "training running after $(Elapsed "$t_launch") s"

# 2. The two ranks: mpirun's children, told apart by the rank mpirun put in their environment.
victim=""
for pid in $(pgrep -P "$job_pid"); do
  rank=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
  [[ -n $rank ]] || continue
  start=$(StartTime "$pid")
  [[ -n $start ]] || continue
  rank_pids+=("$pid:$start")
  [[ $rank == 1 ]] && victim=$pid
done
((${#rank_pids[@]} == 2)) || Fail "expected 2 rank processes under mpirun (pid $job_pid), found ${#rank_pids[@]}"
[[ -n $victim ]] || Fail "no child of mpirun has OMPI_COMM_WORLD_RANK=1"

# 3. Hang rank 1 from outside.
kill -STOP "$victim" || Fail "kill -STOP $victim"
t_stop=$(Now)
for _ in $(seq 50); do [[ $(State "$victim") == T ]] && break; sleep 0.1; done
[[ $(State "$victim") == T ]] || Fail "rank 1 (pid $victim) is not stopped (state '$(State "$victim")')"
steps_before=$(StepLines)
echo "SIGSTOP rank 1 (pid $victim) at step $steps_before"

# 4. The job ends on its own, in bounded time.
WaitForJobExit $kExitLimitS "rank 1 was stopped (comm.timeout_s=$kTimeoutS)"
rc=$job_rc
detect_s=$(Elapsed "$t_stop")
echo "job exited with code $rc (want $kWantExit) ${detect_s} s after the SIGSTOP"

# 5. No process of this job is left (mpirun reaps or SIGKILLs them; allow for reaping).
left=$(LeftAfter $kReapLimitS Leftovers)

echo "---- timeout lines ----"
grep -E 'timeout|fatal|MPI_ABORT' "$log"
[[ $rc -eq $kWantExit ]] || Fail "exit code $rc, want $kWantExit (kExitCommTimeout)"
want="tessera: rank 0: fatal: comm timeout: group '[a-z_]+(\\.[0-9]+)?' rank 0/2 [a-z_]+ #[0-9]+ did not complete within ${kTimeoutS}000 ms.*\\(exit code $kWantExit\\)"
grep -Eq -- "$want" "$log" || Fail "output does not name the timeout: $want"
[[ -z $left ]] || Fail "processes of the job still running: $left"
passed=1
echo "PASS: hung rank detected in ${detect_s} s (comm.timeout_s=$kTimeoutS), exit $rc, no stray processes"
