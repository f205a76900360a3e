"""LoRA fine-tuning (finetune.lora, models/lora.h) under real mpirun, from a base model file.

Usage: lora.py TESSERA MPIEXEC CONFIG WORK [MPIRUN_FLAGS...]

  * The base: a two-step run of CONFIG, its model.safetensors. Every LoRA run starts from it
    (init_from) with rank-4 adapters on every projection and trains 4 steps.
  * One rank (grad_accum_steps 2) is the reference. Its merged export minus (alpha/r) B A is the
    base again (within float rounding of the merge): the base stayed frozen. Its adapters moved,
    adapter_model.safetensors holds PEFT's names and shapes, adapter_config.json PEFT's fields,
    and memory.json shows gradients and optimizer state for the adapters only.
  * dp 2 under ZeRO 0, 1 and 3 (grad_accum_steps 1) and pp 2: adapters BIT-IDENTICAL to the
    reference (the same sums in the same order, as without LoRA: dp_equivalence.py).
    tp 2, tp 2 with sequence parallelism and tp 2 x pp 2: close (tp sums partial products in
    another order): max |diff| <= 1e-6 + 1e-4 max|w|.
  * base_dtype bf16 (the frozen base rounded to bf16): trains and stays close to the reference
    (RMS of the adapters' difference <= 5% of their RMS).
  * Checkpoints hold the adapters only (param/, exp_avg/, exp_avg_sq/ of each adapter); stopped
    after step 2 and resumed to step 4 (resume=auto; the base read again from init_from):
    adapters bit-identical to the uninterrupted run; `tessera ckpt export` of that checkpoint
    gives the run's merged model (base read again from init_from) and, with --adapter, its
    adapter file, bit for bit. A resume from another base is refused (exit 5, naming both
    bases), and the adapters-only checkpoint as a full model's init_from too (exit 4).
  * Dropout 0.1 on the adapters' input: the masks are drawn per micro-batch of the global
    batch and per one-rank element, so dp 2 and pp 2 (with full recompute) stay bit-identical
    to one rank, tp 2 with sequence parallelism close, and a resume draws the same masks.
  * init_from a checkpoint of the base (not a weights file): the adapters train on its weights.
  * An unknown target is refused with exit 3, naming it.
Prints PASS when every check holds."""
import json, math, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tessera_runs import Runner, check, finish, read_safetensors  # noqa: E402

LORA = ["finetune.lora.rank=4", "finetune.lora.alpha=8", "finetune.lora.targets=[all-linear]"]
runner = Runner(sys.argv, ["train.micro_batch_size=2", "train.seq_len=16", "train.log_interval=4",
                           "train.eval_batches=1", "schedule.warmup_steps=1",
                           "schedule.decay_steps=4", "optimizer.lr=3e-3"])
work, config = runner.work, runner.config
gpt2 = os.path.basename(config) == "tiny.yaml"
failures = []


def adapters(out):
    return read_safetensors(os.path.join(out, "adapter", "adapter_model.safetensors"))


def same_adapters(ref, out, what):
    a = open(os.path.join(ref, "adapter", "adapter_model.safetensors"), "rb").read()
    b = open(os.path.join(out, "adapter", "adapter_model.safetensors"), "rb").read()
    check(a == b, f"{what}: adapters bit-identical to one rank", failures)


def max_diff(a, b):
    return max((abs(x - y) for k in a for x, y in zip(a[k][1], b[k][1])), default=0.0)


def max_abs(a, keys=None):
    return max((abs(x) for k in a if keys is None or keys in k for x in a[k][1]), default=0.0)


def close_adapters(ref, out, what, rel=1e-4, abs_tol=1e-6):
    a, b = adapters(ref), adapters(out)
    worst, scale = max_diff(a, b), max_abs(a)
    tol = abs_tol + rel * scale
    check(a.keys() == b.keys() and worst <= tol,
          f"{what}: adapters max |diff| {worst:.3g} (tolerance {tol:.3g})", failures)


# ---- the base model, and the one-rank reference ------------------------------------------------
base_out, _ = runner.run("base", 1, ["train.steps=2", "checkpoint.dir=" + os.path.join(work, "base_ckpt")])
base_file = os.path.join(base_out, "model.safetensors")
FROM = LORA + ["init_from=" + base_file, "train.steps=4"]
ref, log = runner.run("ref", 1, FROM + ["train.grad_accum_steps=2"])
check("frozen base" in log, "the banner describes the frozen base", failures)

