#!/usr/bin/env python3
"""Mixture-of-experts models under data, tensor and pipeline parallelism, and their checkpoints
(label multirank; model.moe, models/moe.h).

usage: moe_equivalence.py TESSERA MPIEXEC CONFIG WORKDIR [MPIRUN_FLAG...]

CONFIG is an MoE config (configs/moe-tiny.yaml: GPT-2, softmax top-2, Switch aux + z-loss;
configs/moe-deepseek-tiny.yaml: Llama, sigmoid group-limited top-2, a shared expert, the
sequence-wise aux loss and the aux-loss-free bias). Every run trains 6 steps of the same job
(schedule.decay_steps=6). Checks, each against one rank with the same global batch:
  * dp = 2 under ZeRO 0, 1, 2 and 3 vs one rank with grad_accum_steps = 2: BIT-IDENTICAL final
    weights and per-step routing counts (metrics.jsonl). Routing, capacity and the auxiliary
    losses are per micro-batch; the dense and expert gradients are the same per-micro-batch
    sums in the same order (dp_equivalence.py); the expert units are ZeRO units like any other;
    the balancing bias moves by counts summed over the dp ranks, which are the micro-batches'.
  * the same with capacity_factor 1.0 (tokens dropped): bit-identical, ZeRO 1.
  * tp = 2 vs one rank: the router and experts are whole on each tp rank; the attention's
    partial sums are added in another order, so the weights are close, not equal: RMS of the
    difference <= 0.005 RMS(w) (observed below; a dropped or doubled expert gradient is ~0.1).
  * pp = 2 (the expert units travel with their blocks' stages) vs one rank: bit-identical where
    the pipeline computes what one rank computes; required close (1e-4 relative).
  * checkpoints: stopped after step 3 and resumed to 6 (the bias and routing state restored):
    bit-identical to the uninterrupted run; resharded from dp=2 ZeRO 3 to one rank accum 2:
    bit-identical.
Prints each run's wall time; exits non-zero on the first failure.
"""
import json, os, sys

import tessera_runs as tr
from tessera_runs import Runner

# Evaluations every 2 steps: an evaluation must record no routing (else the bias would move
# with it, and a pipeline's would differ from one rank's).
runner = Runner(sys.argv, ["train.steps=6", "train.micro_batch_size=2", "train.seq_len=16",
                           "train.log_interval=6", "train.eval_batches=1", "train.eval_interval=2",
                           "comm.bucket_mb=0.1",
                           "comm.timeout_s=300", "schedule.warmup_steps=2",
                           "schedule.decay_steps=6", "checkpoint.keep_last=10"])
failures = []


def run(name, np, sets):
    return runner.run(name, np, sets)[0]


routing = tr.moe_routing


def same(ref, out, what):
    tr.same_bits(ref, out, what + ": weights", failures)
    tr.check(routing(ref) == routing(out), what + ": per-step routing counts and bias", failures)


ref = run("ref_accum2", 1, ["train.grad_accum_steps=2"])
tr.check(any(c for step in routing(ref) for (_, c, _, _) in step), "routing recorded", failures)
for zero in (0, 1, 2, 3):
    out = run(f"dp2_zero{zero}", 2, ["parallel.dp=2", f"parallel.zero={zero}"])
    same(ref, out, f"dp=2 zero {zero}")

cap_ref = run("ref_accum2_capacity", 1, ["train.grad_accum_steps=2", "model.moe.capacity_factor=1.0"])
out = run("dp2_zero1_capacity", 2, ["parallel.dp=2", "parallel.zero=1", "model.moe.capacity_factor=1.0"])
same(cap_ref, out, "dp=2 zero 1 capacity 1.0")
with open(os.path.join(cap_ref, "metrics.jsonl")) as f:
    dropped = max(l["dropped"] for r in map(json.loads, f) for l in r["moe"])
tr.check(dropped > 0, f"capacity 1.0 dropped tokens (max fraction {dropped:.3f})", failures)

# fp16: the loss scaler's skips and scale changes are decided from every rank's gradients,
# so dp = 2 follows the one rank's fp16 run bit for bit.
fp16_ref = run("ref_accum2_fp16", 1, ["train.grad_accum_steps=2", "precision=fp16"])
out = run("dp2_zero1_fp16", 2, ["parallel.dp=2", "parallel.zero=1", "precision=fp16"])
same(fp16_ref, out, "dp=2 zero 1 fp16")

ref1 = run("ref_accum1", 1, [])
out = run("tp2", 2, ["parallel.tp=2"])
tr.close_rms(ref1, out, "tp=2 vs one rank", failures, 0.005)

layers = int(tr.model_config(runner.config).get("num_layers", "2"))
split = f"[{layers // 2},{layers - layers // 2}]"
out = run("pp2", 2, ["parallel.pp=2", "train.grad_accum_steps=2", f"parallel.pipeline_split={split}"])
tr.close_weights(ref, out, f"pp=2 (layers {split}) vs one rank", failures, 1e-4, 1e-5)
tr.check(routing(ref) == routing(out), "pp=2: per-step routing counts and bias", failures)

# Checkpoints: stop after 3 steps, resume to 6.
ck = os.path.join(runner.work, "ckpt_stop")
run("stop3", 1, ["train.grad_accum_steps=2", "train.steps=3", f"checkpoint.dir={ck}"])
out = run("resume6", 1, ["train.grad_accum_steps=2", f"checkpoint.dir={ck}", "resume=auto"])
tr.same_bits(ref, out, "stopped at 3, resumed to 6: weights", failures)
tr.check(routing(ref)[3:] == routing(out)[-3:], "resumed: routing counts and bias of steps 4-6",
         failures)
# Resharded: dp=2 zero 3 for 3 steps, one rank accum 2 for the rest.
ck = os.path.join(runner.work, "ckpt_reshard")
run("dp2_zero3_stop3", 2, ["parallel.dp=2", "parallel.zero=3", "train.steps=3", f"checkpoint.dir={ck}"])
out = run("reshard_resume6", 1, ["train.grad_accum_steps=2", f"checkpoint.dir={ck}", "resume=auto"])
tr.same_bits(ref, out, "dp=2 zero 3 -> one rank accum 2: weights", failures)
# Across model-parallel layouts: pp = 2 for 3 steps, tp = 2 for the rest (summation orders
# differ, so close, as tp = 2 alone is).
ck = os.path.join(runner.work, "ckpt_pp_tp")
run("pp2_stop3", 2, ["parallel.pp=2", "train.grad_accum_steps=2", f"parallel.pipeline_split={split}",
                     "train.steps=3", f"checkpoint.dir={ck}"])
out = run("tp2_resume6", 2, ["parallel.tp=2", "train.grad_accum_steps=2", f"checkpoint.dir={ck}",
                             "resume=auto"])
tr.close_rms(ref, out, "pp=2 -> tp=2 resume: weights vs one rank", failures, 0.005)

if failures:
    print("FAIL: " + "; ".join(failures))
    sys.exit(1)
print("PASS")
