"""Shared by the multirank test scripts: start `tessera train` on one rank or under mpirun,
read the final weights, and compare two runs' weights (bit for bit or within a tolerance).
Comparisons append a description to `failures` instead of stopping, so a script reports
every mismatch of a run before it fails."""
import json, os, shutil, struct, subprocess, sys, time
from array import array


class Runner:
    """`run(name, np, sets)` trains CONFIG with `--set` for COMMON + sets into WORK/name."""

    def __init__(self, argv, common):
        self.tessera, self.mpiexec, self.config, self.work = argv[1:5]
        self.mpiflags = argv[5:]
        # Every run of a script starts from an empty work directory: checkpoints a previous
        # run left there would be resumed (or refused) instead of trained afresh.
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work, exist_ok=True)
        # The MFU denominator is given rather than measured: the sgemm measurement costs ~0.7 s
        # per run on rank 0 (more with every core shared), and no check here reads MFU.
        self.common = ["train.peak_gflops=100"] + common

    def command(self, name, np, sets):
        out = os.path.join(self.work, name)
        cmd = [self.tessera, "train", self.config] + sum(
            (["--set", s] for s in self.common + sets), []) + ["--set", "train.out_dir=" + out]
        if np > 1:
            cmd = [self.mpiexec, "-np", str(np)] + self.mpiflags + cmd
        return out, cmd

    def run(self, name, np, sets, expect=0):
        """Returns (out_dir, output); exits the script if the exit code is not `expect`."""
        out, cmd = self.command(name, np, sets)
        t0 = time.time()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=600)
        print(f"{name}: np={np} {' '.join(sets)}: exit {p.returncode} in {time.time() - t0:.2f} s")
        if p.returncode != expect:
            print(p.stdout)
            sys.exit(f"FAIL: {name} exited {p.returncode}, expected {expect}")
        return out, p.stdout


