#!/usr/bin/env python3
"""Optimizer state on disk (optimizer.offload: nvme) against the same run with it in memory
(label multirank; optimizer/offload_file.h, optimizer/zero.h).

usage: offload_equivalence.py TESSERA MPIEXEC CONFIG WORKDIR [MPIRUN_FLAG...]

AdamW is elementwise and the offload tier only moves its state between memory and disk, so
every comparison here is BIT-IDENTICAL: the final model.safetensors and every shard of the final
checkpoint (parameters or fp32 master weights, both AdamW moments) of a run with the state on
disk equal those of the same layout with it in memory.
  * layouts: one rank fp32, bf16 and fp16 (master weights on disk); dp = 2 under ZeRO 0-3
    (fp32), ZeRO 3 bf16 and ZeRO 2 with full recomputation; tp = 2 x pp = 2 (1f1b, 4 layers)
    fp32 and bf16 with selective recomputation; pp = 2 with gpipe and interleaved (2 virtual
    stages). An MoE CONFIG (num_experts in its model section) runs ep = 2 under ZeRO 1
    and ZeRO 2 bf16 instead (dense and expert state in their own files).
  * memory: with a 1 MiB pool every rank's resident optimizer state (memory.json
    optimizer_state_bytes) is at most the pool, and "offloaded" holds the rest.
  * checkpoints: saved at dp = 2 ZeRO 2 with the state on disk, resumed on one rank with it on
    disk: bit-identical to one rank in memory throughout (the reduction order is the same).
  * leftover files: a file of another run in offload_dir is reported and replaced, the run
    is bit-identical.
  * faults, under `tessera launch` (dp = 2, ZeRO 1, a checkpoint every 4 of 16 steps), each hook
    armed after step 6 (tools/chaos_hooks.h): offload_io_error (ENOSPC on a write in the middle
    of an optimizer step: the rank ends with a restartable error naming the file, the
    supervisor restarts from the last checkpoint), kill_in_offload (SIGKILL in the middle of an
    offloaded step) and kill_in_checkpoint (SIGKILL while a save streams the state from disk):
    each run restarts once and ends bit-identical to the fault-free run.
Prints each run's wall time; exits non-zero with every failure listed.
"""
import glob, hashlib, json, os, signal, subprocess, sys, time

import tessera_runs as tr
from tessera_runs import Runner

STEPS = 8
runner = Runner(sys.argv, [f"train.steps={STEPS}", "train.micro_batch_size=2", "train.seq_len=16",
                           "train.log_interval=4", "train.eval_interval=0",
                           "comm.bucket_mb=0.1", "schedule.warmup_steps=2",
                           f"schedule.decay_steps={STEPS}", "checkpoint.interval_steps=4",
                           "checkpoint.keep_last=10", "optimizer.offload_buffer_mb=1"])
failures = []
moe = int(tr.model_config(runner.config).get("num_experts", "0")) > 0
disk = os.path.join(runner.work, "offload")
os.makedirs(disk, exist_ok=True)
NVME = ["optimizer.offload=nvme", "optimizer.offload_dir=" + disk]


def run(name, np, sets, expect=0):
    out, text = runner.run(name, np, sets + [f"checkpoint.dir={runner.work}/{name}_ckpt"], expect)
    return out, text


def shards(name):
    """The final checkpoint's shard files of run NAME, by file name."""
    steps = sorted(glob.glob(os.path.join(runner.work, name + "_ckpt", "step_*")))
    if not steps:
        return {}
    return {os.path.basename(p): open(p, "rb").read()
            for p in glob.glob(os.path.join(steps[-1], "shard_*.bin"))}


def same_state(ref, out, what):
    """Weights and the final checkpoint's shards (values, m, v) byte for byte."""
    tr.same_bits(os.path.join(runner.work, ref), os.path.join(runner.work, out), what + ": weights",
                 failures)
    a, b = shards(ref), shards(out)
    tr.check(a and a == b, f"{what}: final checkpoint shards ({len(a)}) byte for byte", failures)


