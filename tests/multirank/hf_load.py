"""init_from a Hugging Face model directory under every layout: each rank reads from the shards
only the elements it holds, straight into its parameter state (runtime/train/hf_load.h).

Usage: hf_load.py TESSERA MPIEXEC CONFIG WORK [MPIRUN_FLAGS...]

  * A directory of f32 shards (exported, 100 KB each, from a two-step run; for llama-tiny with
    q/k/v biases, q/k norms and heads of width 24) loads under one rank, tp 2 x pp 2, dp 2 with ZeRO-3, dp 2 x tp 2 in bf16 with ZeRO-1, and for an MoE
    config ep 2 and ep 2 x tp 2. Each run takes one step at lr 1e-30: an update below half an
    ulp of every non-zero weight, so the final export must be the source's weights bit for bit
    (elements that are exactly 0 in the source may move by < 1e-29; none may move more).
  * The same weights as bf16 shards: tp 2 x pp 2 ends with the one-rank load's weights.
  * A NaN written into a tensor that only pipeline stage 1 reads: the ranks of that stage name
    the file and tensor (read twice), the others exit with the same code naming the rank that
    failed; the job exits 4 and writes no weights and no metrics.
  * Memory (GPT-2 configs): a 32M-parameter GPT-2 (vocabulary 50257, width 512) under
    tp 2 x pp 2. memory.json's init_from_load gives each rank's peak resident growth during
    the load, which must stay within its read buffers (2 threads x 6 MiB) + 8 MiB, far below the 122 MiB
    f32 model that the former loader copied on every rank.
Prints PASS when every check holds."""
import json, os, re, struct, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tessera_runs import Runner, weights  # noqa: E402

# llama-tiny runs with Qwen2's q/k/v biases (split by heads under tp) and Qwen3's q/k norms
# (whole on every tp rank) on heads of their own width.
VARIANT = (["model.qkv_bias=true", "model.qk_norm=true", "model.head_dim=24"]
           if os.path.basename(sys.argv[3]) == "llama-tiny.yaml" else [])
runner = Runner(sys.argv, ["train.micro_batch_size=2", "train.seq_len=16",
                           "train.grad_accum_steps=2"] + VARIANT)
work, tessera, config = runner.work, runner.tessera, runner.config
moe = "moe" in os.path.basename(config)
gpt2 = os.path.basename(config) == "tiny.yaml"
failures = []
TINY_LR = ["train.steps=1", "optimizer.lr=1e-30"]


def export(src, out, dtype):
    cmd = [tessera, "export", config, "--init-from", src, "--out", out, "--dtype", dtype,
           "--max-shard-size", "100KB"] + sum((["--set", s] for s in VARIANT), [])
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(p.stdout.strip())
    if p.returncode != 0:
        sys.exit(f"FAIL: export exited {p.returncode}")


def check_same_weights(src, out, what):
    """Bit for bit where the source is non-zero; exact zeros may take the 1e-30 step."""
    a, b = weights(src), weights(out)
    moved, worst = 0, 0.0
    for name in a:
        for x, y in zip(a[name], b[name]):
            if x != y or struct.pack("<f", x) != struct.pack("<f", y):
                if x != 0.0 or abs(y) > 1e-29:
                    worst = max(worst, abs(x - y))
                moved += 1
    ok = worst == 0.0 and a.keys() == b.keys()
    print(f"  {what}: {'the source weights' if ok else 'DIFFERENT'} "
          f"({moved} exact zeros moved by < 1e-29; worst other change {worst:.3g})")
    if not ok:
        failures.append(what)


# ---- the source: two steps, exported as f32 and bf16 shards ------------------------------------
src, _ = runner.run("src", 1, ["train.steps=2"])
export(os.path.join(src, "model.safetensors"), os.path.join(work, "hf_f32"), "f32")
export(os.path.join(src, "model.safetensors"), os.path.join(work, "hf_bf16"), "bf16")
f32_dir, bf16_dir = os.path.join(work, "hf_f32"), os.path.join(work, "hf_bf16")

layouts = [("one", 1, []),
           ("tp2_pp2", 4, ["parallel.tp=2", "parallel.pp=2"]),
           ("dp2_zero3", 2, ["parallel.dp=2", "parallel.zero=3"]),
           ("dp2_tp2_bf16_zero1", 4, ["parallel.dp=2", "parallel.tp=2", "parallel.zero=1",
                                      "precision=bf16"])]
