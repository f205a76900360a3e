#!/usr/bin/env bash
# tools/dev/bench-recovery.sh — recovery of a GPT-2 124M-sized job from the memory tier and from
# disk: `tessera launch -n 2 configs/gpt2-124m.yaml` (dp 2, ZeRO 1, micro-batch 1 x 64), rank 1
# SIGKILLed after step 11, once with checkpoints on disk every 4 steps and once with the memory
# tier every 4 steps (/dev/shm, disk only at the end). Prints, from each run's report.json and
# log: detection, failure -> first resumed step, the relaunch to the first step, and the load.
#
# usage: tools/dev/bench-recovery.sh [WORKDIR]   (from the repository root, after a build;
#        about 5 minutes on 2 cores, 8 GiB of memory and 3 GiB of /dev/shm)
set -euo pipefail
work=${1:-/var/tmp/tessera-bench-recovery}
tessera=${TESSERA:-build/tessera}
rm -rf "$work" && mkdir -p "$work"

run() {  # NAME SETS...: the job, rank 1 killed once metrics.jsonl has 11 steps
  local name=$1; shift
  local sets=(--set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch_size=1
              --set train.seq_len=64 --set train.steps=20 --set train.log_interval=5
              --set train.eval_interval=0 --set train.out_dir="$work/$name"
              --set checkpoint.dir="$work/$name/ckpt")
  for s in "$@"; do sets+=(--set "$s"); done
  "$tessera" launch configs/gpt2-124m.yaml "${sets[@]}" > "$work/$name.log" 2>&1 &
  local job=$!
  until [[ -f $work/$name/metrics.jsonl && $(wc -l < "$work/$name/metrics.jsonl") -ge 11 ]]; do
    kill -0 $job 2>/dev/null || { echo "$name ended before step 11"; tail "$work/$name.log"; return 1; }
    sleep 0.2
  done
  local pid="" p
  for p in $(pgrep -f "train.*$work/$name" || true); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then pid=$p; fi
  done
  [[ -n $pid ]] || { echo "$name: rank 1 not found"; return 1; }
  kill -9 "$pid"
  wait $job
  python3 - "$work/$name" "$work/$name.log" "$name" <<'EOF'
import json, re, sys
out, log, name = sys.argv[1:]
f = json.load(open(out + "/launch/report.json"))["failures"][0]
text = open(log).read()
loaded = re.search(r"loaded in ([\d.]+) s", text)
print(f"{name:7s} detected {f['detection_s']:.3f} s; failure -> first resumed step {f['recovery_s']:.1f} s "
      f"(relaunch -> first step {f['load_s']:.1f} s); resumed at step {f['resume_step']} "
      f"(failed at {f['step_at_failure']})" + (f"; memory tier load {loaded.group(1)} s" if loaded else ""))
EOF
}

run disk checkpoint.interval_steps=4
run memory checkpoint.interval_steps=1000 checkpoint.memory_interval_steps=4 \
    checkpoint.memory_dir=/dev/shm/tessera-bench
grep -h "committed:\|held:" "$work/disk.log" "$work/memory.log" | grep -v supervisor | head -4
