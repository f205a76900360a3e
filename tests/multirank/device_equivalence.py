#!/usr/bin/env python3
"""train.device: cuda under data parallelism, where no GPU is: the device path of every rank on
the CPU reference dressed as a device (TESSERA_DEVICE_ON_HOST=1, runtime/train/
compute_device.h) against the same layout on cpu (label multirank).

usage: device_equivalence.py TESSERA MPIEXEC CONFIG WORKDIR [MPIRUN_FLAG...]

Each rank's model stages its token ids and reaches the host parameter state through a
DeviceMirrorStore (runtime/train/device_mirror.h); everything crosses exactly, so the final
model.safetensors must be BIT-IDENTICAL to the cpu run's for: dp = 2 under ZeRO 0, 1, 2 and
3, ZeRO 2 with the optimizer state offloaded to host memory (optimizer.offload: cpu), and a
checkpoint saved by a device run at step 4 and resumed by a cpu run (the state is the same
state, so a job may move between devices). On a machine with a GPU this script still runs the
seam, not the GPU: tests/e2e/device_train_test.cc and tests/kernels/cuda_model_test.cc cover
the GPU itself.
Prints each run's wall time; exits non-zero with every failure listed.
"""
import os, sys

import tessera_runs as tr
from tessera_runs import Runner

STEPS = 8
runner = Runner(sys.argv, [f"train.steps={STEPS}", "train.micro_batch_size=2", "train.seq_len=16",
                           "train.log_interval=4", "train.eval_interval=0",
                           "comm.bucket_mb=0.1", "schedule.warmup_steps=2",
                           f"schedule.decay_steps={STEPS}"])
failures = []
ON_HOST = "TESSERA_DEVICE_ON_HOST"


def run(name, np, sets, device):
    """`device`: the run's ranks take the device path (the seam, exported to every rank)."""
    flags = runner.mpiflags
    if device:
        os.environ[ON_HOST] = "1"
        runner.mpiflags = ["-x", ON_HOST] + flags
        sets = sets + ["train.device=cuda"]
    try:
        out, _ = runner.run(name, np, sets)
    finally:
        os.environ.pop(ON_HOST, None)
        runner.mpiflags = flags
    return out


for zero in (0, 1, 2, 3):
    sets = ["parallel.dp=2", f"parallel.zero={zero}"]
    ref = run(f"cpu_zero{zero}", 2, sets, device=False)
    out = run(f"dev_zero{zero}", 2, sets, device=True)
    tr.same_bits(ref, out, f"dp=2 ZeRO {zero}: device path vs cpu", failures)

sets = ["parallel.dp=2", "parallel.zero=2", "optimizer.offload=cpu"]
ref = run("cpu_offload", 2, sets, device=False)
out = run("dev_offload", 2, sets, device=True)
tr.same_bits(ref, out, "dp=2 ZeRO 2 offload cpu: device path vs cpu", failures)

# A device run's checkpoint, resumed on cpu: the job moves between devices bit for bit.
ckpt = os.path.join(runner.work, "moved_ckpt")
ckpt_sets = ["parallel.dp=2", "parallel.zero=1", "checkpoint.dir=" + ckpt,
             "checkpoint.interval_steps=4", "checkpoint.keep_last=10"]
ref = run("cpu_whole", 2, ["parallel.dp=2", "parallel.zero=1"], device=False)
run("dev_first_half", 2, ckpt_sets + ["train.steps=4", "schedule.decay_steps=8"], device=True)
out = run("cpu_second_half", 2, ckpt_sets + ["resume=auto"], device=False)
tr.same_bits(ref, out, "device run to step 4, resumed on cpu to step 8 vs cpu throughout",
             failures)

tr.finish(failures)