if moe:
    layouts += [("ep2", 2, ["parallel.ep=2"]),
                ("ep2_tp2", 4, ["parallel.ep=2", "parallel.tp=2"])]
for name, np, sets in layouts:
    out, log = runner.run("f32_" + name, np, TINY_LR + sets + ["init_from=" + f32_dir])
    if "tessera: init_from " + f32_dir + ": read" not in log:
        failures.append(name + ": no load line in the banner")
    check_same_weights(src, out, "f32 shards, " + name)

one, _ = runner.run("bf16_one", 1, TINY_LR + ["init_from=" + bf16_dir])
split, _ = runner.run("bf16_tp2_pp2", 4, TINY_LR + ["parallel.tp=2", "parallel.pp=2",
                                                     "init_from=" + bf16_dir])
check_same_weights(one, split, "bf16 shards, tp2_pp2 against one rank")

# ---- a NaN that only pipeline stage 1 reads (ranks 2 and 3 of tp 2 x pp 2) ---------------------
damaged = os.path.join(work, "hf_nan")
export(os.path.join(src, "model.safetensors"), damaged, "f32")
index = json.load(open(os.path.join(damaged, "model.safetensors.index.json")))["weight_map"]
victim = sorted(n for n in index if re.match(r"(h|model\.layers)\.1\.", n))[0]  # block 1's
shard = os.path.join(damaged, index[victim])
with open(shard, "r+b") as f:
    (hlen,) = struct.unpack("<Q", f.read(8))
    begin = json.loads(f.read(hlen))[victim]["data_offsets"][0]
    f.seek(8 + hlen + begin + 4 * 3)  # its fourth element
    f.write(struct.pack("<f", float("nan")))
out, log = runner.run("nan", 4, TINY_LR + ["parallel.tp=2", "parallel.pp=2",
                                           "init_from=" + damaged], expect=4)
# (Ranks 0 and 1 answer "rank 2 could not load its share" with the same code, unless mpirun
# ends them first: it ends the job at the first rank that exits with an error.)
for want in [f"tensor '{victim}' holds a NaN or Inf", "(read twice)"]:
    if want not in log:
        failures.append(f"damaged shard: no {want!r} in the output")
if os.path.exists(os.path.join(out, "model.safetensors")) or \
        os.path.exists(os.path.join(out, "metrics.jsonl")):
    failures.append("damaged shard: the run wrote weights or metrics")
print(f"  a NaN in {victim}: every rank exits 4, stage 1 names the tensor")

# ---- memory: no copy of the model on any rank ----------------------------------------------------
if gpt2:
    big = ["model.vocab_size=50257", "model.hidden_size=512", "model.num_heads=8",
           "model.num_layers=2"]
    bsrc, _ = runner.run("big_src", 1, ["train.steps=1"] + big)
    model_bytes = os.path.getsize(os.path.join(bsrc, "model.safetensors"))
    out, log = runner.run("big_tp2_pp2", 4, TINY_LR + big + [
        "parallel.tp=2", "parallel.pp=2", "init_from=" + os.path.join(bsrc, "model.safetensors")])
    check_same_weights(bsrc, out, "32M GPT-2, tp2_pp2")
    loads = json.load(open(os.path.join(out, "memory.json")))["init_from_load"]
    bound = (12 + 8) << 20
    for r in loads:
        growth, held = r["peak_rss_growth_bytes"], r["parameters_held"]
        print(f"  rank {r['rank']}: holds {held * 4 / 2**20:.1f} MiB of the "
              f"{model_bytes / 2**20:.1f} MiB model, read {r['bytes_read'] / 2**20:.1f} MiB, "
              f"peak growth {growth / 2**20:.1f} MiB (bound {bound / 2**20:.0f} MiB)")
        if growth < 0 or growth > bound:
            failures.append(f"rank {r['rank']}: peak growth {growth} bytes")
        if held * 4 > 0.6 * model_bytes:
            failures.append(f"rank {r['rank']}: holds {held} parameters: not a share")

if failures:
    sys.exit("FAIL: " + "; ".join(failures))
print("PASS")
