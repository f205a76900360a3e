#!/usr/bin/env python3
"""`tessera launch` under faults injected from outside (label multirank).

usage: supervisor_faults.py TESSERA CONFIG WORKDIR [CASE...]

Every run is the same 4-rank job (dp=4, ZeRO-1, checkpoint every 4 steps, 48 steps). The
reference is that job under the supervisor with no fault. Each case injects one fault while
the job runs and passes when the supervisor detects it with the expected kind, relaunches,
and the run finishes with model.safetensors BIT-IDENTICAL to the reference:
  crash      SIGKILL of rank 2 (its control connection closes: connection_lost)
  memory     the crash with the memory tier (a snapshot every 3 steps, disk only at the end):
             the restart resumes from the newest snapshot in memory, not from step 0; the tier's
             directory is emptied when the run finishes
  sigstop    SIGSTOP of rank 1 (heartbeats stop: heartbeat_timeout, --heartbeat-timeout 2)
  hang       rank 1 blocks before a collective in incarnation 0 (TESSERA_FAULT_HANG hook;
             heartbeats go on: stall, derived timeout with --stall-floor 3; the report names
             rank 1 as the one that did not reach the collective)
  node       SIGKILL of ranks 2 and 3 at once (a lost host: one failure naming both)
  preempt    SIGTERM to the supervisor: exit 7 after a checkpoint; a second launch resumes
             and finishes bit-identical
  early      SIGTERM right after launch, before the ranks connect: the stop still reaches every
             rank (it is sticky), they save after their first step and exit 7; a relaunch
             finishes bit-identical
  corrupt    the newest committed checkpoint's shard damaged while the job is down after a
             crash: the restart falls back to the previous checkpoint (ckpt_corrupt event)
             and still ends bit-identical
  ckptnow    SIGUSR1 to the supervisor with checkpoint.interval_steps=100: every rank agrees on a
             step and a checkpoint off the interval commits; the run goes on and finishes
  manifest   like corrupt, but the newest checkpoint's manifest is edited by hand (one digit of
             the data position): the metadata checksum refuses it, the restart falls back and
             still ends bit-identical (never resumes from the edited position)
  nonfinite  a learning rate that drives the loss to NaN at step 2: the ranks stop with exit 10
             (train.on_nonfinite: stop) and the supervisor ends with 10 at once, outcome
             "diverged", no restart loop, no checkpoint of the poisoned state
  nockpt     every committed checkpoint of a finished run damaged, then a relaunch: the ranks
             find none usable and exit 5; the supervisor ends with 5 at once (no restart loop)
  budget     a crash on every incarnation (TESSERA_FAULT_CRASH) with --max-restarts 1: the
             supervisor gives up with exit 8 after 2 failures
  crashloop  the same crash with --crash-loop 2: gives up (no new checkpoint between them)
  badconfig  -n not matching the config, and a malformed hostfile: exit 3 before launch, the
             message naming the problem (hostfile:line)
  flood      another local user (nobody, from a forked child) holds 640 idle TCP connections to
             the supervisor's control port from the moment it listens, reconnecting the ones
             it closes: the 4 ranks still register, all over the Unix socket, within about a
             second of the reference's registration time; the socket's directory is 0700,
             refuses that user (EACCES) and is gone when the run ends; bit-identical weights
The reference run checks that its 4 local ranks registered over the Unix socket too.
Timings are generous bounds (a loaded 2-core machine), never asserted tight; the measured
detection latencies are printed by the supervisor's report.
"""
import errno, json, os, pwd, re, shutil, signal, socket, stat, subprocess, sys, time

from tessera_runs import same_bits

tessera, config, work = sys.argv[1:4]
cases = sys.argv[4:] or ["badconfig", "crash", "memory", "sigstop", "hang", "node", "preempt", "early",
                         "corrupt", "manifest", "nonfinite", "ckptnow", "nockpt", "budget",
                         "crashloop", "flood"]
STEPS = 48
COMMON = ["parallel.dp=4", "parallel.zero=1", "train.micro_batch_size=2", "train.seq_len=16",
          "train.log_interval=8", "train.eval_batches=1", "train.eval_interval=0",
          "schedule.warmup_steps=2", f"schedule.decay_steps={STEPS}", f"train.steps={STEPS}",
          "checkpoint.interval_steps=4", "checkpoint.keep_last=3", "comm.timeout_s=300"]
