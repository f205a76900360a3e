#!/usr/bin/env python3
"""Per-rank memory under ZeRO on 4 real ranks (label multirank).

usage: zero_memory.py TESSERA MPIEXEC CONFIG WORKDIR [MPIRUN_FLAG...]

Trains one step of a ~10M-parameter GPT-2 (the CONFIG widened by overrides, so that the
per-unit padding of ZeRO pieces, at most kNormBlock = 16384 elements per unit and rank, is
small beside a quarter of the model) on one rank and on 4 ranks under ZeRO 1, 2 and 3, and
reads memory.json (peak reserved bytes per rank and kind):
  * zero 1: optimizer state per rank <= 1/4 of one rank's + padding
  * zero 2: optimizer state and gradients per rank <= 1/4 + padding each
  * zero 3: parameters + gradients + optimizer state per rank <= 1/4 of one rank's + padding;
    the gathered-layer buffers are reported separately ("unit buffers": at most four units'
    parameters and gradients) and printed beside it
  * zero 3 bf16: parameters take 2 bytes per element and the optimizer 12 (fp32 master + m + v)
Padding allowance: units x 16384 elements x bytes per element of the kind, + 4 KiB alignment.
"""
import json, os, sys

from tessera_runs import Runner

LAYERS = 2
UNITS = LAYERS + 2
MODEL = ["model.family=gpt2", "model.hidden_size=512", "model.num_heads=8",
         f"model.num_layers={LAYERS}", "model.vocab_size=8192", "model.max_seq_len=64",
         "data.synthetic.branching=8", "train.steps=1", "train.micro_batch_size=1",
         "train.seq_len=16", "train.eval_batches=1", "train.log_interval=1",
         "comm.timeout_s=300"]
PAD = UNITS * 16384
runner = Runner(sys.argv, MODEL)
failures = []


def run(name, np, sets):
    """memory.json's per-rank records of the run."""
    out, _ = runner.run(name, np, sets)
    with open(os.path.join(out, "memory.json")) as f:
        return json.load(f)["ranks"]


def mib(b):
    return f"{b / 1048576:.1f} MiB"


def check(what, value, bound):
    ok = value <= bound
    print(f"  {what}: {mib(value)} <= {mib(bound)}: {'ok' if ok else 'TOO MUCH'}")
    if not ok:
        failures.append(what)


one = run("dp1_zero0", 1, [])[0]
P, G, O = one["parameters_bytes"], one["gradients_bytes"], one["optimizer_state_bytes"]
print(f"  1 rank: parameters {mib(P)}, gradients {mib(G)}, optimizer {mib(O)}")
for zero in (1, 2, 3):
    ranks = run(f"dp4_zero{zero}", 4, ["parallel.dp=4", f"parallel.zero={zero}"])
    for r in ranks:
        tag = f"zero {zero} rank {r['rank']}"
        check(f"{tag} optimizer state", r["optimizer_state_bytes"], O / 4 + 8 * PAD + 4096)
        if zero >= 2:
            check(f"{tag} gradients", r["gradients_bytes"], G / 4 + 4 * PAD + 4096)
        if zero == 3:
            state = r["parameters_bytes"] + r["gradients_bytes"] + r["optimizer_state_bytes"]
            check(f"{tag} parameters+gradients+optimizer", state, (P + G + O) / 4 + 16 * PAD + 8192)
            print(f"    (plus gathered-layer unit buffers {mib(r['unit_buffers_bytes'])})")
ranks = run("dp4_zero3_bf16", 4, ["parallel.dp=4", "parallel.zero=3", "precision=bf16"])
for r in ranks:
    tag = f"zero 3 bf16 rank {r['rank']}"
    check(f"{tag} parameters (2 bytes each)", r["parameters_bytes"], P / 8 + 2 * PAD + 4096)
    check(f"{tag} optimizer (fp32 master + moments)", r["optimizer_state_bytes"],
          O * 3 / 2 / 4 + 12 * PAD + 4096)

if failures:
    sys.exit("FAIL: " + "; ".join(failures))
print("PASS")
