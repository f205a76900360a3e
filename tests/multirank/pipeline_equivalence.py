#!/usr/bin/env python3
"""Pipeline-parallel equivalence under real mpirun (label multirank).

usage: pipeline_equivalence.py TESSERA MPIEXEC CONFIG WORKDIR [MPIRUN_FLAG...]

For one model config with model.num_layers=4 (so that pp=2 x virtual_stages=2 and pp=4 divide
the layers), trains 6 steps (micro_batch_size 2, seq_len 16, schedule.decay_steps=6) with
parallel.pp > 1, alone and composed with tensor parallelism, dp and ZeRO, and compares each run
with ONE rank that sees the same global batch. pp does not change the global batch: the
micro-batches of a step are train.grad_accum_steps, the same number for the pipeline run and
the reference; only dp multiplies it (a dp=2 run at accum 4 is compared with one rank at accum
8). Checks:
  * final fp32 weights (model.safetensors, exported in the global one-rank layout: same tensor
    names and sizes) CLOSE: max |diff| <= 1e-5 + 1e-4 * max|w|, and the per-step loss and
    gradient norm (metrics.jsonl) within a relative 1e-5 of the one-rank curve. Not
    bit-identical in general: the gradient norm is summed per stage and then across stages,
    a tied embedding's gradient comes in two parts (first stage: input side, last stage: its
    copy under the LM head) added in another order than on one rank, and with tp the
    row-parallel products and the vocab-parallel softmax are reduced across ranks. A missing, doubled or misrouted
    micro-batch gradient moves weights by ~lr = 3e-3 per step. For an UNTIED model (llama-tiny:
    the embedding lives only on the first stage, the LM head only on the last) the pp-only
    runs are also reported bit-identical or not (informational, not required). Runs:
      - pp=2 with gpipe, 1f1b and interleaved (virtual_stages 2), accum 4, vs one rank accum 4;
      - pp=4 1f1b (one layer per stage), accum 4, vs one rank accum 4;
      - tp=2 x pp=2 x dp=2 (8 ranks) under ZeRO 1, 2 and 3, accum 4, vs one rank accum 8.
    Observed max |diff| (tolerance ~1.1e-4 for both models) / max relative curve diff:
      tiny (tied): every pp-only run 4.95e-6 / 3.2e-8; tp2 x pp2 x dp2 zero 1 2.35e-5 /
      4.7e-6, zero 2 and 3 2.23e-5 / 4.4e-6.
      llama-tiny (untied): every pp-only run BIT-IDENTICAL (the per-stage norm order did not
      change one fp32 weight; the logged double-precision loss and norm differ by ~2e-14);
      tp2 x pp2 x dp2 zero 1/2/3 1.5e-5 / 3.5e-7.
    Interleaved with two blocks per chunk (model.num_layers=8, pp=2, virtual_stages=2, accum 4)
    guards the tied copy's ParamShards slot (it once shared a block's slot: 2.0e-2 on wte;
    now 2.7e-6 on tiny).
  * composition (8 ranks): tp=2 x pp=2 x dp=2, ZeRO 2, bf16, model.recompute=selective,
    optimizer.offload=cpu, sequence_parallel, interleaved schedule (virtual_stages 2), accum 4,
    vs one rank bf16 at accum 8. bf16 storage rounds every parameter and activation; the
    different summation orders of tp, pp and dp flip some of those roundings, which Adam turns
    into up to ~lr updates for elements whose gradient is near zero. So, as in
    dp_equivalence.py for low-precision reductions, the weights are compared by RMS of the
    difference: <= 0.005 * RMS(w), and the loss curve within a relative 2e-3.
    The gradient norm (a sum over every element, each perturbed) drifts more than the loss, so
    its curve tolerance is a relative 2e-2. Observed: tiny 1.8e-3 * RMS(w) (loss 3.9e-4, grad
    norm 2.3e-3), llama-tiny 5.9e-4 * RMS(w) (loss 2.9e-5, grad norm 8.7e-4) with fp32 GEMMs;
    on a CPU with bf16 GEMMs (cpu-bf16: each output gradient is also rounded to bf16 before
    its GEMM, and tp splits which partial sums get rounded) the tiny grad-norm curve reached
    ~1e-2 (AVX512-BF16, Zen 5). A wrong global batch gives ~0.12 * RMS(w) (dp_equivalence.py).
  * checkpoints across layouts (global batch 4 micro-batches = one rank at accum 4): train
    tp=2 x pp=2 x dp=2 ZeRO 1 (accum 2) for 3 steps with checkpoint.interval_steps=2
    (checkpoints at steps 2 and 3), then resume=auto to step 6 (a) at dp=4 (pp 1, tp 1, accum
    1) and (b) on one rank (accum 4); and (c) a one-rank checkpoint at step 3 resumed at pp=2
    interleaved (virtual_stages 2, accum 4). Each resumed run (from its own copy of the step-3
    checkpoint) says "resumed at step 3", its steps 4..6 match the uninterrupted one-rank curve
    (relative 1e-5) and its final weights are close (the tolerance above). Observed: tiny
    3.3e-5 from tp2 x pp2 x dp2 (both resumes), 5.8e-7 one rank -> pp=2; llama-tiny 1.7e-5, and
    one rank -> pp=2 bit-identical.
  * bad input exits with code 3 (bad config) within 20 s, naming the problem: num_layers=3 on
    pp=2 without a split ("does not divide evenly", suggests a parallel.pipeline_split); 1f1b
    with grad_accum_steps=1 < pp=2 (names train.grad_accum_steps); interleaved with
    virtual_stages=1; tp=3 on a 4-head model (names num_heads). An explicit
    `--set parallel.pipeline_split=[1,2]` with pp=2 on 3 layers trains (exit 0) and ends close
    to one rank with 3 layers (observed 6.6e-6 tiny, 0 llama-tiny). Each refusal took ~0.1 s.
~35 s per model here (8-rank runs 2-3 s each).
Prints each run's wall time; exits non-zero after reporting every failed check.
The tied-copy slot, composition, checkpoint and bad-input checks run on the tied GPT-2 config
only (they do not depend on the model family); the Llama config runs each layout's equivalence.
"""
import json, os, shutil, subprocess, sys, time