# The merged export is base + (alpha / r) B A, and nothing else moved.
base, merged, ad = read_safetensors(base_file), read_safetensors(os.path.join(ref, "model.safetensors")), adapters(ref)
check(base.keys() == merged.keys(), "the merged export has the base model's tensors", failures)
prefix = "base_model.model.transformer." if gpt2 else "base_model.model."
worst, moved = 0.0, 0
for name in base:
    shape, expect = base[name][0], list(base[name][1])
    module = name[:-len(".weight")]
    a_name = prefix + module + ".lora_A.weight"
    if a_name in ad:
        (r, n_in), A = ad[a_name]
        (n_out, _), B = ad[prefix + module + ".lora_B.weight"]
        for o in range(n_out):
            for c in range(n_in):
                delta = 2.0 * sum(B[o * r + k] * A[k * n_in + c] for k in range(r))  # alpha/r = 8/4
                # GPT-2's Conv1D weights are (in, out) in the file.
                expect[c * n_out + o if gpt2 else o * n_in + c] += delta
        moved += 1
    worst = max([worst] + [abs(x - y) for x, y in zip(merged[name][1], expect)])
check(moved == (4 if gpt2 else 7) * 2 and worst <= 1e-6,
      f"merged = base + (alpha/r) B A on {moved} projections, the rest unchanged (max |diff| "
      f"{worst:.3g})", failures)
b_norm = max_abs(ad, "lora_B")
check(b_norm > 0, f"the adapters trained (max |B| {b_norm:.3g}, zero at init)", failures)
a_shapes = all(v[0][0] == 4 for k, v in ad.items() if "lora_A" in k)
b_shapes = all(v[0][1] == 4 for k, v in ad.items() if "lora_B" in k)
check(a_shapes and b_shapes and all(k.startswith(prefix) for k in ad),
      "adapter tensors: PEFT's names, A (r, in), B (out, r)", failures)
cfg = json.load(open(os.path.join(ref, "adapter", "adapter_config.json")))
check(cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["lora_alpha"] == 8 and
      cfg["base_model_name_or_path"] == base_file and cfg["fan_in_fan_out"] == gpt2 and
      len(cfg["target_modules"]) == (4 if gpt2 else 7),
      f"adapter_config.json: {cfg['peft_type']} r {cfg['r']} alpha {cfg['lora_alpha']} "
      f"targets {cfg['target_modules']}", failures)
n_adapters = sum(len(v[1]) for v in ad.values())
mem = json.load(open(os.path.join(ref, "memory.json")))["ranks"][0]
check(mem["optimizer_state_bytes"] < 3 * 8 * n_adapters and mem["gradients_bytes"] < 3 * 4 * n_adapters,
      f"memory: optimizer state {mem['optimizer_state_bytes']} B and gradients "
      f"{mem['gradients_bytes']} B for {n_adapters} adapter parameters only", failures)

# ---- layouts -----------------------------------------------------------------------------------
for zero in (0, 1, 3):
    out, _ = runner.run(f"dp2_zero{zero}", 2, FROM + ["parallel.dp=2", f"parallel.zero={zero}"])
    same_adapters(ref, out, f"dp 2 ZeRO {zero}")
out, _ = runner.run("pp2", 2, FROM + ["parallel.pp=2", "train.grad_accum_steps=2"])
same_adapters(ref, out, "pp 2")
for name, np_, sets in (("tp2", 2, ["parallel.tp=2"]),
                        ("tp2_sp", 2, ["parallel.tp=2", "parallel.sequence_parallel=true"]),
                        ("tp2_pp2", 4, ["parallel.tp=2", "parallel.pp=2"])):
    out, _ = runner.run(name, np_, FROM + sets + ["train.grad_accum_steps=2"])
    close_adapters(ref, out, name.replace("_", " "))
out, _ = runner.run("base_bf16", 1, FROM + ["train.grad_accum_steps=2", "finetune.lora.base_dtype=bf16"])
a, b = adapters(ref), adapters(out)
rms_d = math.sqrt(sum((x - y) ** 2 for k in a for x, y in zip(a[k][1], b[k][1])) / n_adapters)
rms_w = math.sqrt(sum(x * x for k in a for x in a[k][1]) / n_adapters)
check(rms_d <= 0.05 * rms_w, f"base in bf16: adapters RMS diff {rms_d:.3g} = {rms_d / rms_w:.2g} RMS", failures)

# ---- checkpoints: the adapters only; resume bit-identical --------------------------------------
ckpt = os.path.join(work, "ckpt")
runner.run("first", 1, FROM + ["train.grad_accum_steps=2", "train.steps=2", "checkpoint.dir=" + ckpt])
manifest = json.load(open(os.path.join(ckpt, "step_00000002", "manifest.json")))
names = sorted(t["name"] for t in manifest["tensors"])
check(names and all(".lora_" in n for n in names) and len(names) == 3 * len(ad),
      f"the checkpoint holds {len(names)} tensors, each an adapter's param / exp_avg / exp_avg_sq",
      failures)
