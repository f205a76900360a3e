#!/usr/bin/env python3
"""Training across hosts over real TCP (label multirank): two namespace hosts built by
tools/dev/test-hosts.sh, plain `mpirun --hostfile` with Open MPI's TCP transport between
them and shared memory inside each, against the same job on one host.

usage: multihost_equivalence.py TESSERA MPIEXEC CONFIG WORKDIR HOSTS_SCRIPT [MPIRUN_FLAG...]

Exits 77 (CTest: skipped, with the reason printed) where network namespaces cannot be made
(not root, no CAP_NET_ADMIN, no iproute2). The hosts are torn down at the end, also after a
failure. The reduction order of every collective is fixed by rank, not by transport, so:
  * dp = 2, one rank per host: final weights BIT-IDENTICAL to dp = 2 on one host;
  * tp = 2 x dp = 2, two ranks per host (each tp pair inside one host, dp across the link):
    BIT-IDENTICAL to the same layout on one host;
  * `tessera launch --hostfile` (one slot per host, the control plane bound to host 1's
    address): the rank on host 1 registers over the supervisor's Unix socket, the rank on
    host 2 (its own /tmp: the socket is not there) over TCP; BIT-IDENTICAL to dp = 2 on one
    host;
  * losing a host with a spare (`--spares 1`, three hosts): after step 10 every process of host
    2 is killed and its link cut; the supervisor finds host 2 does not answer, restarts from the
    last checkpoint with host 3 in its place and ends BIT-IDENTICAL to the fault-free launch;
  * the same with the memory tier (checkpoint.memory_interval_steps 2, each host's own /tmp, disk
    only at the end): the restart resumes from the newest snapshot in memory, the spare
    fetching host 2's shard from its replica on host 1; BIT-IDENTICAL to the fault-free launch;
    and with no spare (elastic), host 1 alone resumes from its own shard and the replica at
    dp 1: BIT-IDENTICAL;
  * host-local disks (checkpoint.local): half the run, then the rest on the hosts reversed,
    gathering the other host's shard: BIT-IDENTICAL; a lost host's shards are gone (exit 5,
    naming the shard);
  * elastic (`--elastic 1`, two hosts, no spare, 80 steps): the same loss; the job restarts on host 1
    alone with dp 2 -> 1 and grad_accum_steps 1 -> 2 (the global batch kept, the checkpoint
    resharded on load); then host 2's link comes back and host 1's rank is killed: at that
    restart host 2 rejoins and the job goes on at dp 2 again; it ends BIT-IDENTICAL to the
    fault-free two-host launch (one rank accumulating two micro-batches adds in the order two
    ranks reduce).
Prints each run's wall time; exits non-zero with every failure listed.
"""
import os, re, subprocess, sys, time

import tessera_runs as tr
from tessera_runs import Runner

hosts_script = sys.argv[5]
argv = sys.argv[:5] + sys.argv[6:]
tr.skip_unless_ready(hosts_script)

runner = Runner(argv, ["train.steps=6", "train.micro_batch_size=2", "train.seq_len=16",
                       "train.log_interval=6", "train.eval_interval=0", "comm.bucket_mb=0.1",
                       "schedule.warmup_steps=2", "schedule.decay_steps=6"])
failures = []
state = os.path.join(runner.work, "hosts")
os.environ["TESSERA_TEST_HOSTS"] = state
# Open MPI reads these from the environment, in mpirun and in tessera launch's mpirun alike.
os.environ.update({"OMPI_MCA_plm_rsh_agent": os.path.join(state, "rsh"),
                   "OMPI_MCA_btl_tcp_if_include": "eth0", "OMPI_MCA_oob_tcp_if_include": "eth0"})


def across_hosts(name, np, sets, map_by):
    """`tessera train` under mpirun started inside host 1 over the hostfile of both hosts."""
    out, cmd = runner.command(name, 1, sets)
    mpirun = ["mpirun", "--allow-run-as-root", "-np", str(np), "--hostfile",
              os.path.join(state, "hostfile"), "--map-by", map_by,
              "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp",
              "--mca", "odls_base_sigkill_timeout", "0",
              "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1"]
    t0 = time.time()
    p = subprocess.run(["bash", hosts_script, "exec", "1"] + mpirun + cmd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600)
    print(f"{name}: np={np} across 2 hosts ({map_by}) {' '.join(sets)}: exit {p.returncode} "
          f"in {time.time() - t0:.2f} s")
    if p.returncode != 0:
        print(p.stdout[-6000:])
        failures.append(f"{name} exited {p.returncode}")
    return out


