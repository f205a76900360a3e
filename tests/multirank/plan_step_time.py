#!/usr/bin/env python3
"""`tessera plan --layout`'s step time against measured runs (label long: timings).

usage: plan_step_time.py TESSERA MPIEXEC CONFIGS_DIR WORKDIR [MPIRUN_FLAG...]

Measures this machine once (`tessera plan ... this --save-cluster`: the bench's one-thread
GEMM, memory-bandwidth and GELU probes; the links from `tessera bench comm` on 2 ranks), then for each layout of a ~6M-parameter GPT-2 (C 256,
4 layers, 128 tokens x 4 sequences per micro-batch) and its Llama twin trains 8 steps with one
thread per rank and compares the median step time of steps 3-8 with the plan's prediction.
Passes when every layout is within 15 %. Prints the table the README shows. Timings: run on a
quiet machine, not in CI (`ctest -L long`).
"""
import json, os, shutil, statistics, subprocess, sys

from tessera_runs import plan_then_train

tessera, mpiexec, configs, work = sys.argv[1:5]
mpiflags = sys.argv[5:]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
MODEL = ["model.hidden_size=256", "model.num_heads=4", "model.num_layers=4", "model.vocab_size=4096",
         "model.max_seq_len=128", "train.seq_len=128", "train.micro_batch_size=4",
         "data.synthetic.branching=8", "train.steps=8", "train.log_interval=1", "train.eval_batches=1",
         "train.eval_interval=1000", "train.threads=1", "train.peak_gflops=100", "comm.timeout_s=300"]
cluster = os.path.join(work, "cluster.yaml")
tiny = os.path.join(configs, "tiny.yaml")
p = subprocess.run([tessera, "plan", tiny, "this", "--layout", "--save-cluster", cluster],
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
if p.returncode != 0:
    sys.exit("FAIL: measuring this machine: " + p.stdout)
# The links from `tessera bench comm` on 2 ranks: the rank-ordered all-reduce's bus bandwidth
# at 16 MiB and its time at 4 KiB (the latency of one ring pass of 2 ranks: 2 messages).
def bench_comm(size):
    out = subprocess.run([mpiexec, "-np", "2"] + mpiflags + [tessera, "bench", "comm", "--bytes", size,
                         "--iters", "20"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=300).stdout
    for line in out.splitlines():
        if line.strip().startswith("all_reduce kRankOrder"):
            f = line.split()
            return float(f[2]), float(f[4])  # median GB/s, median ms
    sys.exit("FAIL: tessera bench comm printed no all_reduce kRankOrder line:\n" + out)
bandwidth, _ = bench_comm("16MiB")
_, small_ms = bench_comm("4KiB")
latency_us = small_ms * 1000 / 2
text = open(cluster).read()
import re
text = re.sub(r"intra_host: \{[^}]*\}", f"intra_host: {{bandwidth_gbs: {bandwidth}, latency_us: {latency_us:.3g}}}", text)
text = re.sub(r"inter_host: \{[^}]*\}", f"inter_host: {{bandwidth_gbs: {bandwidth}, latency_us: {latency_us:.3g}}}", text)
open(cluster, "w").write(text)
print(text)
LAYOUTS = [  # (name, config, ranks, --set overrides)
    ("dp1", "tiny", 1, []),
    ("dp1_accum2", "tiny", 1, ["train.grad_accum_steps=2"]),
    ("dp2_zero0", "tiny", 2, ["parallel.dp=2"]),
    ("dp2_zero1", "tiny", 2, ["parallel.dp=2", "parallel.zero=1"]),
    ("dp2_zero2", "tiny", 2, ["parallel.dp=2", "parallel.zero=2"]),
    ("dp2_zero3", "tiny", 2, ["parallel.dp=2", "parallel.zero=3"]),
    ("tp2", "tiny", 2, ["parallel.tp=2"]),
    ("tp2_sp", "tiny", 2, ["parallel.tp=2", "parallel.sequence_parallel=true"]),
    ("pp2", "tiny", 2, ["parallel.pp=2", "train.grad_accum_steps=4"]),
    ("pp2_gpipe", "tiny", 2, ["parallel.pp=2", "parallel.pipeline_schedule=gpipe", "train.grad_accum_steps=4"]),
    ("selective", "tiny", 1, ["model.recompute=selective"]),
    ("full", "tiny", 1, ["model.recompute=full"]),
    ("dp2_full", "tiny", 2, ["parallel.dp=2", "model.recompute=full"]),
    ("bf16", "tiny", 1, ["precision=bf16"]),
    ("dp2_zero3_bf16", "tiny", 2, ["parallel.dp=2", "parallel.zero=3", "precision=bf16"]),
    ("nvme", "tiny", 1, ["optimizer.offload=nvme", "optimizer.offload_dir=@work"]),
    ("llama", "llama-tiny", 1, []),
    ("llama_dp2_zero1", "llama-tiny", 2, ["parallel.dp=2", "parallel.zero=1"]),
    ("llama_tp2", "llama-tiny", 2, ["parallel.tp=2"]),
    ("llama_pp2_v2", "llama-tiny", 2, ["parallel.pp=2", "parallel.virtual_stages=2",
                                       "parallel.pipeline_schedule=interleaved", "train.grad_accum_steps=4"]),
]
failures, rows = [], []
only = os.environ.get("PLAN_ONLY")  # a comma list of layout names, to rerun a few
for name, model, ranks, sets in LAYOUTS:
    if only and name not in only.split(","):
        continue
    out = os.path.join(work, name)
    sets = MODEL + [s.replace("@work", work) for s in sets] + ["train.out_dir=" + out]
    config = os.path.join(configs, model + ".yaml")
    done = plan_then_train(tessera, mpiexec, mpiflags, config, cluster, name, ranks, sets, failures)
    if done is None:
        continue
    predicted = done[0]["step_seconds"]
    with open(os.path.join(out, "metrics.jsonl")) as f:
        steps = [json.loads(line) for line in f]
    measured = statistics.median(s["step_s"] for s in steps if s["step"] >= 3)
    err = (predicted - measured) / measured
    rows.append((name, ranks, predicted, measured, err))
    print(f"{name}: predicted {predicted:.4f} s, measured {measured:.4f} s ({100 * err:+.1f} %)")
    if abs(err) > 0.15:
        failures.append(f"{name}: predicted {predicted:.4f} s, measured {measured:.4f} s")
print("\n| layout | ranks | predicted s/step | measured s/step | error |")
print("| --- | --- | --- | --- | --- |")
for name, ranks, q, m, e in rows:
    print(f"| {name} | {ranks} | {q:.4f} | {m:.4f} | {100 * e:+.1f} % |")
if failures:
    sys.exit("FAIL:\n  " + "\n  ".join(failures))
print("PASS")