failures = []


def check(cond, what):
    print(f"  {what}: {'ok' if cond else 'NO'}")
    if not cond:
        failures.append(what)


def launch_cmd(name, extra=(), np=4, sets=()):
    out = os.path.join(work, name)
    cmd = [tessera, "launch", "-n", str(np), config, "--backoff", "0.2", "--heartbeat-ms", "100"]
    for s in COMMON + list(sets) + ["train.out_dir=" + out, "checkpoint.dir=" + out + "/ckpt"]:
        cmd += ["--set", s]
    return out, cmd + list(extra)


def start(name, extra=(), env=None, np=4, sets=(), log_name=None):
    out, cmd = launch_cmd(name, extra, np, sets)
    log = open(os.path.join(work, (log_name or name) + ".log"), "w")
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=e, start_new_session=True)
    return out, p, log.name


def finish(name, p, logname, expect=0, limit=300):
    t0 = time.time()
    try:
        rc = p.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        rc = p.wait()
        print(open(logname).read()[-6000:])
        sys.exit(f"FAIL: {name} did not end within {limit} s")
    text = open(logname).read()
    print(f"{name}: exit {rc}")
    if rc != expect:
        print(text[-8000:])
        failures.append(f"{name} exited {rc}, expected {expect}")
    return text


def steps_done(out):
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def wait_steps(out, n, p, limit=120):
    t0 = time.time()
    while time.time() - t0 < limit:
        if steps_done(out) >= n:
            return True
        if p.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def rank_pids(out):
    """pid by rank of the ranks whose command line names this run's out_dir."""
    pids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
            env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"train" not in cmd or not any(out.encode() in c for c in cmd):
            continue
        for kv in env:
            if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                pids[int(kv.split(b"=")[1])] = int(d)
    return pids


def rank_env(out, rank, name):
    """The value of `name` in the environment of this run's rank `rank` (None if not found)."""
    pid = rank_pids(out).get(rank)
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0") if pid else []
    except OSError:
        return None
    for kv in env:
        if kv.startswith(name.encode() + b"="):
            return kv.split(b"=", 1)[1].decode()
    return None


def report(out):
    with open(os.path.join(out, "launch", "report.json")) as f:
        return json.load(f)


figures = []  # (case, kind, detection s, failure -> first resumed step s, launch -> first step s, steps lost)


def record(case, out):
    for f in report(out)["failures"]:
        figures.append((case, f["kind"], f["detected_s"] - f["failed_s"],
                        f["resumed_s"] - f["failed_s"] if f["resumed_s"] >= 0 else None,
                        f.get("load_s", -1), f.get("steps_lost", 0)))


def failure_kinds(out):
    return [f["kind"] for f in report(out)["failures"]]


def signal_ranks(name, out, p, ranks, sig, at_step=10):
    if not wait_steps(out, at_step, p):
        failures.append(f"{name}: the job never reached step {at_step}")
        return
    pids = rank_pids(out)
    for r in ranks:
        if r not in pids:
            failures.append(f"{name}: rank {r} not found")
            return
    for r in ranks:
        os.kill(pids[r], sig)
    print(f"  {name}: sent signal {sig} to ranks {ranks} at step >= {at_step}")


def events(out):
    with open(os.path.join(out, "launch", "events.jsonl")) as f:
        return [json.loads(line) for line in f]


def event_s(out, kind, incarnation=0):
    """When the first `kind` event of `incarnation` happened (s after the supervisor started;
    None if there was none), from events.jsonl."""
    return next((e["t_s"] for e in events(out) if e["incarnation"] == incarnation and e["kind"] == kind), None)


def seconds(t):
    return "never" if t is None else f"{t:.2f} s"


def registration_s(out, incarnation=0):
    """Launch of `incarnation` -> all its ranks registered, s (None if they never were)."""
    launch, registered = event_s(out, "launch", incarnation), event_s(out, "registered", incarnation)
    return None if launch is None or registered is None else registered - launch


