#!/usr/bin/env python3
"""Checkpoint resume, resharding and fallback under real mpirun (label multirank).

usage: ckpt_resume.py TESSERA MPIEXEC CONFIG WORKDIR [MPIRUN_FLAG...]

Every run trains the same 8-step job (schedule.decay_steps=8, so stopping early does not change
the learning rates). Checks:
  * interrupted = stopped after step 4 (train.steps=4, checkpoint at the end) then resumed with
    resume=auto to step 8: final weights BIT-IDENTICAL to an uninterrupted run, for 1 rank
    zero 0 fp32, dp=2 zero 3 bf16, dp=2 zero 1 fp16 (dynamic loss scale restored) and dp=4
    zero 2 — same config and layout;
  * killed: SIGKILL of every process of the job soon after the step-4 checkpoint committed
    (a save of a later step may be in flight and never commits), then resume=auto from the
    newest committed checkpoint K: bit-identical to an uninterrupted run of K + 4 steps;
  * resharded: first half on dp=4 zero 3 (accum 1), second half on 1 rank zero 0 (accum 4):
    the same additions in the same order, so bit-identical to 1 rank accum 4; 1 rank ->
    dp=2 zero 2 accum 2: within the summation-tree tolerance of dp_equivalence.py; dp=2
    zero 1 -> dp=4 zero 3 bf16: within bf16 storage's perturbation;
  * init_from a checkpoint (weights, weights + optimizer) trains; a different model is refused;
  * corrupt: one byte of the newest checkpoint's shard flipped: resume says the checkpoint is
    unusable, falls back to the previous one, and still ends bit-identical;
  * all checkpoints corrupt: the run refuses to start with exit code 5.
Prints each run's wall time; exits non-zero on the first failure.
"""
import os, signal, subprocess, sys, time

from tessera_runs import Runner, close_to, same_bits as _same_bits

runner = Runner(sys.argv, ["train.micro_batch_size=2", "train.seq_len=16", "train.log_interval=1",
                           "train.eval_batches=1", "comm.timeout_s=300", "schedule.warmup_steps=2",
                           "schedule.decay_steps=8", "checkpoint.keep_last=10"])
tessera, work = runner.tessera, runner.work
cmd_for, run = runner.command, runner.run
failures = []


def same_bits(ref, out, what):
    _same_bits(ref, out, what, failures)


def close(ref, out, what, rel=1e-4, abs_tol=1e-5):
    close_to(ref, out, what, rel, abs_tol, failures)


def check(cond, what):
    print(f"  {what}: {'ok' if cond else 'NO'}")
    if not cond:
        failures.append(what)


def kill_session(sid):
    """SIGKILL every process of session `sid` (mpirun puts its ranks in their own process
    groups, but they stay in its session), until none is left."""
    for _ in range(100):
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                stat = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == sid and fields[0] != "Z":  # field 6 of stat: session
                pids.append(int(d))
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
    failures.append("processes of the killed job survived")


def interrupted(tag, np, sets):
    ckpt = os.path.join(work, tag + "_ckpt")
    ref, _ = run(tag + "_ref", np, sets + ["train.steps=8"])
    run(tag + "_first", np, sets + ["train.steps=4", "checkpoint.dir=" + ckpt])
    out, log = run(tag + "_resumed", np, sets + ["train.steps=8", "checkpoint.dir=" + ckpt,
                                                 "resume=auto", "checkpoint.interval_steps=2"])
    check("resumed at step 4" in log, f"{tag}: resumed at step 4")
    same_bits(ref, out, f"{tag}: stopped at 4 + resumed vs uninterrupted")
    return ref


# 1. Interrupted and resumed, same layout.
ref1 = interrupted("r1", 1, ["train.grad_accum_steps=2"])
interrupted("dp2_z3_bf16", 2, ["parallel.dp=2", "parallel.zero=3", "precision=bf16"])
interrupted("dp2_z1_fp16", 2, ["parallel.dp=2", "parallel.zero=1", "precision=fp16",
                               "mixed_precision.initial_scale=524288",
                               "mixed_precision.growth_interval=2"])
interrupted("dp4_z2", 4, ["parallel.dp=4", "parallel.zero=2"])

# 2. Killed from outside right after a checkpoint committed.
ckpt = os.path.join(work, "kill_ckpt")
out, cmd = cmd_for("kill_first", 2, ["parallel.dp=2", "parallel.zero=2", "train.steps=400",
                                     "schedule.decay_steps=8", "checkpoint.dir=" + ckpt,
                                     "checkpoint.interval_steps=4", "checkpoint.at_end=false"])
log_path = os.path.join(work, "kill_first.log")
with open(log_path, "w") as log:
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
deadline = time.time() + 300
while time.time() < deadline and p.poll() is None:
    if "step 4 committed" in open(log_path).read():
        break
    time.sleep(0.05)
