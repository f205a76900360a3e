"""The default thread count per rank (runtime/kernels/cpu/thread_count.h) seen from outside:
`tessera train` under `mpirun -np 4` with OMP_NUM_THREADS unset runs cores // 4 threads per rank,
at least 1 (1 on a 2-core machine), and says why in the banner; an explicit train.threads wins
over that default, and so does an explicit OMP_NUM_THREADS; a rank started by `tessera launch`
gets the same default as one started by plain mpirun. Every rank computes the count from the
same inputs (this host's cores and OMPI_COMM_WORLD_LOCAL_SIZE); rank 0's banner and env.json
(the pool size in effect, read back from OpenMP) report it.

usage: thread_default.py TESSERA MPIEXEC CONFIG WORKDIR MPIRUN_FLAGS...  (prints PASS)
"""
import glob, json, os, subprocess, sys

from tessera_runs import Runner

runner = Runner(sys.argv, ["train.steps=2", "train.micro_batch_size=2", "train.seq_len=16",
                           "train.log_interval=1", "train.eval_batches=1", "comm.timeout_s=300"])
cores = os.cpu_count()  # the host's; plain mpirun -np 4 here oversubscribes and binds nothing
failures = []


def check(cond, what):
    print(f"  {what}: {'ok' if cond else 'NO'}")
    if not cond:
        failures.append(what)


def environment(omp_num_threads=None):
    """This environment without the thread variables the multirank tests set, plus `omp`."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    if omp_num_threads is not None:
        env["OMP_NUM_THREADS"] = omp_num_threads
    return env


def train(name, np, sets, omp_num_threads=None):
    """Runs the job; returns (its output, the threads env.json records)."""
    out, cmd = runner.command(name, np, sets)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600, env=environment(omp_num_threads))
    print(f"{name}: np={np} {' '.join(sets)} OMP_NUM_THREADS={omp_num_threads}: exit {p.returncode}")
    if p.returncode != 0:
        print(p.stdout)
        sys.exit(f"FAIL: {name} exited {p.returncode}")
    with open(os.path.join(out, "env.json")) as f:
        return p.stdout, int(json.load(f)["threads"])


def banner_threads(text):
    """The banner's "threads ..." phrase, e.g. "1 per rank (2 cores / 4 ranks on this host)"."""
    for line in text.splitlines():
        if "MFU denominator" in line and ", threads " in line:
            return line.split(", threads ", 1)[1].rsplit(", ", 1)[0]
    return None


def default_phrase(ranks):
    n = max(1, cores // ranks)
    return f"{n} per rank ({cores} {'core' if cores == 1 else 'cores'} / {ranks} ranks on this host" + \
        (", at least 1)" if cores < ranks else ")"), n


# 1. The default under plain mpirun: the cores shared among the 4 ranks of this host.
text, threads = train("default_np4", 4, ["parallel.dp=4"])
phrase, n = default_phrase(4)
print(f"  banner: threads {banner_threads(text)}")
if cores < 4:  # oversubscribed: mpirun binds nothing, each rank gets its share
    check(banner_threads(text) == phrase, f"banner says threads {phrase}")
    check(threads == n, f"env.json records {n} thread(s) per rank (got {threads})")
else:  # mpirun binds each rank to a core: at most its share, and said so
    check("4 ranks on this host" in (banner_threads(text) or ""), "banner names the 4 ranks on this host")
    check(1 <= threads <= n, f"env.json records 1..{n} thread(s) per rank (got {threads})")
if cores == 2:
    check(threads == 1, "one thread per rank on this 2-core machine")

# 2. An explicit train.threads wins over the division (and over OMP_NUM_THREADS).
text, threads = train("explicit_np4", 4, ["parallel.dp=4", "train.threads=2"], omp_num_threads="1")
check(banner_threads(text) == "2 per rank (train.threads)", "train.threads=2 wins: banner")
check(threads == 2, f"train.threads=2 wins: env.json records 2 (got {threads})")

# 3. An explicit OMP_NUM_THREADS wins over the division.
text, threads = train("omp_np2", 2, ["parallel.dp=2"], omp_num_threads="3")
check(banner_threads(text) == "3 per rank (OMP_NUM_THREADS=3)", "OMP_NUM_THREADS=3 wins: banner")
check(threads == 3, f"OMP_NUM_THREADS=3 wins: env.json records 3 (got {threads})")

# 4. One process, no launcher: every core, as before.
text, threads = train("single", 1, [])
mine = len(os.sched_getaffinity(0))
check(threads == mine, f"one process runs all {mine} cores it may use (got {threads})")
check(banner_threads(text) == f"{mine} (all {mine} cores)" or mine != cores, "one process: banner")

# 5. `tessera launch -n 2`: the ranks get the same default as under plain mpirun -np 2 (which
#    binds each rank to its share of the cores where they do not outnumber them). The launcher
#    itself sets OMP_NUM_THREADS=1 only when ranks outnumber the cores (launcher.h).
out = os.path.join(runner.work, "launch_np2")
cmd = [runner.tessera, "launch", "-n", "2", runner.config] + sum(
    (["--set", s] for s in runner.common + ["parallel.dp=2", "train.out_dir=" + out, "checkpoint.dir=" + out + "/ckpt"]), [])
p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
                   env=environment())
print(f"launch_np2: exit {p.returncode}")
if p.returncode != 0:
    print(p.stdout)
    sys.exit("FAIL: tessera launch -n 2 failed")
logs = "".join(open(f).read() for f in glob.glob(os.path.join(out, "launch", "logs", "**", "stdout"),
                                                 recursive=True))
with open(os.path.join(out, "env.json")) as f:
    launch_threads = int(json.load(f)["threads"])
print(f"  banner: threads {banner_threads(logs)}")
text, threads = train("mpirun_np2", 2, ["parallel.dp=2"])
print(f"  plain mpirun -np 2: threads {banner_threads(text)}")
check(banner_threads(logs) is not None and banner_threads(logs) == banner_threads(text),
      "launch -n 2 and mpirun -np 2: the same banner phrase")
check(launch_threads == threads, f"launch -n 2 and mpirun -np 2: the same count ({launch_threads}, {threads})")
if cores >= 2:
    check(threads == 1 or "ranks on this host" in banner_threads(text), "mpirun -np 2: the cores shared")

if failures:
    sys.exit("FAIL: " + "; ".join(failures))
print("PASS")