def moe_routing(out):
    """Per step of OUT/metrics.jsonl: every MoE block's (layer, counts, bias min, bias max)."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [[(l["layer"], l["counts"], l["bias_min"], l["bias_max"]) for l in r["moe"]] for r in rows]


def read_safetensors(path):
    """The fp32 tensors of a safetensors file by name: (shape, values in row-major order)."""
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        b, e = info["data_offsets"]
        tensors[name] = (info["shape"], array("f", data[8 + hlen + b:8 + hlen + e]))
    return tensors


def weights(out):
    """The fp32 tensors of OUT/model.safetensors by name."""
    return {k: v for k, (_, v) in read_safetensors(os.path.join(out, "model.safetensors")).items()}


def same_bits(ref, out, what, failures):
    a = open(os.path.join(ref, "model.safetensors"), "rb").read()
    b = open(os.path.join(out, "model.safetensors"), "rb").read()
    ok = a == b
    print(f"  {what}: {'bit-identical' if ok else 'DIFFERENT'}")
    if not ok:
        failures.append(what)


def close_to(ref, out, what, rel, abs_tol, failures):
    """max |diff| <= abs_tol + rel * max|w|."""
    wa, wb = weights(ref), weights(out)
    worst, scale = 0.0, 0.0
    for name in wa:
        for x, y in zip(wa[name], wb[name]):
            worst = max(worst, abs(x - y))
            scale = max(scale, abs(x))
    tol = abs_tol + rel * scale
    ok = worst <= tol and wa.keys() == wb.keys()
    print(f"  {what}: max |diff| {worst:.3g} (tolerance {tol:.3g}) {'ok' if ok else 'TOO LARGE'}")
    if not ok:
        failures.append(what)


# ---- checks shared by the model-parallel scripts: each appends to `failures` -------------------

def skip_unless_ready(*scripts):
    """Exits 77 (CTest: skipped), the reason printed, unless every `SCRIPT check` succeeds
    (tools/dev/test-hosts.sh: namespaces can be made here; test-slurm.sh: Slurm installed)."""
    for script in scripts:
        check = subprocess.run(["bash", script, "check"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        if check.returncode != 0:
            print(f"SKIP: {check.stdout.strip()}")
            sys.exit(77)


def finish(failures):
    """Prints every failure and exits 1, or prints PASS."""
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("PASS")


def check(cond, what, failures):
    print(f"  {what}: {'ok' if cond else 'NO'}")
    if not cond:
        failures.append(what)
    return cond


def model_config(path):
    """The scalar keys of the `model:` section of a config file (flat YAML, no library)."""
    keys, inside = {}, False
    for line in open(path):
        text = line.split("#", 1)[0].rstrip()
        if not text:
            continue
        if not text.startswith(" "):
            inside = text.strip() == "model:"
            continue
        if inside and ":" in text:
            k, v = text.strip().split(":", 1)
            keys[k.strip()] = v.strip()
    return keys


def weight_diffs(ref, out, what, failures):
    """(max |diff|, max |w|, RMS diff, RMS w) over all tensors; a tensor missing on either side
    or of another size is a failure (the export must be the global one-rank layout)."""
    wa, wb = weights(ref), weights(out)
    if wa.keys() != wb.keys():
        failures.append(f"{what}: tensor names differ: {sorted(wa.keys() ^ wb.keys())[:5]}")
    worst = scale = d2 = w2 = 0.0
    n = 0
    for name in wa.keys() & wb.keys():
        a, b = wa[name], wb[name]
        if len(a) != len(b):
            failures.append(f"{what}: {name} has {len(b)} elements, one rank has {len(a)}")
            continue
        for x, y in zip(a, b):
            worst = max(worst, abs(x - y))
            scale = max(scale, abs(x))
            d2 += (x - y) ** 2
            w2 += x * x
        n += len(a)
    return worst, scale, (d2 / max(n, 1)) ** 0.5, (w2 / max(n, 1)) ** 0.5


def close_weights(ref, out, what, failures, rel=1e-4, abs_tol=1e-5):
    """max |diff| <= abs_tol + rel * max |w|, every tensor present with its one-rank size."""
    worst, scale, _, _ = weight_diffs(ref, out, what, failures)
    tol = abs_tol + rel * scale
    check(worst <= tol, f"{what}: weights max |diff| {worst:.3g} (tolerance {tol:.3g})", failures)


def close_adam(ref, out, what, failures, rms_rel=1e-3, max_abs=1e-3):
    """For fp32 layouts whose summation order differs from one rank's: RMS of the weight
    difference <= rms_rel * RMS(w), and no element off by more than max_abs. AdamW divides each
    gradient by its own RMS, so an element whose gradient is near zero can turn a rounding
    difference into a visible step (observed: a handful of 437760 elements at ~2e-4 after 6 steps
    on an AMD Zen 3, where OpenBLAS's kernels sum in another order than on Zen 2); a missing or
    doubled gradient instead moves many elements by ~lr per step (3e-3 here)."""
    worst, _, rms_d, rms_w = weight_diffs(ref, out, what, failures)
    check(rms_d <= rms_rel * rms_w and worst <= max_abs,
          f"{what}: weights RMS diff {rms_d:.3g} = {rms_d / rms_w:.2g} * RMS(w) (tolerance "
          f"{rms_rel} * RMS(w)), max |diff| {worst:.3g} (tolerance {max_abs})", failures)


def close_rms(ref, out, what, failures, rel=0.005):
    """RMS of the weight difference <= rel * RMS(w) (low-precision comparisons)."""
    worst, _, rms_d, rms_w = weight_diffs(ref, out, what, failures)
    check(rms_d <= rel * rms_w, f"{what}: weights RMS diff {rms_d:.3g} = {rms_d / rms_w:.2g} * "
                                f"RMS(w) (tolerance {rel} * RMS(w); max |diff| {worst:.3g})",
          failures)


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return {r["step"]: r for r in map(json.loads, f)}


def plan_then_train(tessera, mpiexec, mpiflags, config, cluster, name, ranks, sets, failures):
    """`tessera plan CONFIG CLUSTER --layout --json` with `sets`, then the same config trained
    on `ranks` ranks (mpirun when more than one). Returns (the plan's JSON, the run's
    output) or None after appending what failed to `failures`."""
    args = sum((["--set", s] for s in sets), [])
    plan = subprocess.run([tessera, "plan", config, cluster, "--layout", "--json"] + args,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if plan.returncode != 0:
        failures.append(f"{name}: plan exited {plan.returncode}: {plan.stdout}")
        return None
    cmd = [tessera, "train", config] + args
    if ranks > 1:
        cmd = [mpiexec, "-np", str(ranks)] + mpiflags + cmd
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    if run.returncode != 0:
        failures.append(f"{name}: train exited {run.returncode}")
        print(run.stdout)
        return None
    return json.loads(plan.stdout), run.stdout