kill_session(p.pid)
p.wait()
print(f"kill_first: SIGKILL after: {open(log_path).read().count(chr(10))} lines")
# The job may have gone past step 4 before the kill landed: resume continues from the newest
# committed checkpoint K (a multiple of 4; a save in flight never commits) and both runs train
# to K + 4 (the schedule does not depend on train.steps: decay_steps is fixed).
steps = sorted(int(d[5:]) for d in os.listdir(ckpt) if d.startswith("step_") and "." not in d)
print(f"  committed checkpoints after the kill: {steps}")
check(bool(steps), "a checkpoint was committed before the kill")
if steps:
    total = f"train.steps={max(steps) + 4}"
    ref2, _ = run("kill_ref", 2, ["parallel.dp=2", "parallel.zero=2", total])
    out, log = run("kill_resumed", 2, ["parallel.dp=2", "parallel.zero=2", total,
                                       "checkpoint.dir=" + ckpt, "resume=auto",
                                       "checkpoint.interval_steps=4"])
    check(f"resumed at step {max(steps)}" in log, f"resumed at step {max(steps)}")
    same_bits(ref2, out, "killed + resumed vs uninterrupted")

# 3. Resharding.
ref4, _ = run("reshard_ref", 1, ["train.grad_accum_steps=4", "train.steps=8"])
ckpt = os.path.join(work, "reshard_ckpt")
run("reshard_first", 4, ["parallel.dp=4", "parallel.zero=3", "train.steps=4", "checkpoint.dir=" + ckpt])
out, log = run("reshard_second", 1, ["train.grad_accum_steps=4", "train.steps=8",
                                     "checkpoint.dir=" + ckpt, "resume=auto"])
same_bits(ref4, out, "dp=4 zero 3 -> 1 rank zero 0 (same micro-batch order)")
ckpt2 = os.path.join(work, "reshard2_ckpt")
run("reshard2_first", 1, ["train.grad_accum_steps=4", "train.steps=4", "checkpoint.dir=" + ckpt2])
out, _ = run("reshard2_second", 2, ["parallel.dp=2", "parallel.zero=2", "train.grad_accum_steps=2",
                                    "train.steps=8", "checkpoint.dir=" + ckpt2, "resume=auto"])
close(ref4, out, "1 rank -> dp=2 zero 2 accum 2 (different summation tree)")
ckpt3 = os.path.join(work, "reshard3_ckpt")
run("reshard3_first", 2, ["parallel.dp=2", "parallel.zero=1", "train.grad_accum_steps=2",
                          "train.steps=4", "checkpoint.dir=" + ckpt3])
out, _ = run("reshard3_second", 4, ["parallel.dp=4", "parallel.zero=3", "precision=bf16",
                                    "train.steps=8", "checkpoint.dir=" + ckpt3, "resume=auto"])
close(ref4, out, "dp=2 zero 1 -> dp=4 zero 3 bf16 (fp32 master weights carried over)", rel=3e-2, abs_tol=1e-3)

# Fine-tuning from a checkpoint: weights (and optionally moments) of another run; a model that
# does not match is refused naming the tensor.
out, log = run("finetune", 1, ["train.steps=2", "init_from=" + os.path.join(work, "r1_ckpt")])
out, log = run("finetune_opt", 1, ["train.steps=2", "init_from=" + os.path.join(work, "r1_ckpt"),
                                   "init_optimizer=true"])
out, log = run("finetune_bad", 1, ["train.steps=2", "model.num_layers=1",
                                   "init_from=" + os.path.join(work, "r1_ckpt")], expect=4)
check("that this config's model does not" in log or "has no tensor" in log,
      "a different model is refused naming the tensor")

# 4. Corrupt newest checkpoint: fallback.
ckpt = os.path.join(work, "corrupt_ckpt")
run("corrupt_first", 1, ["train.grad_accum_steps=2", "train.steps=4", "checkpoint.dir=" + ckpt,
                         "checkpoint.interval_steps=2"])
shard = os.path.join(ckpt, "step_00000004", "shard_0.bin")
with open(shard, "r+b") as f:
    f.seek(1000)
    b = f.read(1)
    f.seek(1000)
    f.write(bytes([b[0] ^ 0x10]))
out, log = run("corrupt_resumed", 1, ["train.grad_accum_steps=2", "train.steps=8",
                                      "checkpoint.dir=" + ckpt, "resume=auto"])
check("unusable" in log and "falling back to step 2" in log, "corrupt step 4 reported, fell back to step 2")
check("resumed at step 2" in log, "resumed at step 2")
same_bits(ref1, out, "fallback resume vs uninterrupted")
ls = subprocess.run([tessera, "ckpt", "ls", ckpt], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
print(ls.stdout)
check("corrupt" in ls.stdout, "catalog lists the corrupt checkpoint")

# 5. Every checkpoint corrupt: refuse with exit code 5.
ckpt = os.path.join(work, "allbad_ckpt")
run("allbad_first", 1, ["train.steps=2", "checkpoint.dir=" + ckpt])
with open(os.path.join(ckpt, "step_00000002", "shard_0.bin"), "r+b") as f:
    f.truncate(100)
out, log = run("allbad_resumed", 1, ["train.steps=4", "checkpoint.dir=" + ckpt, "resume=auto"], expect=5)
check("no usable checkpoint" in log, "names the problem")

if failures:
    sys.exit("FAIL: " + "; ".join(failures))
print("PASS")
