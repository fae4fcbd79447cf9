#!/usr/bin/env python3
"""The launcher benchmark (issues #3, #10): launch and torchrun side by side.
In one run, on this machine; never part of the test pass.

    python3 bench/run_launch_bench.py [--build build] [--quick]

torchrun (`python -m torch.distributed.run`) runs under PYTHON_EXEC when it
is set, else under the first Python that imports torch among python3 and
python on PATH, $VIRTUAL_ENV/bin/python, $CONDA_PREFIX/bin/python,
/usr/bin/python3 and the Python running this script, so that the script
runs unchanged where torch lives in a virtual environment or a conda
install (the GPU machine) and where it is Debian's. --no-torch: launch only.

Measures
  1. launch-to-exit of 8 trivial workers (/bin/true), timed by bench_timeit
     (fork to wait4 in C, so the driver's own cost is not in the figure);
  2. failure-to-respawn latency: rank FAIL exits 1, time from its exit
     (its own CLOCK_MONOTONIC stamp) to the start of the last worker of
     the next generation (their stamps), on one node (8 workers) and
     across 4 agents on 127.0.0.1-4 (2 workers each);
  3. the agent's peak RSS: VmHWM of the agent process, read from
     /proc/PID/status every 2 ms while 8 workers sleep 1.5 s, with the
     default binding (on a GPU node: the topology is loaded) and with
     --cpu-bind none; the shared libraries the agent has mapped then
     (/proc/PID/maps), GPU libraries (libcuda, libnvidia-ml, libcudart,
     libnccl) flagged; and wait4's ru_maxrss of the trivial job;
  4. rendezvous of N agents (default 256) on 127.0.0.1..127.0.1.x, one
     worker each: from the return of the last agent's exec to every
     worker started and to every agent exited; torchrun at a smaller N
     (256 Python agents need about 60 GB here).

Goals (issue #10, a GPU node): launch-to-exit < 10 ms and >= 100x faster
than torchrun; agent peak RSS < 8 MB; N agents: last started -> all workers
started < 0.5 s, -> all agents exited < 1 s. bench/run_agents.sh runs
section 4 alone for several N (256, 1024).

Prints a table (ours, torchrun, ratio, goal, met?) and writes every raw
figure as JSON (--json). Every process it starts is ended by pid: agents
through their Popen object, workers that outlived their agent through the
pid in their stamp file (after checking /proc/PID/cmdline)."""
import argparse
import glob
import json
import math
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def torch_python():
    """The Python that runs torchrun: PYTHON_EXEC, else the first candidate
    that imports torch (see the module's doc), else python3."""
    if os.environ.get("PYTHON_EXEC"):
        return os.environ["PYTHON_EXEC"]
    seen = []
    envs = [os.path.join(os.environ[v], "bin", "python")
            for v in ("VIRTUAL_ENV", "CONDA_PREFIX") if os.environ.get(v)]
    for cand in [shutil.which("python3"), shutil.which("python")] + envs + [
            "/usr/bin/python3", sys.executable]:
        if not cand or cand in seen or not os.access(cand, os.X_OK):
            continue
        seen.append(cand)
        if subprocess.run([cand, "-c", "import torch"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0:
            return cand
    return seen[0] if seen else "python3"


PYTHON = torch_python()
TORCHRUN = [PYTHON, "-m", "torch.distributed.run"]
# torch 1.13 on Python 3.11 needs an explicit redirect/tee spec.
TORCH_FIX = ["--redirects", "0:1", "--tee", "0:1", "--monitor_interval", "0.1"]


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def stats(xs):
    """median and p90 (nearest rank) of a list, None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    med = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    p90 = s[max(0, math.ceil(0.9 * len(s)) - 1)]
    return {"median": med, "p90": p90, "min": s[0], "max": s[-1], "n": len(s),
            "all": xs}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Procs:
    """Every process the benchmark starts, ended by pid at the end."""

    def __init__(self):
        self.popen = []
        self.stamp_dirs = []

    def start(self, argv, env=None, out=None):
        full = dict(os.environ)
        if env:
            full.update(env)
        p = subprocess.Popen(argv, env=full, stdin=subprocess.DEVNULL,
                             stdout=out or subprocess.DEVNULL,
                             stderr=subprocess.STDOUT if out else subprocess.DEVNULL)
        self.popen.append(p)
        return p

    def end(self, p, grace=5.0):
        """SIGTERM (torchrun then stops its workers), then SIGKILL."""
        if p.poll() is not None:
            return
        try:
            os.kill(p.pid, signal.SIGTERM)
            p.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        except ProcessLookupError:
            pass

    def end_workers(self, d):
        """Workers whose stamp files name them and that still run."""
        for f in glob.glob(os.path.join(d, "start.*")):
            try:
                pid = int(open(f).read().split()[1])
                with open("/proc/%d/cmdline" % pid, "rb") as c:
                    if b"bench_worker" not in c.read():
                        continue
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                pass

    def cleanup(self):
        for p in self.popen:
            self.end(p, grace=3.0)
        for d in self.stamp_dirs:
            self.end_workers(d)
        self.popen = []


def wait_all(procs, ps, timeout):
    """Reap every Popen in ps with wait4. RET (exit codes, ns when the last
    one was reaped, CPU seconds of each with its reaped children). A
    watchdog ends them all by pid after timeout seconds."""
    def watchdog():
        for p in ps:
            if p.returncode is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    timer = threading.Timer(timeout, watchdog)
    timer.start()
    rcs, cpu = [], []
    try:
        for p in ps:
            if p.returncode is not None:
                rcs.append(p.returncode)
                cpu.append(None)
                continue
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            rcs.append(p.returncode)
            cpu.append(ru.ru_utime + ru.ru_stime)
    finally:
        timer.cancel()
    return rcs, now_ns(), cpu


def read_stamps(d, prefix):
    out = {}
    for f in glob.glob(os.path.join(d, prefix + "*")):
        try:
            out[os.path.basename(f)] = int(open(f).read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def listening(port):
    """Is 127.0.0.1:port in LISTEN state (no connection made to find out)?"""
    want = "0100007F:%04X" % port
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if cols[1] == want and cols[3] == "0A":
                return True
    return False


def agent_addr(i):
    """Agent i of many: 127.0.0.1 .. 127.0.0.254, then 127.0.1.1 ..."""
    return "127.0.%d.%d" % (i // 254, i % 254 + 1)


# ---- 1. launch-to-exit ---------------------------------------------------------------

def timeit(bin_dir, argv, runs, tmp, name):
    out = os.path.join(tmp, name + ".log")
    r = subprocess.run([os.path.join(bin_dir, "bench_timeit"), "-n", str(runs),
                        "-w", "1", "-o", out, "--"] + argv,
                       stdout=subprocess.PIPE, text=True, cwd=tmp)
    ms, rss, bad = [], [], 0
    for line in r.stdout.split("\n"):
        if not line.strip():
            continue
        t, rc, kb = line.split()
        if rc != "0":  # a run that failed is no figure
            bad += 1
            continue
        ms.append(float(t))
        rss.append(int(kb))
    if bad or r.returncode != 0:
        bad = bad or runs
        log("%s: %d of %d runs failed (not timed); see %s" % (name, bad, runs, out))
    return {"ms": stats(ms), "maxrss_kb": stats(rss), "failed": bad}


# ---- 2. failure-to-respawn -------------------------------------------------------------

def respawn_once(procs, bin_dir, tmp, kind, nagents, nproc, fail_rank, timeout):
    d = tempfile.mkdtemp(prefix="respawn-", dir=tmp)
    procs.stamp_dirs.append(d)
    worker = [os.path.join(bin_dir, "bench_worker"), "respawn", d, str(fail_rank)]
    launch = os.path.join(bin_dir, "launch")
    logf = open(os.path.join(d, "agents.log"), "w")
    port = free_port()
    ps = []
    for i in range(nagents):
        if kind == "launch" and nagents == 1:
            argv = [launch, "--standalone", "--nproc-per-node", str(nproc),
                    "--max-restarts", "1", "--no-python"] + worker
            env = None
        elif kind == "launch":
            argv = [launch, "--nnodes", str(nagents), "--nproc-per-node", str(nproc),
                    "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", "respawn",
                    "--local-addr", agent_addr(i), "--max-restarts", "1",
                    "--no-python"] + worker
            env = {"LAUNCH_HOSTNAME": "node%d" % (i + 1)}
        elif nagents == 1:
            argv = TORCHRUN + ["--standalone", "--nproc_per_node", str(nproc),
                               "--max_restarts", "1", "--no_python"] + TORCH_FIX + worker
            env = None
        else:
            argv = TORCHRUN + ["--nnodes", str(nagents), "--nproc_per_node", str(nproc),
                               "--rdzv_backend", "c10d",
                               "--rdzv_endpoint", "127.0.0.1:%d" % port,
                               "--rdzv_id", "respawn", "--max_restarts", "1",
                               "--no_python"] + TORCH_FIX + worker
            env = None
        ps.append(procs.start(argv, env=env, out=logf))
        if i == 0 and nagents > 1 and kind == "launch":
            # The hosting agent listens before the others connect.
            t_end = time.time() + 10
            while not listening(port) and time.time() < t_end:
                time.sleep(0.001)
    rcs, _, _ = wait_all(procs, ps, timeout)
    logf.close()
    procs.end_workers(d)
    world = nagents * nproc
    fail = read_stamps(d, "fail.0").get("fail.0")
    gen1 = read_stamps(d, "start.1.")
    ok = all(rc == 0 for rc in rcs) and fail is not None and len(gen1) == world
    if not ok:
        log("%s respawn (%d agents): rcs %s, fail stamp %s, %d of %d restarted; "
            "log %s" % (kind, nagents, rcs, fail is not None, len(gen1), world,
                        logf.name))
        return None
    return {"last_ms": (max(gen1.values()) - fail) / 1e6,
            "first_ms": (min(gen1.values()) - fail) / 1e6}


def respawn(procs, bin_dir, tmp, kind, nagents, nproc, runs, timeout):
    last, first = [], []
    for _ in range(runs):
        r = respawn_once(procs, bin_dir, tmp, kind, nagents, nproc,
                         nagents * nproc - 1, timeout)
        if r:
            last.append(r["last_ms"])
            first.append(r["first_ms"])
    return {"last_ms": stats(last), "first_ms": stats(first),
            "failed": runs - len(last)}


# ---- 3. peak RSS -------------------------------------------------------------------------

def vm_hwm_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


GPU_LIBS = ("libcuda.so", "libnvidia-ml", "libcudart", "libnccl", "libnvrtc",
            "libOpenCL", "hwloc_")


def mapped_libs(pid):
    """Base names of the shared objects pid has mapped (None: gone)."""
    try:
        with open("/proc/%d/maps" % pid) as f:
            names = {line.split()[5].rsplit("/", 1)[-1] for line in f
                     if len(line.split()) > 5 and ".so" in line.split()[5]}
    except OSError:
        return None
    return sorted(names)


def peak_rss(procs, bin_dir, tmp, kind, extra=()):
    """VmHWM of the agent, sampled every 2 ms until it exits, and the
    libraries it has mapped half-way. (wait4's ru_maxrss is no use here:
    exec keeps the high-water mark of the image it replaces, the forked
    Python driver's; bench_timeit, a small C parent, reports it for the
    trivial job instead.)"""
    worker = [os.path.join(bin_dir, "bench_worker"), "sleep", "1500"]
    if kind == "launch":
        argv = [os.path.join(bin_dir, "launch"), "--standalone", "--nproc-per-node",
                "8"] + list(extra) + ["--no-python"] + worker
    else:
        argv = TORCHRUN + ["--standalone", "--nproc_per_node", "8",
                           "--no_python"] + TORCH_FIX + worker
    p = procs.start(argv)
    hwm, libs, t0 = 0, None, time.time()
    while True:
        pid, status, _ = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            break
        v = vm_hwm_kb(p.pid)
        if v:
            hwm = max(hwm, v)
        if libs is None and time.time() - t0 > 0.75:
            libs = mapped_libs(p.pid)
        time.sleep(0.002)
    libs = libs or []
    if p.returncode != 0:
        log("%s peak RSS: the agent exited %d (no figure)" % (kind, p.returncode))
    return {"vmhwm_kb": hwm if p.returncode == 0 else None, "rc": p.returncode,
            "failed": int(p.returncode != 0),
            "libs": libs, "gpu_libs": [x for x in libs if any(g in x for g in GPU_LIBS)]}


# ---- 4. many agents ----------------------------------------------------------------------

def many_agents(procs, bin_dir, tmp, kind, n):
    d = tempfile.mkdtemp(prefix="rdzv%d-" % n, dir=tmp)
    procs.stamp_dirs.append(d)
    worker = [os.path.join(bin_dir, "bench_worker"), "stamp", d]
    logf = open(os.path.join(d, "agents.log"), "w")
    port = free_port()
    ps = []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t_first = now_ns()
    for i in range(n):
        if kind == "launch":
            argv = [os.path.join(bin_dir, "launch"), "--nnodes", str(n),
                    "--nproc-per-node", "1", "--rdzv-endpoint", "127.0.0.1:%d" % port,
                    "--rdzv-id", "many", "--local-addr", agent_addr(i),
                    "--rdzv-conf", "join_timeout=120", "--no-python"] + worker
            env = {"LAUNCH_HOSTNAME": "node%03d" % i}
        else:
            argv = TORCHRUN + ["--nnodes", str(n), "--nproc_per_node", "1",
                               "--rdzv_backend", "c10d",
                               "--rdzv_endpoint", "127.0.0.1:%d" % port,
                               "--rdzv_id", "many", "--no_python"] + TORCH_FIX + worker
            env = None
        ps.append(procs.start(argv, env=env, out=logf))
        if i == 0 and kind == "launch":
            t_end = time.time() + 10
            while not listening(port) and time.time() < t_end:
                time.sleep(0.001)
    t_last = now_ns()
    # VmHWM of the hosting agent and of the last one, every 20 ms (cheap
    # enough not to disturb the figure); the last sample is the peak.
    hwm = [0, 0]
    done = threading.Event()

    def sample():
        while not done.wait(0.02):
            for k, p in enumerate((ps[0], ps[-1])):
                v = vm_hwm_kb(p.pid) if p.returncode is None else None
                if v:
                    hwm[k] = max(hwm[k], v)
    th = threading.Thread(target=sample)
    th.start()
    try:
        rcs, t_exit, cpu = wait_all(procs, ps, 600)
    finally:
        done.set()
        th.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    logf.close()
    procs.end_workers(d)
    starts = read_stamps(d, "start.0.")
    ok = all(rc == 0 for rc in rcs) and len(starts) == n
    if not ok:
        bad = [i for i, rc in enumerate(rcs) if rc != 0]
        log("%s with %d agents: %d agents failed (first: %s), %d of %d workers "
            "started; log %s" % (kind, n, len(bad), bad[:5], len(starts), n, logf.name))
        return None
    w = sorted(starts.values())
    return {"spawn_ms": (t_last - t_first) / 1e6,
            "last_start_to_workers_ms": (w[-1] - t_last) / 1e6,
            "last_start_to_exit_ms": (t_exit - t_last) / 1e6,
            "first_start_to_workers_ms": (w[-1] - t_first) / 1e6,
            "worker_spread_ms": (w[-1] - w[0]) / 1e6,
            "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "host_cpu_s": cpu[0],
            "host_vmhwm_kb": hwm[0], "agent_vmhwm_kb": hwm[1]}


def many(procs, bin_dir, tmp, kind, n, runs):
    res = [r for r in (many_agents(procs, bin_dir, tmp, kind, n) for _ in range(runs)) if r]
    out = {"failed": runs - len(res), "n": n}
    for k in ("spawn_ms", "last_start_to_workers_ms", "last_start_to_exit_ms",
              "first_start_to_workers_ms", "worker_spread_ms", "cpu_s", "host_cpu_s", "host_vmhwm_kb",
              "agent_vmhwm_kb"):
        out[k] = stats([r[k] for r in res])
    return out


# ---- report --------------------------------------------------------------------------------

def idle_fraction(seconds=0.5):
    """Share of CPU time idle over the next `seconds` (all cores)."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)  # idle + iowait, total
    i0, t0 = snap()
    time.sleep(seconds)
    i1, t1 = snap()
    return (i1 - i0) / max(1, t1 - t0)


def wait_quiet(R, name, max_wait):
    """Other jobs on a shared machine skew every figure: wait (at most
    max_wait seconds) until the CPUs are 90 % idle; record what was seen."""
    deadline = time.time() + max_wait
    idle = idle_fraction()
    while idle < 0.9 and time.time() < deadline:
        idle = idle_fraction(1.0)
    R.setdefault("idle_before", {})[name] = round(idle, 3)
    if idle < 0.9:
        log("   (the machine is busy: %.0f %% idle; figures of %s are skewed)" % (100 * idle, name))


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    torch_v = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpu": cpu,
            "cores": os.cpu_count(), "mem_gib": round(mem, 1),
            "kernel": platform.release(), "python": platform.python_version(),
            "torch_python": PYTHON,
            "torch": torch_v.stdout.strip() or None,
            "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}


def fmt(v, unit="ms"):
    if v is None:
        return "n/a"
    if unit == "MB":
        return "%.1f MB" % (v / 1024)
    if unit == "s":
        return "%.3f s" % (v / 1000)
    return "%.1f ms" % v if v >= 10 else "%.2f ms" % v


def med(x, key="median"):
    return x[key] if x else None


def ratio(a, b):
    return "%.0fx" % (b / a) if a and b else "n/a"


def table(R, args):
    rows = []

    def failed(section):
        """Runs of launch's side of section that failed: its goal is not met."""
        return sum((v.get("failed") or 0) for k, v in R[section].items()
                   if k.startswith("launch") and isinstance(v, dict))

    def met(section, ok):
        n = failed(section)
        return "NO (%d runs failed)" % n if n else ("yes" if ok else "NO")

    def pair(section, kind, key):
        x = R[section].get(kind)
        x = x[key] if x else None
        return "%s / %s" % (fmt(med(x)), fmt(med(x, "p90"))) if x else "n/a"

    if "trivial" in R:
        t = R["trivial"]
        ours = med(t["launch"]["ms"])
        theirs = med(t["torchrun"]["ms"]) if t.get("torchrun") else None
        ok = ours is not None and ours < 10 and (theirs is None or theirs / ours >= 100)
        rows.append(("launch-to-exit, 8 x /bin/true (median / p90)",
                     pair("trivial", "launch", "ms"), pair("trivial", "torchrun", "ms"),
                     ratio(ours, theirs), ">=100x and <10 ms", met("trivial", ok)))
    for key, label, goal in (("respawn1", "failure-to-respawn, 1 node x 8 (median / p90)", 20),
                             ("respawn4", "failure-to-respawn, 4 agents x 2 (median / p90)", 100)):
        if key not in R:
            continue
        r = R[key]
        ours = med(r["launch"]["last_ms"])
        theirs = med(r["torchrun"]["last_ms"]) if r.get("torchrun") else None
        rows.append((label, pair(key, "launch", "last_ms"), pair(key, "torchrun", "last_ms"),
                     ratio(ours, theirs), "<%d ms" % goal,
                     met(key, ours is not None and ours < goal)))
    if "rss" in R:
        r = R["rss"]
        ours = r["launch"]["vmhwm_kb"]
        theirs = r["torchrun"]["vmhwm_kb"] if r.get("torchrun") else None
        rows.append(("agent peak RSS (VmHWM, 8 workers)", fmt(ours, "MB"), fmt(theirs, "MB"),
                     ratio(ours, theirs), "<8 MB", met("rss", ours and ours < 8192)))
        if r.get("launch_nobind"):
            v = r["launch_nobind"]["vmhwm_kb"]
            rows.append(("agent peak RSS, --cpu-bind none", fmt(v, "MB"), "", "", "<8 MB",
                         met("rss", v and v < 8192)))
    if "many" in R:
        m = R["many"]["launch"]
        for k, label in (("last_start_to_workers_ms", "all workers started"),
                         ("last_start_to_exit_ms", "all agents exited")):
            ours = med(m[k])
            goal = 500 if k == "last_start_to_workers_ms" else 1000
            rows.append(("%d agents: last agent started -> %s (median)" % (args.agents, label),
                         fmt(ours, "s"), "n/a (too big here)", "", "<%g s" % (goal / 1000),
                         met("many", ours is not None and ours < goal)))
    if "many" in R:
        m = R["many"]["launch"]
        total = med(m["first_start_to_workers_ms"])
        rows.append(("%d agents: first agent started -> all workers started (median)" % args.agents,
                     fmt(total, "s"), "", "", "(whole start)", ""))
        for k, label in (("agent_vmhwm_kb", "a non-hosting agent"),
                         ("host_vmhwm_kb", "the hosting agent (server inside)")):
            v = med(m[k])
            rows.append(("%d agents: peak RSS (VmHWM) of %s" % (args.agents, label),
                         fmt(v, "MB"), "", "", "<8 MB",
                         met("many", v and v < 8192)))
    if "many_small" in R:
        a = R["many_small"]["launch"]
        b = R["many_small"].get("torchrun")
        for k, label in (("last_start_to_workers_ms", "all workers started"),
                         ("last_start_to_exit_ms", "all agents exited")):
            rows.append(("%d agents: last agent started -> %s (median)" % (args.torch_agents, label),
                         fmt(med(a[k]), "s"), fmt(med(b[k]) if b else None, "s"),
                         ratio(med(a[k]), med(b[k]) if b else None), "(side by side)", ""))
    head = ("benchmark", "launch", "torchrun %s" % (R["machine"].get("torch") or ""),
            "ratio", "goal", "met?")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(6)]
    lines = ["| " + " | ".join(str(c).ljust(widths[i]) for i, c in enumerate(head)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(c).ljust(widths[i]) for i, c in enumerate(r)) + " |")
    return "\n".join(lines)


SECTIONS = ("trivial", "respawn1", "respawn4", "rss", "many", "many_small")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="\n".join(__doc__.split("\n")[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="build directory (its bin/ has launch, bench_worker, bench_timeit)")
    ap.add_argument("--runs", type=int, default=20, help="runs of each launch figure")
    ap.add_argument("--torch-runs", type=int, default=5, help="runs of each torchrun figure")
    ap.add_argument("--agents", type=int, default=256, help="agents of the big rendezvous")
    ap.add_argument("--agent-runs", type=int, default=3, help="runs of the big rendezvous")
    ap.add_argument("--torch-agents", type=int, default=8,
                    help="agents of the rendezvous run side by side with torchrun (0: none)")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help="comma-separated sections: " + ", ".join(SECTIONS))
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="S",
                    help="before each section wait up to S seconds for 90%% idle CPUs")
    ap.add_argument("--no-torch", action="store_true", help="launch only")
    ap.add_argument("--quick", action="store_true", help="few runs (a smoke test)")
    ap.add_argument("--json", help="write every raw figure here")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.torch_runs, args.agent_runs = 3, 1, 1
    only = set(args.only.split(","))
    if not only <= set(SECTIONS):
        sys.exit("--only: unknown section(s) %s" % ", ".join(sorted(only - set(SECTIONS))))
    if args.torch_agents <= 0:
        only.discard("many_small")
    bin_dir = os.path.join(os.path.abspath(args.build), "bin")
    for b in ("launch", "bench_worker", "bench_timeit"):
        if not os.access(os.path.join(bin_dir, b), os.X_OK):
            sys.exit("%s/%s is missing: build first (cmake --build %s)" % (bin_dir, b, args.build))
    # Many agents: the hosting agent holds one socket per agent; each
    # agent a few pipes per worker.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < args.agents * 4 + 64:
        log("warning: open-file limit %d is low for %d agents" % (want, args.agents))
    torch_ok = not args.no_torch and subprocess.run(
        [PYTHON, "-c", "import torch.distributed.run"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    if not args.no_torch and not torch_ok:
        log("torch.distributed.run is not importable by %s (set PYTHON_EXEC): launch "
            "only" % PYTHON)
    R = {"machine": machine(), "args": vars(args), "load_start": loadavg()}
    tmp = tempfile.mkdtemp(prefix="launch-bench-")
    # What the jobs leave in TMPDIR (torchrun's torchelastic_* log dirs,
    # launch's registry launch-UID) goes with tmp.
    os.environ["TMPDIR"] = tmp
    launch = os.path.join(bin_dir, "launch")
    procs = Procs()

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    interrupted = False
    try:
        if "trivial" in only:
            wait_quiet(R, "trivial", args.wait_quiet)
            log("1. launch-to-exit of 8 x /bin/true")
            R["trivial"] = {"launch": timeit(bin_dir, [launch, "--standalone", "--nproc-per-node",
                                                       "8", "--no-python", "/bin/true"],
                                             args.runs, tmp, "trivial-launch")}
            if torch_ok:
                R["trivial"]["torchrun"] = timeit(bin_dir, TORCHRUN + [
                    "--standalone", "--nproc_per_node", "8", "--no_python"] + TORCH_FIX +
                    ["/bin/true"], args.torch_runs, tmp, "trivial-torchrun")
        if "respawn1" in only:
            wait_quiet(R, "respawn1", args.wait_quiet)
            log("2. failure-to-respawn, one node")
            R["respawn1"] = {"launch": respawn(procs, bin_dir, tmp, "launch", 1, 8, args.runs, 60)}
            if torch_ok:
                R["respawn1"]["torchrun"] = respawn(procs, bin_dir, tmp, "torchrun", 1, 8,
                                                    args.torch_runs, 120)
        if "respawn4" in only:
            wait_quiet(R, "respawn4", args.wait_quiet)
            log("   failure-to-respawn, 4 agents")
            R["respawn4"] = {"launch": respawn(procs, bin_dir, tmp, "launch", 4, 2, args.runs, 60)}
            if torch_ok:
                R["respawn4"]["torchrun"] = respawn(procs, bin_dir, tmp, "torchrun", 4, 2,
                                                    max(1, args.torch_runs // 2), 180)
        if "rss" in only:
            wait_quiet(R, "rss", args.wait_quiet)
            log("3. peak RSS of the agent")
            R["rss"] = {"launch": peak_rss(procs, bin_dir, tmp, "launch"),
                        "launch_nobind": peak_rss(procs, bin_dir, tmp, "launch",
                                                  ("--cpu-bind", "none"))}
            if torch_ok:
                R["rss"]["torchrun"] = peak_rss(procs, bin_dir, tmp, "torchrun")
        if "many" in only:
            wait_quiet(R, "many", args.wait_quiet)
            log("4. rendezvous of %d agents" % args.agents)
            R["many"] = {"launch": many(procs, bin_dir, tmp, "launch", args.agents,
                                        args.agent_runs)}
        if "many_small" in only:
            wait_quiet(R, "many_small", args.wait_quiet)
            log("   rendezvous of %d agents, side by side" % args.torch_agents)
            R["many_small"] = {"launch": many(procs, bin_dir, tmp, "launch", args.torch_agents,
                                              args.agent_runs)}
            if torch_ok:
                R["many_small"]["torchrun"] = many(procs, bin_dir, tmp, "torchrun",
                                                   args.torch_agents, 1)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        procs.cleanup()
    if interrupted:
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit("interrupted: every process it started is ended, %s removed" % tmp)
    failed = any(isinstance(v, dict) and (v.get("failed") or 0) > 0
                 for sec in SECTIONS for v in R.get(sec, {}).values())
    if failed:
        log("some runs failed: their logs are kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    R["load_end"] = loadavg()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(R, f, indent=1)
    m = R["machine"]
    print("%s; %s, %d cores, %.0f GiB; Linux %s; torch %s" % (
        m["date"], m["cpu"], m["cores"], m["mem_gib"], m["kernel"], m["torch"]))
    print(table(R, args))
    if "many" in R and R["many"]["launch"].get("cpu_s"):
        mm = R["many"]["launch"]
        print("%d agents: starting them took %s; CPU of all agents and workers %.2f s "
              "(on %d cores), of the hosting agent (server included) %.3f s; VmHWM of the "
              "hosting agent %s, of the last agent %s" % (
                  args.agents, fmt(med(mm["spawn_ms"]), "s"), med(mm["cpu_s"]),
                  m["cores"], med(mm["host_cpu_s"]), fmt(med(mm["host_vmhwm_kb"]), "MB"),
                  fmt(med(mm["agent_vmhwm_kb"]), "MB")))
    if "rss" in R:
        r = R["rss"]["launch"]
        print("libraries the agent maps (default binding): %s; GPU libraries: %s" % (
            ", ".join(r["libs"]) or "?", ", ".join(r["gpu_libs"]) or "none"))
    if "trivial" in R:
        t = R["trivial"]
        print("ru_maxrss of the trivial job under bench_timeit (the agent or any child it "
              "reaped): launch %s, torchrun %s" % (
                  fmt(med(t["launch"]["maxrss_kb"]), "MB"),
                  fmt(med(t["torchrun"]["maxrss_kb"]), "MB") if t.get("torchrun") else "n/a"))
    for key in ("respawn1", "respawn4"):
        if key in R:
            r = R[key]
            print("%s: first worker of the next generation started after %s (launch), %s "
                  "(torchrun), medians" % (
                      key, fmt(med(r["launch"]["first_ms"])),
                      fmt(med(r["torchrun"]["first_ms"])) if r.get("torchrun") else "n/a"))
    print("load average at start / end: %s / %s; idle CPU share before each section: %s" % (
        R["load_start"], R["load_end"],
        ", ".join("%s %.0f%%" % (k, 100 * v) for k, v in R.get("idle_before", {}).items())))


if __name__ == "__main__":
    main()
