# tests/multirank/job_lib.sh — what the shell tests that run one real mpirun job from outside
# share (trainer_hang_test.sh, trainer_data_loss_test.sh): waiting on its progress and its
# exit with generous bounds, and leaving no process of it behind, whatever happened.
#
# Sourced, not run. The caller sets: job_pid (mpirun's pid, "" once reaped), out_dir (unique
# to this run: every process whose command line names it belongs to the job), log (the job's
# output) and passed (1 once every check held).

Fail() { echo "FAIL: $*"; exit 1; }
Now() { date +%s.%N; }
Elapsed() { awk -v a="$1" -v b="$(Now)" 'BEGIN{printf "%.2f", b-a}'; }
# Progress lines rank 0 has printed so far.
StepLines() { grep -Ec '^step +[0-9]+/' "$log"; }

# Waits up to LIMIT seconds for N progress lines; fails the test otherwise, saying whether the
# job ended first or the time ran out.
WaitForSteps() {
  local n=$1 limit=$2 deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    (($(StepLines) >= n)) && return 0
    kill -0 "$job_pid" 2>/dev/null || Fail "the job ended before step $n"
    sleep 0.2
  done
  Fail "training did not reach step $n within ${limit} s"
}

# Waits up to LIMIT seconds for mpirun to exit on its own and reaps it: sets job_rc and clears
# job_pid. Fails the test, saying WHY it should have ended, when it is still running.
WaitForJobExit() {
  local limit=$1 why=$2 deadline=$((SECONDS + $1))
  while kill -0 "$job_pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  kill -0 "$job_pid" 2>/dev/null && Fail "mpirun still running ${limit} s after $why: the job hangs"
  wait "$job_pid"
  job_rc=$?
  job_pid=""
}

# Pids of processes whose command line names out_dir (the ranks, and any child they left).
ProcessesOfThisRun() { pgrep -f -- "$out_dir" 2>/dev/null; }

# The EXIT trap's part: mpirun asked to stop, then killed; every process naming out_dir resumed
# (a stopped process only takes SIGKILL) and killed; mpirun reaped; the job's output printed
# when the test did not pass.
StopJobAndShowLog() {
  local pid
  if [[ -n $job_pid ]] && kill -0 "$job_pid" 2>/dev/null; then
    kill -TERM "$job_pid" 2>/dev/null
    for _ in $(seq 20); do kill -0 "$job_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$job_pid" 2>/dev/null
  fi
  for pid in $(ProcessesOfThisRun); do kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; done
  [[ -n $job_pid ]] && wait "$job_pid" 2>/dev/null
  if [[ $passed -ne 1 ]]; then
    echo "---- job output ($log) ----"
    cat "$log" 2>/dev/null
  fi
  return 0
}

# Waits up to LIMIT seconds for LISTER (a function printing pids) to print nothing, then prints
# on one line whatever it still prints: the processes mpirun failed to reap in time.
LeftAfter() {
  local limit=$1 lister=$2 deadline=$((SECONDS + $1))
  while [[ -n $($lister) ]] && ((SECONDS < deadline)); do sleep 0.2; done
  $lister | sort -u | tr '\n' ' '
}