from tessera_runs import Runner, weights
import tessera_runs as tr

runner = Runner(sys.argv, ["train.steps=6", "train.micro_batch_size=2", "train.seq_len=16",
                           "train.log_interval=1", "train.eval_batches=1", "comm.bucket_mb=0.1",
                           "comm.timeout_s=300", "schedule.warmup_steps=2",
                           "schedule.decay_steps=6", "checkpoint.keep_last=10",
                           "model.num_layers=4"])
work = runner.work
failures = []
t_start = time.time()




def check(cond, what):
    tr.check(cond, what, failures)


def close(ref, out, what, rel=1e-4, abs_tol=1e-5):
    tr.close_weights(ref, out, what, failures, rel, abs_tol)


def close_rms(ref, out, what, rel=0.005):
    tr.close_rms(ref, out, what, failures, rel)


metrics, model_config = tr.metrics, tr.model_config


def run(name, np, sets):
    return runner.run(name, np, sets)










def report_bits(ref, out, what):
    """Informational: whether the safetensors files are byte-for-byte the same."""
    a = open(os.path.join(ref, "model.safetensors"), "rb").read()
    b = open(os.path.join(out, "model.safetensors"), "rb").read()
    print(f"  {what}: {'bit-identical' if a == b else 'not bit-identical (close is required)'}")