try:
    up = subprocess.run(["bash", hosts_script, "up", "3"], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
    if up.returncode != 0:
        sys.exit(f"FAIL: test-hosts.sh up 2: {up.stdout}")
    dp = ["parallel.dp=2", "parallel.zero=1"]
    ref_dp2 = runner.run("dp2_one_host", 2, dp + [f"checkpoint.dir={runner.work}/dp2_one_ckpt"])[0]
    out = across_hosts("dp2_two_hosts", 2, dp + [f"checkpoint.dir={runner.work}/dp2_two_ckpt"], "node")
    tr.same_bits(ref_dp2, out, "dp=2, one rank per host vs one host", failures)
    tpdp = ["parallel.dp=2", "parallel.tp=2", "parallel.zero=1"]
    ref = runner.run("tp2dp2_one_host", 4, tpdp + [f"checkpoint.dir={runner.work}/tpdp_one_ckpt"])[0]
    out = across_hosts("tp2dp2_two_hosts", 4, tpdp + [f"checkpoint.dir={runner.work}/tpdp_two_ckpt"],
                       "slot")
    tr.same_bits(ref, out, "tp=2 x dp=2, a tp pair per host vs one host", failures)

    # The collectives' benchmark across the link, beside raw MPI on the same link (no timing
    # is checked: that the figures come from two hosts and are printed).
    hosts12 = os.path.join(state, "hosts12")
    lines = open(os.path.join(state, "hostfile")).read().replace("slots=2", "slots=1").splitlines()
    open(hosts12, "w").write("\n".join(lines[:2]) + "\n")
    bench = subprocess.run(
        ["bash", hosts_script, "exec", "1", "mpirun", "--allow-run-as-root", "-np", "2",
         "--hostfile", hosts12, "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp",
         runner.tessera, "bench", "comm", "--bytes", "1MiB", "--iters", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    print("\n".join("    " + l for l in bench.stdout.splitlines()[:12]))
    tr.check(bench.returncode == 0 and "2 ranks on 2 host(s) (tsh1, tsh2)" in bench.stdout and
             "all_reduce kRankOrder" in bench.stdout and "MPI_Allreduce raw (last)" in bench.stdout,
             "bench comm across two hosts beside raw MPI_Allreduce", failures)

    # tessera launch across the hosts, one rank each.
    two_hosts, three_hosts = hosts12, os.path.join(state, "hosts123")
    open(three_hosts, "w").write("\n".join(lines[:3]) + "\n")

    def lose_host_2():  # every process of host 2 killed, its link cut
        pids = subprocess.run(["ip", "netns", "pids", "tsh2"], stdout=subprocess.PIPE,
                              text=True).stdout.split()
        subprocess.run(["kill", "-9"] + pids)
        subprocess.run(["ip", "-n", "tsh2", "link", "set", "eth0", "down"])

    def host_2_back_and_rank_on_host_1_killed():
        subprocess.run(["ip", "-n", "tsh2", "link", "set", "eth0", "up"])
        for pid in subprocess.run(["ip", "netns", "pids", "tsh1"], stdout=subprocess.PIPE,
                                  text=True).stdout.split():
            try:
                argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if len(argv) > 1 and argv[0].endswith(b"tessera") and argv[1] == b"train":
                subprocess.run(["kill", "-9", pid])

    def after_step_10(done, log):
        return done >= 10

    def launch(name, hostfile, sets, extra=(), faults=(), ckpt=None, expect=0):
        """tessera launch on HOSTFILE; FAULTS: (when(metrics lines, log), action), in order."""
        out, cmd = runner.command(name, 1, sets + [f"checkpoint.dir={ckpt or runner.work + '/' + name + '_ckpt'}"])
        argv = [runner.tessera, "launch", "-n", "2", "--hostfile", hostfile, "--bind",
                "10.231.0.1", "--backoff", "0.2"] + list(extra) + cmd[2:]
        t0 = time.time()
        log = os.path.join(runner.work, name + ".log")
        p = subprocess.Popen(["bash", hosts_script, "exec", "1"] + argv, stdout=open(log, "w"),
                             stderr=subprocess.STDOUT)
        pending = list(faults)
        while pending and p.poll() is None and time.time() - t0 < 300:
            try:
                done = sum(1 for _ in open(os.path.join(out, "metrics.jsonl")))
            except OSError:
                done = 0
            if pending[0][0](done, open(log).read()):
                pending.pop(0)[1]()
            time.sleep(0.05)
        try:
            rc = p.wait(timeout=600)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        text = open(log).read()
        print(f"{name}: exit {rc} in {time.time() - t0:.2f} s")
        if rc != expect:
            print(text[-6000:])
            failures.append(f"{name} exited {rc}, expected {expect}")
        return out, text

    out, text = launch("dp2_launch_two_hosts", two_hosts, dp)
    tr.check("(1 over the Unix socket, 1 over TCP)" in text,
             "launch: host 1's rank registered over the Unix socket, host 2's over TCP", failures)
    tr.same_bits(ref_dp2, out, "tessera launch, one rank per host vs one host", failures)

    # Losing host 2 with host 3 held as a spare.
    longer = dp + ["train.steps=24", "schedule.decay_steps=24", "checkpoint.interval_steps=4"]
    ref_long, _ = launch("launch_ref_24", two_hosts, longer)
    out, text = launch("launch_lose_host", three_hosts, longer, ["--spares", "1"],
                       faults=[(after_step_10, lose_host_2)])
    tr.check("host 10.231.0.2 (ranks 1) does not answer: lost; replaced by spare 10.231.0.3" in text,
             "lost host: detected by name and replaced by the spare", failures)
    # Whichever rank's connection closes first (often the healthy host's: a cut link swallows
    # the lost ranks' own closing packets), the first restart already uses the spare.
    if not tr.check(", 2 incarnations, 1 failure" in text, "lost host: one failure, one restart",
                    failures):
        print("\n".join(l for l in text.splitlines() if l.startswith("supervisor:"))[-4000:])
    tr.same_bits(ref_long, out, "lost host replaced by a spare vs the fault-free launch", failures)

    # The same loss with the memory tier (a snapshot every 2 steps in each host's own /tmp, the
    # disk tier only at the end): the restart resumes from the newest snapshot, host 2's shard
    # fetched from its replica on host 1 into the spare.
    subprocess.run(["ip", "-n", "tsh2", "link", "set", "eth0", "up"])
    memory = longer[:-1] + ["checkpoint.interval_steps=100", "checkpoint.memory_interval_steps=2",
                            "checkpoint.memory_dir=/tmp/tier"]
    out, text = launch("launch_lose_host_memory", three_hosts, memory, ["--spares", "1"],
                       faults=[(after_step_10, lose_host_2)])
    tr.check("on 2 host(s), each rank's shard also on the next host's ranks" in text,
             "memory tier: a ring over the two hosts", failures)
    held = [int(m) for m in re.findall(r"resuming from the memory tier: step (\d+)", text)]
    # (the snapshot of step 10 may still be in flight when the host goes: any snapshot, not step 0)
    if not tr.check(len(held) >= 1 and held[0] >= 2, f"memory tier: resumed from a snapshot ({held})",
                    failures):
        print("\n".join(l for l in text.splitlines() if "memory" in l or l.startswith("supervisor:"))[-4000:])
    fetched = re.search(r"resuming from the memory tier: step \d+ .*?, (\d+) file\(s\), ([\d.]+) MiB fetched", text)
    tr.check(fetched is not None and int(fetched.group(1)) >= 2,
             "memory tier: the spare fetched the lost host's shard and the manifest from host 1", failures)
    tr.same_bits(ref_long, out, "lost host, memory tier, spare vs the fault-free launch", failures)
    # The same loss with no spare (--elastic 1): host 1 holds its own shard and host 2's replica,
    # so the shrunk job (dp 2 -> 1) resumes from memory, resharded on load.
    subprocess.run(["ip", "-n", "tsh2", "link", "set", "eth0", "up"])
    out, text = launch("elastic_memory", two_hosts, memory, ["--elastic", "1"],
                       faults=[(after_step_10, lose_host_2)])
    tr.check("dp 2 -> 1" in text and "resuming from the memory tier: step " in text,
             "memory tier, elastic: the survivor resumes from its snapshots at dp 1", failures)
    tr.same_bits(ref_long, out, "elastic restart from the memory tier vs the fault-free launch", failures)

    # Host-local disks (checkpoint.local, the root in each host's own /tmp): 12 of the 24 steps,
    # then the rest with the hosts' order reversed — each rank now on the other host gathers
    # the shards it lacks from the host that holds them; BIT-IDENTICAL to the fault-free launch.
    subprocess.run(["ip", "-n", "tsh2", "link", "set", "eth0", "up"])
    local = longer + ["checkpoint.local=true"]
    launch("local_first_half", two_hosts, local + ["train.steps=12"], ckpt="/tmp/local_ckpt")
    reversed_hosts = os.path.join(state, "hosts21")
    open(reversed_hosts, "w").write("\n".join([lines[1], lines[0]]) + "\n")
    out, text = launch("local_second_half", reversed_hosts, local, ckpt="/tmp/local_ckpt")
    tr.check("resuming from the hosts' local checkpoints: step 12, 2 file(s)" in text,
             "checkpoint.local: resumed from step 12, each rank fetching the other host's shard", failures)
    tr.same_bits(ref_long, out, "checkpoint.local, resumed on the hosts reversed vs the fault-free launch",
                 failures)
    # Losing a host takes its shards with it (no replica): the restart on the spare finds no
    # step whole, says which shard is gone, and the job ends with exit 5 (no restart loop).
    out, text = launch("local_lose_host", three_hosts, local, ["--spares", "1"],
                       faults=[(after_step_10, lose_host_2)], ckpt="/tmp/local_lost_ckpt", expect=5)
    tr.check("shard 1 is on no surviving host" in text and "a lost host's shards are gone with it" in text,
             "checkpoint.local: a lost host's shards named as gone, exit 5", failures)
    subprocess.run(["ip", "-n", "tsh2", "link", "set", "eth0", "up"])

    # Losing host 2 with no spare: elastic restart on host 1 alone. Then host 2's link comes
    # back and the rank on host 1 is killed: at that restart host 2 rejoins, dp 2 again.
    subprocess.run(["ip", "-n", "tsh2", "link", "set", "eth0", "up"])
    # 80 steps: the shrunk incarnation must still be training when its rank is killed.
    longest = dp + ["train.steps=80", "schedule.decay_steps=80", "checkpoint.interval_steps=4"]
    ref_80, _ = launch("launch_ref_80", two_hosts, longest)
    out, text = launch("launch_elastic", two_hosts, longest, ["--elastic", "1"],
                       faults=[(after_step_10, lose_host_2),
                               (lambda done, log: "first step done" in log.partition("restarting on 1 host(s)")[2],
                                host_2_back_and_rank_on_host_1_killed)])
    tr.check("host 10.231.0.2 (ranks 1) does not answer: lost; no spare left, going on with the "
             "1 host(s) left" in text, "elastic: the lost host named", failures)
    tr.check("restarting on 1 host(s) with 1 ranks: dp 2 -> 1, grad_accum_steps 1 -> 2" in text,
             "elastic: the new layout said", failures)
    tr.check("host 10.231.0.2 answers again: it rejoins the job at this restart" in text,
             "elastic: the lost host rejoins once it answers", failures)
    tr.check("restarting on 2 host(s) with 2 ranks: the configured layout again: dp 2" in text,
             "elastic: the layout grows back", failures)
    if not tr.check(", 3 incarnations, 2 failures" in text, "elastic: two failures, two restarts",
                    failures):
        print("\n".join(l for l in text.splitlines() if l.startswith("supervisor:"))[-4000:])
    tr.same_bits(ref_80, out, "elastic restart on the survivor vs the fault-free launch", failures)
finally:
    subprocess.run(["bash", hosts_script, "down"])

tr.finish(failures)