out, log = runner.run("resumed", 1, FROM + ["train.grad_accum_steps=2", "checkpoint.dir=" + ckpt,
                                            "resume=auto"])
check("resumed at step 2" in log, "resumed at step 2", failures)
same_adapters(ref, out, "stopped at 2 + resumed")
# The adapters belong to their base: a resume from another base (here: the base's checkpoint,
# the same numbers under another name) is refused naming both, and so is an adapters-only
# checkpoint as a full model's init_from.
_, log = runner.run("other_base", 1, LORA + ["init_from=" + os.path.join(work, "base_ckpt"),
                                             "train.steps=4", "train.grad_accum_steps=2",
                                             "checkpoint.dir=" + ckpt, "resume=auto"], expect=5)
check("trained on the base" in log and base_file in log, "a resume from another base is refused",
      failures)
_, log = runner.run("adapters_as_model", 1, ["init_from=" + ckpt, "train.steps=1"], expect=4)
check("holds the adapters only" in log, "an adapters-only checkpoint is not a model", failures)
# tessera ckpt export of the adapters-only checkpoint: merged with the base its config names,
# or (--adapter) PEFT's files: the run's own exports.
for sets, what in (([], "merged"), (["--adapter"], "adapter")):
    dest = os.path.join(work, "ckpt_export_" + what)
    p = subprocess.run([runner.tessera, "ckpt", "export", ckpt, "--out",
                        dest + (".safetensors" if not sets else "")] + sets,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    mine = dest + ".safetensors" if not sets else os.path.join(dest, "adapter_model.safetensors")
    theirs = os.path.join(out, "model.safetensors" if not sets else "adapter/adapter_model.safetensors")
    check(p.returncode == 0 and open(mine, "rb").read() == open(theirs, "rb").read(),
          f"tessera ckpt export ({what}) of the final checkpoint: the run's {what} export bit for bit",
          failures)
# PEFT's files go into a directory that may hold others (a run's adapter/): again, the same place.
p = subprocess.run([runner.tessera, "ckpt", "export", ckpt, "--out", os.path.join(work, "ckpt_export_adapter"),
                    "--adapter"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
check(p.returncode == 0, "tessera ckpt export --adapter into a directory that holds files", failures)

# ---- dropout: the masks follow the micro-batch's place in the global batch ---------------------
DROP = FROM + ["finetune.lora.dropout=0.1"]
dref, _ = runner.run("drop_ref", 1, DROP + ["train.grad_accum_steps=2"])
check(max_diff(adapters(ref), adapters(dref)) > 0, "dropout 0.1 changes the training", failures)
out, _ = runner.run("drop_dp2", 2, DROP + ["parallel.dp=2", "parallel.zero=1"])
same_adapters(dref, out, "dropout, dp 2 ZeRO 1")
out, _ = runner.run("drop_pp2", 2, DROP + ["parallel.pp=2", "train.grad_accum_steps=2",
                                           "model.recompute=full"])
same_adapters(dref, out, "dropout, pp 2, full recompute")
out, _ = runner.run("drop_tp2_sp", 2, DROP + ["parallel.tp=2", "parallel.sequence_parallel=true",
                                              "train.grad_accum_steps=2"])
close_adapters(dref, out, "dropout, tp 2 sp")
dckpt = os.path.join(work, "drop_ckpt")
runner.run("drop_first", 1, DROP + ["train.grad_accum_steps=2", "train.steps=2", "checkpoint.dir=" + dckpt])
out, _ = runner.run("drop_resumed", 1, DROP + ["train.grad_accum_steps=2", "checkpoint.dir=" + dckpt,
                                               "resume=auto"])
same_adapters(dref, out, "dropout, stopped at 2 + resumed")

# ---- init_from a checkpoint of the base ---------------------------------------------------------
out, _ = runner.run("from_ckpt", 1, LORA + ["init_from=" + os.path.join(work, "base_ckpt"),
                                             "train.steps=4", "train.grad_accum_steps=2"])
close_adapters(ref, out, "init_from the base's checkpoint", rel=1e-6, abs_tol=0)

# ---- refused -------------------------------------------------------------------------------------
_, log = runner.run("bad_target", 1, FROM + ["finetune.lora.targets=[x_proj]"], expect=3)
check("finetune.lora.targets" in log and "x_proj" in log and "is not a projection" in log,
      "an unknown target is refused naming it", failures)
finish(failures)
