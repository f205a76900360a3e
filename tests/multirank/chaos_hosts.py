#!/usr/bin/env python3
"""`tessera chaos` across real hosts (label multirank): the shipped host scenarios of
configs/chaos/ on three namespace hosts (tools/dev/test-hosts.sh up 3, one rank each on hosts 1
and 2, host 3 the spare), tessera chaos itself running inside host 1 as a user would run it on
the first host of a cluster.

usage: chaos_hosts.py TESSERA SCENARIO_DIR WORKDIR HOSTS_SCRIPT

Exits 77 (CTest: skipped, the reason printed) where network namespaces cannot be made. Each
scenario must PASS (weights bit-identical to its fault-free reference across the same hosts, no
committed checkpoint lost, every fault detected, the run finished):
  * lose-host: every process of host 2 killed and its link cut at step 40: detected, the host
    named lost and replaced by the spare;
  * partition: host 2's link down for 3 s at step 40: the heartbeat timeout sees it, the job
    restarts;
  * slow-link: host 2's link held to 100 Mbit/s for 4 s: ridden through without a failure.
The hosts are rebuilt before each scenario (a lost host stays lost) and torn down at the end.
"""
import os, subprocess, sys, time

import tessera_runs as tr

tessera, scenario_dir, work, hosts_script = sys.argv[1:5]
tr.skip_unless_ready(hosts_script)

state = os.path.join(work, "hosts")
os.environ.update({"TESSERA_TEST_HOSTS": state, "OMPI_MCA_plm_rsh_agent": os.path.join(state, "rsh"),
                   "OMPI_MCA_btl_tcp_if_include": "eth0", "OMPI_MCA_oob_tcp_if_include": "eth0"})
failures = []


def expect(cond, what):
    tr.check(cond, what, failures)


def chaos(name):
    up = subprocess.run(["bash", hosts_script, "up", "3"], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
    if up.returncode != 0:
        sys.exit(f"FAIL: test-hosts.sh up 3: {up.stdout}")
    out = os.path.join(work, name)
    t0 = time.time()
    p = subprocess.run(["bash", hosts_script, "exec", "1", tessera, "chaos",
                        os.path.join(scenario_dir, name + ".yaml"), "--out", out],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    print(f"{name}: exit {p.returncode} in {time.time() - t0:.1f} s")
    if p.returncode != 0:
        print(p.stdout[-8000:])
        failures.append(f"{name}: exit {p.returncode}, expected 0 (PASS)")
    launch_log = open(os.path.join(out, "launch-1.log")).read() if os.path.exists(
        os.path.join(out, "launch-1.log")) else ""
    return p.stdout, launch_log


try:
    os.makedirs(work, exist_ok=True)
    text, log = chaos("lose-host")
    expect("chaos: PASS" in text, "lose-host: PASS")
    expect("host 10.231.0.2 (ranks 1) does not answer: lost; replaced by spare 10.231.0.3" in log,
           "lose-host: host 2 named lost and replaced by the spare")
    text, log = chaos("partition")
    expect("chaos: PASS" in text, "partition: PASS")
    expect("#1 partition over: link up" in text, "partition: the link came back up")
    text, log = chaos("slow-link")
    expect("chaos: PASS" in text, "slow-link: PASS")
    expect("ridden through" in text and "#1 slow_link over: qdisc clear" in text,
           "slow-link: ridden through, the qdisc removed")
finally:
    subprocess.run(["bash", hosts_script, "down"])

tr.finish(failures)
