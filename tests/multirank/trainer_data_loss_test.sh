#!/usr/bin/env bash
# trainer_data_loss_test.sh TESSERA CONFIG LAUNCHER...: a token shard truncated under a running
# dp=2 `tessera train` ends the whole job, bounded, with kExitBadInput (4) and the file and token
# position named — the rank that meets the error ends the job (AbortJob) instead of leaving its
# peer waiting in a collective until comm.timeout_s.
#
#   LAUNCHER...  how to start 2 ranks without the "-np 2", e.g. `mpirun --mca pml ob1 ...`.
#
# Steps: tokenize 400 kB into one train shard (+ index); start the job for far more steps than
# it will run, with comm.timeout_s=60; wait for 3 progress lines; truncate the shard to its
# header and 10 tokens from outside (every window now lies past its end). Pass when mpirun exits
# within 30 s with code 4 — well inside the 60 s a waiting peer would need to time out — a rank
# says "fatal: ...train_000000.bin: truncated while the run reads it ... token position", and no
# process of the job is left.
#
# Only generous bounds are timings (90 s to start, 30 s to exit, 10 s to reap). The EXIT trap
# kills whatever of this job is left (mpirun, and anything naming this run's out_dir).
set -uo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 TESSERA CONFIG LAUNCHER..." >&2
  exit 2
fi
tessera=$1 config=$2
shift 2

readonly kTimeoutS=60
readonly kStartLimitS=90
readonly kExitLimitS=30
readonly kReapLimitS=10
readonly kWantExit=4          # kExitBadInput (runtime/core/exit_codes.h)

work=$(mktemp -d "${TMPDIR:-/tmp}/trainer_data_loss.XXXXXX") || exit 1
out_dir=$work/out
data=$work/data
log=$work/job.log
job_pid=""
passed=0

# shellcheck source=job_lib.sh
source "$(dirname "$0")/job_lib.sh"
Cleanup() { StopJobAndShowLog; rm -rf "$work"; }
trap Cleanup EXIT
trap 'echo "FAIL: interrupted"; exit 1' INT TERM

head -c 400000 /dev/urandom | base64 -w 100 >"$work/input.txt"
"$tessera" data tokenize --input "$work/input.txt" --out "$data" --val-fraction 0 ||
  Fail "tokenize failed"
shard=$data/train_000000.bin
[[ -f $shard && -f $data/index.json ]] || Fail "tokenize wrote no $shard or index"

"$@" -np 2 "$tessera" train "$config" \
  --set parallel.dp=2 --set comm.timeout_s=$kTimeoutS --set train.steps=100000 \
  --set train.log_interval=1 --set train.micro_batch_size=2 --set train.seq_len=16 \
  --set data.source=shards --set "data.train=$data/train_*.bin" \
  --set train.out_dir="$out_dir" >"$log" 2>&1 &
job_pid=$!

WaitForSteps 3 $kStartLimitS

truncate -s $((32 + 2 * 10)) "$shard" || Fail "truncate $shard"
t_cut=$(Now)
echo "truncated $shard at step $(StepLines)"

WaitForJobExit $kExitLimitS "the shard was truncated"
rc=$job_rc
elapsed=$(Elapsed "$t_cut")
echo "job exited with code $rc (want $kWantExit) ${elapsed} s after the truncation"

left=$(LeftAfter $kReapLimitS ProcessesOfThisRun)

grep -E 'fatal|MPI_ABORT' "$log"
[[ $rc -eq $kWantExit ]] || Fail "exit code $rc, want $kWantExit (kExitBadInput)"
want="tessera: rank [01]: fatal: .*${shard}: truncated while the run reads it.*token position.*\\(exit code $kWantExit\\)"
grep -Eq -- "$want" "$log" || Fail "output does not name the file and position: $want"
[[ -z $left ]] || Fail "processes of the job still running: $left"
passed=1
echo "PASS: truncated shard ended the dp=2 job in ${elapsed} s with exit $rc, no stray processes"