def listening_ports(pid):
    """TCP ports process `pid` listens on: its socket inodes matched in /proc/net/tcp{,6}."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return []
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.append(int(fields[1].split(":")[1], 16))
    return ports


def as_other_user(body):
    """Forks a child that becomes `nobody` (when we are root) and runs body(); returns its pid."""
    "127.0.0.1".encode("idna")  # socket calls load this codec lazily, unreadable to nobody here
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if os.geteuid() == 0:
                nobody = pwd.getpwnam("nobody")
                os.setgroups([])
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
            code = body()
        finally:
            os._exit(code)
    return pid


def idle_tcp_flood(port, count):
    """Another local user's flood: `count` idle connections to the port, the closed ones reopened
    (at most 100 every 20 ms, so the flood does not take a core from the job), until killed.
    Returns (pid, fd): the flooder writes the wall-clock time it had every connection open to fd."""
    ready_r, ready_w = os.pipe()

    def body():
        os.close(ready_r)
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
        os.write(ready_w, repr(time.time()).encode())
        while True:
            time.sleep(0.02)
            reopened = 0
            for i, s in enumerate(socks):
                if reopened >= 100:
                    break
                s.setblocking(False)
                try:
                    closed = s.recv(1) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if closed:
                    s.close()
                    try:
                        socks[i] = socket.create_connection(("127.0.0.1", port))
                    except OSError:
                        pass
                    reopened += 1
    pid = as_other_user(body)
    os.close(ready_w)
    return pid, ready_r


def connect_errno_as_other_user(path):
    """errno of connect() to the Unix socket `path` by nobody (0: it connected)."""
    def body():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return 0
        except OSError as e:
            return e.errno & 0xff
    pid = as_other_user(body)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


shutil.rmtree(work, ignore_errors=True)  # every run starts fresh (a stale checkpoint would resume)
os.makedirs(work)
t_all = time.time()

if "badconfig" in cases:
    out, cmd = launch_cmd("badconfig", np=3)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    check(p.returncode == 3 and "needs 4 ranks, but -n is 3" in p.stdout,
          "-n 3 for a dp=4 config: exit 3 naming both counts")
    hostfile = os.path.join(work, "hosts.txt")
    with open(hostfile, "w") as f:
        f.write("# two hosts\nlocalhost slots=2\nnode-b slots=two\n")
    out, cmd = launch_cmd("badconfig", extra=["--hostfile", hostfile])
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    check(p.returncode == 3 and f"{hostfile}:3" in p.stdout, "malformed hostfile: exit 3 naming file:line")
    check(not os.path.exists(os.path.join(work, "badconfig", "launch", "logs")), "nothing was launched")

print("reference run (no fault)")
ref, p, logname = start("reference")
text = finish("reference", p, logname)
check(f"finished" in text and report(ref)["failures"] == [], "reference: finished with no failure")
inc0 = report(ref)["incarnations"][0]
check(inc0["ranks_over_unix_socket"] == 4 and inc0["ranks_over_tcp"] == 0,
      f"reference: the 4 local ranks registered over the Unix socket ({inc0['ranks_over_unix_socket']} unix, "
      f"{inc0['ranks_over_tcp']} tcp)")

if "crash" in cases:
    out, p, logname = start("crash")
    signal_ranks("crash", out, p, [2], signal.SIGKILL)
    finish("crash", p, logname)
    check(failure_kinds(out) == ["connection_lost"], "crash detected as connection_lost")
    same_bits(ref, out, "crash: final weights", failures)
    record("crash", out)

if "memory" in cases:
    tier = os.path.join(work, "memory_tier")
    shutil.rmtree(tier, ignore_errors=True)
    out, p, logname = start("memory", sets=["checkpoint.interval_steps=100", "checkpoint.memory_interval_steps=3",
                                            "checkpoint.memory_dir=" + tier])
    signal_ranks("memory", out, p, [2], signal.SIGKILL, at_step=14)
    text = finish("memory", p, logname)
    # (said by rank 0 and echoed by the supervisor)
    held = sorted({int(m) for m in re.findall(r"resuming from the memory tier: step (\d+)", text)})
    # Any snapshot, not step 0 (the newest may still be in flight when the rank dies).
    check(len(held) == 1 and held[0] >= 3, f"memory: resumed from a snapshot in memory ({held})")
    r = report(out)
    check(bool(r["failures"]) and held[:1] == [r["failures"][0].get("resume_step")] and
          "or memory step" in text, "memory: the supervisor's restart line and report name the memory step")
    same_bits(ref, out, "memory: final weights", failures)
    check(os.path.isdir(tier) and not os.listdir(tier), "memory: the tier's memory freed at the end")
    record("memory", out)

if "sigstop" in cases:
    out, p, logname = start("sigstop", extra=["--heartbeat-timeout", "2"])
    signal_ranks("sigstop", out, p, [1], signal.SIGSTOP)
    finish("sigstop", p, logname)
    kinds = failure_kinds(out)
    check(kinds == ["heartbeat_timeout"], f"SIGSTOP detected as heartbeat_timeout ({kinds})")
    same_bits(ref, out, "sigstop: final weights", failures)
    record("sigstop", out)

if "hang" in cases:
    out, p, logname = start("hang", extra=["--stall-floor", "3"], env={"TESSERA_FAULT_HANG": "1:14:0"})
    text = finish("hang", p, logname)
    r = report(out)
    kinds = [f["kind"] for f in r["failures"]]
    check(kinds == ["stall"], f"hang detected as stall ({kinds})")
    if kinds == ["stall"]:
        check(r["failures"][0]["ranks"] == [1], f"stall names rank 1 ({r['failures'][0]['detail']})")
    same_bits(ref, out, "hang: final weights", failures)
    record("hang", out)

if "node" in cases:
    out, p, logname = start("node")
    signal_ranks("node", out, p, [2, 3], signal.SIGKILL)
    finish("node", p, logname)
    r = report(out)
    # Both ranks are named when their sockets close within the simultaneity window (2 ms). On a
    # loaded 2-core machine a SIGKILLed process can take longer than that to die, and mpirun's
    # own takedown of the others can land inside the window instead: timing is all the
    # supervisor has on one host. Required: one failure, naming at least one killed rank.
    ranks = [f["ranks"] for f in r["failures"]]
    check(len(ranks) == 1 and bool(set(ranks[0]) & {2, 3}),
          f"node loss: one failure naming a killed rank ({ranks})")
    same_bits(ref, out, "node: final weights", failures)
    record("node", out)

if "preempt" in cases:
    out, p, logname = start("preempt")
    if wait_steps(out, 10, p):
        os.kill(p.pid, signal.SIGTERM)
    text = finish("preempt", p, logname, expect=7)
    m = re.search(r"stopped at step (\d+)", text)
    check(m is not None, "ranks stopped after a checkpoint")
    out2, p2, logname2 = start("preempt", log_name="preempt-relaunch")  # same dirs: resumes
    text2 = finish("preempt (resumed)", p2, logname2)
    check("resuming from checkpoint step" in text2, "second launch resumed from the checkpoint")
    same_bits(ref, out, "preempt + relaunch: final weights", failures)

if "early" in cases:
    out, p, logname = start("early")
    # The supervisor's first line comes after its handlers are in (a SIGTERM before the
    # process reaches main() would kill it by default) and before it launches any rank.
    t0 = time.time()
    while "] start " not in open(logname).read() and p.poll() is None and time.time() - t0 < 60:
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGTERM)
    text = finish("early", p, logname, expect=7)
    check("stopped at step" in text, "ranks connecting after the stop request still stopped after a checkpoint")
    out2, p2, logname2 = start("early", log_name="early-relaunch")
    finish("early (resumed)", p2, logname2)
    same_bits(ref, out, "early stop + relaunch: final weights", failures)

def damage_newest_then_crash(name, damage):
    """Holds the job still (rank 1 stopped), damages the newest committed checkpoint with
    damage(dir_path, step_name), then kills rank 2: the supervisor restarts and the ranks must
    find the damage and fall back. Returns the run's output text and directory."""
    out, p, logname = start(name, extra=["--backoff", "0.5"])
    if wait_steps(out, 14, p):
        pids = rank_pids(out)
        os.kill(pids[1], signal.SIGSTOP)
        # A save in flight commits or not; nothing moves after that. Waits until the committed
        # steps have not changed for 0.5 s (a fixed pause is too short on a loaded machine).
        ckpt = os.path.join(out, "ckpt")
        committed = lambda: sorted(d for d in os.listdir(ckpt) if re.fullmatch(r"step_\d{8}", d))
        seen, t0 = committed(), time.time()
        while time.time() - t0 < 30:
            time.sleep(0.5)
            now = committed()
            if now == seen:
                break
            seen = now
        newest = seen[-1]
        damage(os.path.join(ckpt, newest), newest)
        os.kill(pids[2], signal.SIGKILL)
        os.kill(pids[1], signal.SIGCONT)
    return finish(name, p, logname), out