def resident_within_pool(out, what):
    m = json.load(open(os.path.join(out, "memory.json")))
    pool = 1 << 20
    worst = max(r["optimizer_state_bytes"] for r in m["ranks"])
    least_disk = min(r["offloaded_bytes"] for r in m["ranks"])
    tr.check(worst <= pool and least_disk > 0,
             f"{what}: resident optimizer state <= pool ({worst} <= {pool} bytes per rank), "
             f"on disk >= {least_disk} bytes", failures)


def checkpoint_digests(root):
    """{step directory: sha256 of every file's name and bytes} for the committed checkpoints."""
    out = {}
    if not os.path.isdir(root):
        return out
    for step in sorted(os.listdir(root)):
        d = os.path.join(root, step)
        if not step.startswith("step_") or "." in step or not os.path.isdir(d):
            continue  # .tmp / .old / .corrupt: not a committed checkpoint
        h = hashlib.sha256()
        try:
            for f in sorted(os.listdir(d)):
                h.update(f.encode())
                with open(os.path.join(d, f), "rb") as fh:
                    h.update(fh.read())
        except OSError:  # removed by retention while we read it: not compared
            continue
        out[step] = h.hexdigest()
    return out


def pair(name, np, sets):
    run(name + "_mem", np, sets)
    out, _ = run(name + "_nvme", np, sets + NVME)
    same_state(name + "_mem", name + "_nvme", name)
    resident_within_pool(out, name)


if moe:
    pair("ep2_zero1", 2, ["parallel.ep=2", "parallel.zero=1"])
    pair("ep2_zero2_bf16", 2, ["parallel.ep=2", "parallel.zero=2", "precision=bf16"])
