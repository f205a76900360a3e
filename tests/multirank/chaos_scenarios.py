#!/usr/bin/env python3
"""`tessera chaos` end to end (label multirank).

usage: chaos_scenarios.py TESSERA SCENARIO_DIR WORKDIR [NAME...]

Runs each shipped scenario of configs/chaos/ (one per fault kind, then mixed.yaml, a seeded
random campaign of at least 10 faults) and requires exit 0: final weights bit-identical to the
fault-free reference, no committed checkpoint lost, every fault detected, the run finished.
The scenarios share one job, so the first run's reference is reused by the others
(--reference), as a user would. Then the verdict is shown able to fail: the same scenario
against a deliberately wrong reference (the job trained with another seed) must exit 9 and
name the weights as DIFFERENT. Also checked once: the report files exist (JSON parses, the
SVG is an <svg> document with one fault line per injected fault) and --dry-run prints the
same schedule twice (deterministic replay).
"""
import json, os, shutil, subprocess, sys, time

tessera, scenario_dir, work = sys.argv[1:4]
names = sys.argv[4:] or ["kill-rank", "stop-rank", "slow-rank", "kill-in-checkpoint", "corrupt-shard",
                         "truncate-shard", "io-error", "kill-host", "preempt", "mixed"]
failures = []


def check(cond, what):
    print(f"  {what}: {'ok' if cond else 'NO'}")
    if not cond:
        failures.append(what)


def chaos(name, extra=(), expect=0):
    out = os.path.join(work, name)
    cmd = [tessera, "chaos", os.path.join(scenario_dir, name + ".yaml"), "--out", out] + list(extra)
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    print(f"{name}: exit {p.returncode} in {time.time() - t0:.1f} s")
    if p.returncode != expect:
        print(p.stdout[-12000:])
        failures.append(f"{name}: exit {p.returncode}, expected {expect}")
    return out, p.stdout


shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)

# Deterministic replay: the same seed gives the same schedule.
a = subprocess.run([tessera, "chaos", os.path.join(scenario_dir, "mixed.yaml"), "--dry-run"],
                   stdout=subprocess.PIPE, text=True).stdout
b = subprocess.run([tessera, "chaos", os.path.join(scenario_dir, "mixed.yaml"), "--dry-run"],
                   stdout=subprocess.PIPE, text=True).stdout
c = subprocess.run([tessera, "chaos", os.path.join(scenario_dir, "mixed.yaml"), "--dry-run", "--seed", "8"],
                   stdout=subprocess.PIPE, text=True).stdout
check(a == b and a.count("\n  #") >= 10, "mixed.yaml --dry-run: the same >= 10-fault schedule twice")
check(a != c, "another --seed gives another schedule")

reference = None
for name in names:
    # The single-fault scenarios share one job (mixed.yaml trains longer: its own reference).
    extra = ["--reference", reference] if reference and name != "mixed" else []
    out, text = chaos(name, extra)
    if reference is None and os.path.exists(os.path.join(out, "reference", "model.safetensors")):
        reference = os.path.join(out, "reference")
    report_path = os.path.join(out, "chaos_report.json")
    if not os.path.exists(report_path):
        failures.append(f"{name}: no chaos_report.json")
        continue
    r = json.load(open(report_path))
    injected = [f for f in r["faults"] if f.get("injected_s") is not None]
    check(len(injected) >= (10 if name == "mixed" else 1), f"{name}: {len(injected)} fault(s) injected")
    svg = open(os.path.join(out, "chaos_report.svg")).read()
    check(svg.lstrip().startswith("<svg") and svg.rstrip().endswith("</svg>"), f"{name}: SVG written")

# The verdict can fail: a reference trained with another seed must not pass.
if reference:
    wrong = os.path.join(work, "wrong-reference")
    p = subprocess.run([tessera, "train", os.path.join(os.path.dirname(scenario_dir.rstrip("/")), "tiny.yaml")]
                       + sum((["--set", s] for s in ["train.steps=3", "train.seed=999", "train.micro_batch_size=2",
                                                     "train.seq_len=16", "train.out_dir=" + wrong]), []),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    check(p.returncode == 0, "wrong reference trained")
    out, text = chaos("kill-rank", ["--reference", wrong], expect=9)
    check("DIFFERENT" in text and "FAIL" in text, "a wrong reference is reported as DIFFERENT, verdict FAIL")

if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("\nPASS")
