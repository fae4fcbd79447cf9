#!/usr/bin/env python3
"""The topology cache's benchmark (issue #10): what a start costs with the
topology discovered (LAUNCH_TOPO_CACHE=0), read from the cache, and not
needed (--cpu-bind none). Never part of the test pass.

    python3 bench/run_topo_cache_bench.py [--build build-rel] [--base DIR]
        [--runs 40] [--bind cores] [--nproc 8]

For each configuration, interleaved run by run: `launch --standalone
--nproc-per-node N --cpu-bind B /bin/true` and `launch topo --json`, each
timed from spawn to wait4: wall time and CPU time (user + sys from wait4,
the agent and the workers it reaped: less skewed than wall time on a busy
machine); then the agent's VmHWM while N workers sleep 1 s (polled every
2 ms). --bind: the binding that needs the topology (on a GPU node the
default binding does; on a machine without GPUs the default is none, so
the default here is cores). --base: another build (main) measured the same
way. The cache lives in a fresh private directory (XDG_RUNTIME_DIR), warmed
by a first start. Every process it starts it waits for."""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spawn_wait(argv, env):
    null = os.open(os.devnull, os.O_WRONLY)
    t0 = time.monotonic()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=[
        (os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)])
    _, st, ru = os.wait4(pid, 0)
    wall = (time.monotonic() - t0) * 1000
    os.close(null)
    if os.waitstatus_to_exitcode(st) != 0:
        raise SystemExit("%s exited %d" % (" ".join(argv), os.waitstatus_to_exitcode(st)))
    return wall, (ru.ru_utime + ru.ru_stime) * 1000


def vmhwm(argv, env):
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hwm = 0
    while p.poll() is None:
        try:
            with open("/proc/%d/status" % p.pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        hwm = max(hwm, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.002)
    return hwm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build-rel"))
    ap.add_argument("--base", help="another build directory to compare (main)")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--bind", default="cores")
    ap.add_argument("--nproc", type=int, default=8)
    a = ap.parse_args()
    new = os.path.join(a.build, "bin", "launch")
    cfgs = []
    if a.base:
        old = os.path.join(a.base, "bin", "launch")
        cfgs += [("base, --cpu-bind %s" % a.bind, old, {}, a.bind),
                 ("base, --cpu-bind none", old, {}, "none")]
    cfgs += [("LAUNCH_TOPO_CACHE=0, --cpu-bind %s" % a.bind, new,
              {"LAUNCH_TOPO_CACHE": "0"}, a.bind),
             ("cache warm, --cpu-bind %s" % a.bind, new, {}, a.bind),
             ("--cpu-bind none", new, {}, "none")]
    xdg = tempfile.mkdtemp(prefix="launch-topo-bench-")
    try:
        os.chmod(xdg, 0o700)
        base_env = dict(os.environ, XDG_RUNTIME_DIR=xdg)
        res = {c[0]: {"start": [], "topo": []} for c in cfgs}
        # The cache warmed by a first start, not timed: else the first
        # "cache warm" run discovers the topology.
        spawn_wait([new, "--standalone", "--nproc-per-node", str(a.nproc),
                    "--cpu-bind", a.bind, "/bin/true"], base_env)
        for _ in range(a.runs):
            for name, binary, extra, bind in cfgs:
                env = dict(base_env, **extra)
                res[name]["start"].append(spawn_wait(
                    [binary, "--standalone", "--nproc-per-node", str(a.nproc),
                     "--cpu-bind", bind, "/bin/true"], env))
                res[name]["topo"].append(spawn_wait(
                    [binary, "topo", "--json", "--nproc-per-node", str(a.nproc)], env))
        hwm = {}
        for name, binary, extra, bind in cfgs:
            hwm[name] = statistics.median(vmhwm(
                [binary, "--standalone", "--nproc-per-node", str(a.nproc), "--cpu-bind",
                 bind, "sleep", "1"], dict(base_env, **extra)) for _ in range(3))
        print("%s; %d runs each, interleaved; load average %s" % (
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), a.runs,
            open("/proc/loadavg").read().split()[:3]))
        print("| configuration | start: wall median / min (ms) | start: CPU median (ms) "
              "| launch topo: CPU median (ms) | agent VmHWM (MB) |")
        print("|---|---:|---:|---:|---:|")
        for name, _, _, _ in cfgs:
            s, t = res[name]["start"], res[name]["topo"]
            print("| %s | %.1f / %.1f | %.2f | %.2f | %.2f |" % (
                name, statistics.median(w for w, _ in s), min(w for w, _ in s),
                statistics.median(c for _, c in s), statistics.median(c for _, c in t),
                hwm[name] / 1024))
    finally:
        shutil.rmtree(xdg)


if __name__ == "__main__":
    main()