def curve(ref, out, what, rel=1e-5, steps=range(1, 7), rel_norm=None):
    """Loss and gradient norm of each step in `steps` within a relative `rel` (the gradient norm
    within `rel_norm` when given) of the reference."""
    mr, mo = metrics(ref), metrics(out)
    missing = [s for s in steps if s not in mo or s not in mr]
    if missing:
        check(False, f"{what}: metrics.jsonl has steps {sorted(mo)}, expected {list(steps)}")
        return
    worst = {"loss": 0.0, "grad_norm": 0.0}
    for s in steps:
        for key in worst:
            worst[key] = max(worst[key], abs(mo[s][key] - mr[s][key]) / abs(mr[s][key]))
    if rel_norm is None:
        w = max(worst.values())
        check(w <= rel, f"{what}: loss/grad-norm curve steps {steps[0]}..{steps[-1]} max rel "
                        f"diff {w:.2g} (tolerance {rel:g})")
    else:
        check(worst["loss"] <= rel, f"{what}: loss curve steps {steps[0]}..{steps[-1]} max rel "
                                    f"diff {worst['loss']:.2g} (tolerance {rel:g})")
        check(worst["grad_norm"] <= rel_norm,
              f"{what}: grad-norm curve steps {steps[0]}..{steps[-1]} max rel diff "
              f"{worst['grad_norm']:.2g} (tolerance {rel_norm:g})")


model = model_config(runner.config)
untied = model.get("tie_embeddings", "true") == "false"
PP2 = ["parallel.pp=2"]
INTERLEAVED = ["parallel.pipeline_schedule=interleaved", "parallel.virtual_stages=2"]
TP_PP_DP = ["parallel.tp=2", "parallel.pp=2", "parallel.dp=2"]

ref4, _ = run("ref_accum4", 1, ["train.grad_accum_steps=4"])
ref8, _ = run("ref_accum8", 1, ["train.grad_accum_steps=8"])

# pp alone: three schedules on 2 stages, 1f1b on 4 (one layer each).
for name, np, sets in (
        ("pp2_gpipe", 2, PP2 + ["parallel.pipeline_schedule=gpipe"]),
        ("pp2_1f1b", 2, PP2 + ["parallel.pipeline_schedule=1f1b"]),
        ("pp2_interleaved", 2, PP2 + INTERLEAVED),
        ("pp4_1f1b", 4, ["parallel.pp=4", "parallel.pipeline_schedule=1f1b"])):
    out, _ = run(name, np, sets + ["train.grad_accum_steps=4"])
    close(ref4, out, name)
    curve(ref4, out, name)
    if untied:
        report_bits(ref4, out, f"{name} (untied model)")

if not untied:
    # Two blocks per chunk: the last stage's tied copy must keep its own ParamShards slot.
    ref4_8, _ = run("ref_accum4_layers8", 1, ["train.grad_accum_steps=4", "model.num_layers=8"])
    out, _ = run("pp2_interleaved_layers8", 2, PP2 + INTERLEAVED + ["train.grad_accum_steps=4",
                                                                     "model.num_layers=8"])
    close(ref4_8, out, "pp2_interleaved_layers8")

else:
    print("tied-copy slot, composition, checkpoints and bad input: run on the tied GPT-2 config only")

# tp x pp x dp under ZeRO (global batch 8 micro-batches).
for zero in (1, 2, 3):
    name = f"tp2_pp2_dp2_zero{zero}"
    out, _ = run(name, 8, TP_PP_DP + [f"parallel.zero={zero}", "train.grad_accum_steps=4"])
    close(ref8, out, name)
    curve(ref8, out, name)