else:
    pair("one", 1, [])
    pair("one_bf16", 1, ["precision=bf16"])
    pair("one_fp16", 1, ["precision=fp16"])
    for zero in (0, 1, 2, 3):
        pair(f"dp2_zero{zero}", 2, ["parallel.dp=2", f"parallel.zero={zero}"])
    for zero in (1, 2, 3):
        pair(f"dp2_zero{zero}_bf16", 2, ["parallel.dp=2", f"parallel.zero={zero}", "precision=bf16"])
    pair("dp2_zero2_full", 2, ["parallel.dp=2", "parallel.zero=2", "model.recompute=full"])
    pp = ["parallel.tp=2", "parallel.pp=2", "model.num_layers=4", "train.grad_accum_steps=2",
          "parallel.pipeline_schedule=1f1b"]
    pair("tp2_pp2", 4, pp)
    pair("tp2_pp2_bf16", 4, pp + ["precision=bf16", "model.recompute=selective"])
    pair("pp2_gpipe", 2, ["parallel.pp=2", "model.num_layers=4", "train.grad_accum_steps=2",
                          "parallel.pipeline_schedule=gpipe"])
    pair("pp2_interleaved", 2, ["parallel.pp=2", "model.num_layers=4", "train.grad_accum_steps=4",
                                "parallel.pipeline_schedule=interleaved", "parallel.virtual_stages=2"])

    # A checkpoint of dp = 2 ZeRO 2 on disk, resumed by one rank on disk.
    full = ["train.grad_accum_steps=2", f"train.steps={2 * STEPS}", f"schedule.decay_steps={2 * STEPS}"]
    run("reshard_ref", 1, full)
    half = ["parallel.dp=2", "parallel.zero=2", f"schedule.decay_steps={2 * STEPS}"]
    run("reshard", 2, half + NVME)
    out, text = runner.run("reshard", 1, full + NVME + ["resume=auto",
                                                       f"checkpoint.dir={runner.work}/reshard_ckpt"])
    tr.check(f"resumed at step {STEPS}" in text, "dp=2 ZeRO 2 -> one rank: resumed", failures)
    same_state("reshard_ref", "reshard", "dp=2 ZeRO 2 on disk resumed on one rank on disk")

    # A leftover file where rank 0's file goes.
    with open(os.path.join(disk, "tessera-optimizer-rank0.bin"), "wb") as f:
        f.write(b"not an offload file" * 1000)
    out, text = run("leftover_nvme", 1, NVME)
    tr.check("bytes that are not an offload file: not trusted, replaced" in text,
             "a leftover file is reported and replaced", failures)
    same_state("one_mem", "leftover_nvme", "after replacing a leftover file")

    # ---- faults under the supervisor ----------------------------------------------------------
    LSTEPS = 16
    LAUNCH = ["parallel.dp=2", "parallel.zero=1", "train.micro_batch_size=2", "train.seq_len=16",
              "train.log_interval=4", "train.eval_interval=0", "comm.bucket_mb=0.1",
              "schedule.warmup_steps=2", f"schedule.decay_steps={LSTEPS}", f"train.steps={LSTEPS}",
              "checkpoint.interval_steps=4", "checkpoint.keep_last=5", "train.peak_gflops=100",
              "optimizer.offload_buffer_mb=1"] + NVME

    def launch(name, hook=None):
        out = os.path.join(runner.work, name)
        cmd = [runner.tessera, "launch", "-n", "2", runner.config, "--backoff", "0.2"]
        for s in LAUNCH + ["train.out_dir=" + out, "checkpoint.dir=" + out + "/ckpt"]:
            cmd += ["--set", s]
        env = dict(os.environ)
        hooks = os.path.join(runner.work, name + "_hooks")
        if hook:
            os.makedirs(hooks, exist_ok=True)
            plan = {"hooks": [dict(hook, id="h")]}
            json.dump(plan, open(os.path.join(hooks, "hooks.json"), "w"))
            env["TESSERA_CHAOS_HOOKS"] = os.path.join(hooks, "hooks.json")
        log = os.path.join(runner.work, name + ".log")
        t0 = time.time()
        p = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        armed = False
        committed = {}  # the committed checkpoints when the hook was armed: never touched after
        while p.poll() is None and time.time() - t0 < 300:
            if hook and not armed:
                try:
                    done = sum(1 for _ in open(os.path.join(out, "metrics.jsonl")))
                except OSError:
                    done = 0
                committed = checkpoint_digests(os.path.join(out, "ckpt")) if done >= 6 else {}
                if committed:  # mid-run, a save committed: the next step or save meets the hook
                    os.makedirs(os.path.join(hooks, "armed"), exist_ok=True)
                    open(os.path.join(hooks, "armed", "h"), "w").close()
                    armed = True
            time.sleep(0.05)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        text = open(log).read()
        print(f"{name}: exit {p.returncode} in {time.time() - t0:.2f} s")
        if p.returncode != 0:
            print(text[-6000:])
            failures.append(f"{name} exited {p.returncode}")
        if hook:
            tr.check(os.path.exists(os.path.join(hooks, "fired", "h")), f"{name}: the hook fired",
                     failures)
            after = checkpoint_digests(os.path.join(out, "ckpt"))
            kept = [s for s in committed if s in after]  # keep_last 5 keeps all four saves
            tr.check(kept and all(after[s] == committed[s] for s in kept),
                     f"{name}: the checkpoints committed before the fault are unchanged "
                     f"({len(kept)} still kept)", failures)
        return out, text

    ref, _ = launch("launch_ref")
    for name, hook, says in [
            ("offload_io_error", {"kind": "offload_io_error", "errno": "ENOSPC"},
             "No space left on device (chaos hook h)"),
            ("offload_read_error", {"kind": "offload_io_error", "errno": "EIO", "at": "update_read"},
             "Input/output error (chaos hook h)"),
            ("kill_in_offload", {"kind": "kill_in_offload"},
             "SIGKILL in the middle of an offloaded optimizer step"),
            ("kill_in_offloaded_save", {"kind": "kill_in_offload", "at": "checkpoint_read"},
             "SIGKILL in the middle of an offloaded checkpoint save"),
            ("kill_in_checkpoint", {"kind": "kill_in_checkpoint"}, "SIGKILL in the middle of writing")]:
        kind = name
        out, text = launch("launch_" + name, dict(hook, rank=1))
        tr.check(says in text, f"{kind}: the log says what happened", failures)
        tr.check("restart" in text.lower(), f"{kind}: the supervisor restarted the job", failures)
        tr.same_bits(ref, out, f"{kind}: final weights vs the fault-free launch", failures)

if failures:
    print("FAILURES:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("PASS")