def flip_shard_bit(step_dir, newest):
    with open(os.path.join(step_dir, "shard_0.bin"), "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0x40]))
    print(f"  corrupt: flipped a bit of {newest}/shard_0.bin")


def edit_data_position(step_dir, newest):
    with open(os.path.join(step_dir, "manifest.json"), "r+b") as f:
        text = f.read()
        at = text.index(b'"data_index":') + len(b'"data_index":')
        f.seek(at)
        f.write(b"1" if text[at:at + 1] != b"1" else b"2")
    print(f"  manifest: edited the data position in {newest}/manifest.json")


if "corrupt" in cases:
    text, out = damage_newest_then_crash("corrupt", flip_shard_bit)
    check("ckpt_corrupt" in text, "the restart found the damaged checkpoint and said so")
    same_bits(ref, out, "corrupt newest + crash: final weights", failures)

if "manifest" in cases:
    text, out = damage_newest_then_crash("manifest", edit_data_position)
    check("metadata checksum mismatch" in text, "the restart refused the edited manifest and said why")
    same_bits(ref, out, "edited manifest + crash: final weights", failures)

if "nonfinite" in cases:
    t0 = time.time()
    out, p, logname = start("nonfinite", sets=["optimizer.lr=1e9", "schedule.warmup_steps=0",
                                               "checkpoint.interval_steps=1"])
    text = finish("nonfinite", p, logname, expect=10)
    r = report(out)
    check(r["outcome"] == "diverged" and r["failures"] == [] and time.time() - t0 < 120,
          f"non-finite: exit 10 without a restart ({r['outcome']}, {len(r['failures'])} failures)")
    check("non-finite training" in text, "the report says why no restart can help")
    committed = [d for d in os.listdir(os.path.join(out, "ckpt")) if re.fullmatch(r"step_\d{8}", d)]
    check(committed == ["step_00000001"], f"only the healthy step-1 checkpoint committed ({committed})")

if "ckptnow" in cases:
    # 400 steps: on a loaded machine the request must still land well before the end.
    out, p, logname = start("ckptnow", sets=["checkpoint.interval_steps=1000", "train.steps=400",
                                             "schedule.decay_steps=400"])
    if wait_steps(out, 10, p):
        os.kill(p.pid, signal.SIGUSR1)
    text = finish("ckptnow", p, logname)
    steps = sorted(int(d[5:]) for d in os.listdir(os.path.join(out, "ckpt")) if re.fullmatch(r"step_\d{8}", d))
    check(any(s != 400 for s in steps) and "checkpoint requested" in text,
          f"SIGUSR1: a checkpoint off the interval committed ({steps})")

if "nockpt" in cases:
    ckpt = os.path.join(ref, "ckpt")
    for d in os.listdir(ckpt):
        if re.fullmatch(r"step_\d{8}", d):
            with open(os.path.join(ckpt, d, "shard_0.bin"), "r+b") as f:
                f.truncate(10)
    t0 = time.time()
    out, p, logname = start("reference", log_name="nockpt")  # the reference's dirs: resumes
    text = finish("nockpt", p, logname, expect=5)
    r = report(ref)
    check(r["outcome"] == "failed" and r["failures"] == [] and time.time() - t0 < 60,
          f"no usable checkpoint: exit 5 without a restart ({r['outcome']}, {len(r['failures'])} failures)")

if "budget" in cases:
    out, p, logname = start("budget", extra=["--max-restarts", "1", "--crash-loop", "10"],
                            env={"TESSERA_FAULT_CRASH": "2:10"})
    text = finish("budget", p, logname, expect=8)
    check(len(report(out)["failures"]) == 2 and "restart" in report(out)["outcome_detail"],
          "gave up after 2 failures with --max-restarts 1")

if "crashloop" in cases:
    out, p, logname = start("crashloop", extra=["--crash-loop", "2"], env={"TESSERA_FAULT_CRASH": "2:10"})
    text = finish("crashloop", p, logname, expect=8)
    r = report(out)
    check(r["outcome"] == "gave_up" and "checkpoint" in r["outcome_detail"],
          f"crash loop guard gave up ({r['outcome_detail']})")

if "flood" in cases:
    FLOOD = 640  # 2.5x the control server's pending cap
    out, p, logname = start("flood")
    flooder = ready = None
    t0 = time.time()
    while flooder is None and p.poll() is None and time.time() - t0 < 60:
        ports = listening_ports(p.pid)
        if ports:
            flooder, ready = idle_tcp_flood(ports[0], FLOOD)
        else:
            time.sleep(0.001)
    check(flooder is not None, "flood: found the supervisor's control port")
    socket_dir = None
    if flooder is not None and wait_steps(out, 4, p):
        path = rank_env(out, 0, "TESSERA_CONTROL_SOCKET")
        socket_dir = os.path.dirname(path) if path else None
        check(socket_dir is not None, "flood: the ranks were handed the Unix socket")
        if socket_dir is not None:
            st = os.lstat(socket_dir)
            check(stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid(),
                  f"flood: {socket_dir} is a directory of ours with mode 0700 ({oct(st.st_mode)})")
            if os.geteuid() == 0:
                code = connect_errno_as_other_user(os.path.join(socket_dir, "control.sock"))
                check(code == errno.EACCES, f"flood: nobody cannot connect to the socket (errno {code})")
    text = finish("flood", p, logname)
    if flooder is not None:
        os.kill(flooder, signal.SIGKILL)
        os.waitpid(flooder, 0)
    r = report(out)
    ready_text = os.read(ready, 64) if ready is not None else b""
    if ready_text:
        flood_at = float(ready_text) - r["start_unix_s"]
        registered_at = event_s(out, "registered")
        check(registered_at is not None and flood_at < registered_at,
              f"flood: {FLOOD} idle connections open before the ranks registered (at {flood_at:.2f} s; "
              f"registered at {seconds(registered_at)})")
    else:
        check(False, "flood: the flooder opened its connections")
    inc = r["incarnations"][0]
    check(inc["ranks_over_unix_socket"] == 4 and inc["ranks_over_tcp"] == 0,
          f"flood: all 4 ranks registered over the Unix socket ({inc['ranks_over_unix_socket']} unix, {inc['ranks_over_tcp']} tcp)")
    check("control connection(s) refused" in text, "flood: the supervisor saw the flood (connections refused)")
    ref_s, flood_s = registration_s(ref), registration_s(out)
    print(f"  flood: launch -> all registered {seconds(flood_s)} under the flood, {seconds(ref_s)} without")
    check(flood_s is not None and ref_s is not None and flood_s <= ref_s + 1.0,
          "flood: registration delayed by at most about a second")
    check(r["failures"] == [], f"flood: no failure ({failure_kinds(out)})")
    check(socket_dir is not None and not os.path.exists(socket_dir), "flood: the socket directory is gone after the run")
    same_bits(ref, out, "flood: final weights", failures)

if figures:
    print("\nfigures (from each run's launch/report.json; not asserted):")
    print(f"  {'case':<8} {'kind':<18} {'detection':>10} {'to resumed step':>16} {'launch->step':>13} {'lost':>5}")
    for case, kind, det, rec, load, lost in figures:
        rec_s = f"{rec:.2f} s" if rec is not None else "never"
        print(f"  {case:<8} {kind:<18} {det:>8.3f} s {rec_s:>16} {load:>11.2f} s {lost:>5}")
print(f"all cases in {time.time() - t_all:.1f} s")
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("\nPASS")