if not untied:
    # Everything at once, against one rank in the same precision.
    bf16, _ = run("ref_bf16_accum8", 1, ["precision=bf16", "train.grad_accum_steps=8"])
    what = "tp2 x pp2 x dp2 zero 2 bf16 selective offload sp interleaved"
    out, _ = run("composition", 8, TP_PP_DP + INTERLEAVED + [
        "parallel.zero=2", "precision=bf16", "model.recompute=selective", "optimizer.offload=cpu",
        "parallel.sequence_parallel=true", "train.grad_accum_steps=4"])
    close_rms(bf16, out, what)
    curve(bf16, out, what, rel=2e-3, rel_norm=2e-2)


    # Checkpoints across layouts (global batch 4 micro-batches).
    def resumed(name, np, sets, ckpt):
        """Resumes from a copy of CKPT (a resumed run saves step 6 into its checkpoint.dir, which
        the next resume from the same directory would pick up)."""
        copy = os.path.join(work, name + "_ckpt")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(ckpt, copy)
        out, log = run(name, np, sets + ["checkpoint.dir=" + copy, "resume=auto"])
        check("resumed at step 3" in log, f"{name}: resumed at step 3")
        close(ref4, out, f"{name}: final weights vs uninterrupted 1 rank")
        curve(ref4, out, f"{name}: continued curve", steps=range(4, 7))


    ckpt = os.path.join(work, "tp2_pp2_dp2_ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    first, _ = run("ckpt_tp2_pp2_dp2_first", 8, TP_PP_DP + [
        "parallel.zero=1", "train.grad_accum_steps=2", "train.steps=3", "checkpoint.dir=" + ckpt,
        "checkpoint.interval_steps=2"])
    curve(ref4, first, "ckpt_tp2_pp2_dp2_first: steps 1..3", steps=range(1, 4))
    steps = sorted(d for d in os.listdir(ckpt) if d.startswith("step_") and "." not in d)
    check(steps == ["step_00000002", "step_00000003"], f"tp2 x pp2 x dp2 checkpoints {steps}")
    resumed("resume_dp4", 4, ["parallel.dp=4"], ckpt)
    resumed("resume_1rank", 1, ["train.grad_accum_steps=4"], ckpt)
    ckpt1 = os.path.join(work, "one_rank_ckpt")
    shutil.rmtree(ckpt1, ignore_errors=True)
    run("ckpt_1rank_first", 1, ["train.grad_accum_steps=4", "train.steps=3", "checkpoint.dir=" + ckpt1])
    resumed("resume_pp2_interleaved", 2, PP2 + INTERLEAVED + ["train.grad_accum_steps=4"], ckpt1)


    # Bad input: refused as a bad config (exit 3) quickly, never a hang.
    def refused(name, np, sets, needles):
        out, cmd = runner.command(name, np, sets + ["train.steps=1"])
        t0 = time.time()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=60)
            rc, log = p.returncode, p.stdout
        except subprocess.TimeoutExpired as e:  # a hang is a failure, reported with what it said
            out_text = e.stdout or ""
            rc, log = "timeout", out_text.decode() if isinstance(out_text, bytes) else out_text
        wall = time.time() - t0
        print(f"{name}: np={np} {' '.join(sets)}: exit {rc} in {wall:.2f} s")
        check(rc == 3 and wall < 20, f"{name}: exit 3 (bad config) within 20 s")
        for needle in needles:
            check(needle in log, f"{name}: says \"{needle}\"")
        if rc != 3 or not all(n in log for n in needles):
            print(log[-3000:])


    refused("bad_layers3_pp2", 2, PP2 + ["model.num_layers=3", "train.grad_accum_steps=2"],
            ["does not divide evenly", "parallel.pipeline_split, e.g. ["])
    refused("bad_1f1b_accum1", 2, PP2 + ["parallel.pipeline_schedule=1f1b",
                                         "train.grad_accum_steps=1"], ["train.grad_accum_steps"])
    refused("bad_interleaved_v1", 2, PP2 + ["parallel.pipeline_schedule=interleaved",
                                            "parallel.virtual_stages=1", "train.grad_accum_steps=2"],
            ["virtual_stages"])
    refused("bad_tp3", 3, ["parallel.tp=3"], ["num_heads"])
    # An explicit uneven split works (a list through --set is parsed as YAML).
    ref3, _ = run("ref_layers3_accum2", 1, ["model.num_layers=3", "train.grad_accum_steps=2"])
    out, _ = run("pp2_split_1_2", 2, PP2 + ["model.num_layers=3", "parallel.pipeline_split=[1,2]",
                                            "train.grad_accum_steps=2"])
    close(ref3, out, "pp2 split [1,2] on 3 layers")
    curve(ref3, out, "pp2 split [1,2] on 3 layers")

else:
    print("tied-copy slot, composition, checkpoints and bad input: run on the tied GPT-2 config only")

print(f"total {time.time() - t_start:.1f} s")
if failures:
    sys.exit("FAIL: " + "; ".join(failures))
print("PASS")
