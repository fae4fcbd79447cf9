#!/usr/bin/env python3
"""What --metrics-port costs the agent (issue #23). Never part of the tests.

    python3 bench/run_metrics_bench.py [--build build] [--nproc 8] [--seconds 20]
                                       [--nvml PATH]

The job: NPROC ranks of tests/hang_worker in its slow mode (every rank
reports progress with scalars 10 times a second and meets the others in a
store barrier each step), under `launch --standalone`, twice: metrics off,
then --metrics-port 127.0.0.1:0 with a scrape a second (as Prometheus would).
Measures, in the steady state (from 3 s after the start for SECONDS):
  1. the agent's CPU time (utime + stime of /proc/PID/stat) per second of
     wall time, off and on: the metrics' share is the difference;
  2. the agent's peak RSS (VmHWM), off and on;
  3. where the agent's memory is at the end: Rss per mapping (library,
     heap, anonymous) from /proc/PID/smaps, NVML's (libnvidia-ml.so and
     the /dev/nvidia* mappings) always shown;
  4. the latency of a scrape of /metrics on a kept-alive connection (500
     in a row after the steady state: p50, p99, max), and its size;
  5. the GPU sampler (`launch gpu-sampler`, NVML in a child process of the
     agent: launcher/sampler.h), found among the agent's children: its
     VmHWM, CPU and resident memory by mapping, apart from the agent's, so
     that NVML's share is measured on its own. --nvml PATH sets
     LAUNCH_NVML_LIBRARY (tests' libfake_nvml.so where there is no GPU);
     without NVML (no /dev/nvidiactl) there is no sampler.
Goals (issue #23): < 1 % of a core at 1 Hz with 8 workers; a scrape < 1 ms;
the agent under 8 MB with metrics on."""
import argparse
import http.client
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "py"))
from launchtest import gpu_sampler_of as sampler_of  # noqa: E402


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hwm_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))


def rss_kb(pid):
    """VmRSS now, and smaps_rollup's private and shared (file) parts."""
    with open("/proc/%d/status" % pid) as f:
        rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    roll = {}
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                m = re.match(r"(\w+):\s+(\d+) kB", line)
                if m:
                    roll[m.group(1)] = int(m.group(2))
    except OSError:
        pass
    return rss, roll.get("Private_Clean", 0) + roll.get("Private_Dirty", 0), \
        roll.get("Shared_Clean", 0) + roll.get("Shared_Dirty", 0)


def smaps_kb(pid):
    """Resident memory per mapping name from /proc/PID/smaps: {name: {Rss,
    Anonymous, Private}} in kB; a file's mappings under its base name
    (libnvidia-ml.so.550.54.15), the unnamed ones as [anon]. A library's
    Anonymous part is its relocated and written pages; the rest of its Rss
    is the file's pages (text, read-only data)."""
    out = {}
    cur = None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            m = re.match(r"[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \d+\s*(.*)$", line)
            if m:
                name = m.group(1).strip() or "[anon]"
                if name.startswith("/"):
                    name = os.path.basename(name)
                cur = out.setdefault(name, {"Rss": 0, "Anonymous": 0,
                                            "Private": 0})
                continue
            m = re.match(r"(\w+):\s+(\d+) kB", line)
            if m and cur is not None:
                k, v = m.group(1), int(m.group(2))
                if k in ("Rss", "Anonymous"):
                    cur[k] += v
                elif k in ("Private_Clean", "Private_Dirty"):
                    cur["Private"] += v
    return out


def print_smaps(name, maps, least_kb=64):
    """The mappings of at least least_kb resident, and every NVIDIA one
    (libnvidia-ml, /dev/nvidia*), largest first."""
    rows = sorted(maps.items(), key=lambda kv: -kv[1]["Rss"])
    total = sum(v["Rss"] for v in maps.values())
    print("  resident memory by mapping, %s (smaps, total %.2f MB):" %
          (name, total / 1024))
    rest = 0
    for lib, v in rows:
        if v["Rss"] >= least_kb or "nvidia" in lib:
            print("    %-34s %7.2f MB (anonymous %.2f MB, private %.2f MB)" %
                  (lib, v["Rss"] / 1024, v["Anonymous"] / 1024,
                   v["Private"] / 1024))
        else:
            rest += v["Rss"]
    print("    %-34s %7.2f MB" % ("the rest (< %d kB each)" % least_kb,
                                   rest / 1024))


def run(build, nproc, seconds, metrics, nvml=None):
    d = tempfile.mkdtemp(prefix="launch-metbench-")
    hw = os.path.join(build, "tests", "hang_worker")
    args = [os.path.join(build, "bin", "launch"), "--standalone",
            "--nproc-per-node", str(nproc), "-q"]
    if metrics:
        args += ["--metrics-port", "127.0.0.1:0"]
    args += ["--no-python", hw, "100000", "slow", d]
    log = open(os.path.join(d, "out"), "w+")
    env = dict(os.environ)
    if nvml:
        env["LAUNCH_NVML_LIBRARY"] = nvml
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    res = {}
    try:
        port = None
        t_end = time.time() + 20
        while metrics and port is None and time.time() < t_end:
            log.flush()
            m = re.search(r"on http://127\.0\.0\.1:(\d+)/metrics",
                          open(log.name).read())
            port = int(m.group(1)) if m else None
            time.sleep(0.05)
        if metrics and port is None:
            sys.exit("run_metrics_bench: the agent printed no metrics port in "
                     "20 s; its output:\n" + open(log.name).read()[-3000:])
        time.sleep(3)
        conn = http.client.HTTPConnection("127.0.0.1", port) if metrics else None
        smp = sampler_of(p.pid) if metrics else None
        s0 = cpu_s(smp) if smp else 0
        c0, w0 = cpu_s(p.pid), time.time()
        while time.time() - w0 < seconds:
            if conn:
                conn.request("GET", "/metrics")
                body = conn.getresponse().read()
            time.sleep(1)
        if p.poll() is not None:
            sys.exit("run_metrics_bench: the job exited %d before the end of "
                     "the measurement (no figure); its output:\n%s" % (
                         p.returncode, open(log.name).read()[-3000:]))
        res["cpu_per_s"] = (cpu_s(p.pid) - c0) / (time.time() - w0)
        if smp:
            res["smp_cpu_per_s"] = (cpu_s(smp) - s0) / (time.time() - w0)
        if conn:
            lat = []
            for _ in range(500):
                t0 = time.perf_counter()
                conn.request("GET", "/metrics")
                body = conn.getresponse().read()
                lat.append(time.perf_counter() - t0)
            lat.sort()
            res["scrape_ms"] = (lat[250] * 1e3, lat[495] * 1e3, lat[-1] * 1e3)
            res["bytes"] = len(body)
            res["series"] = sum(1 for x in body.decode().splitlines()
                                if x and not x.startswith("#"))
            conn.close()
        res["hwm_kb"] = hwm_kb(p.pid)
        res["rss_kb"] = rss_kb(p.pid)
        res["smaps"] = smaps_kb(p.pid)
        if smp and sampler_of(p.pid) == smp:
            res["smp"] = {"pid": smp, "hwm_kb": hwm_kb(smp),
                          "rss_kb": rss_kb(smp), "smaps": smaps_kb(smp)}
        res["sampler_up"] = bool(metrics and re.search(
            r"launch_gpu_sampler_up\{[^}]*\} 1", body.decode()))
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        shutil.rmtree(d)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--nproc", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--nvml", help="LAUNCH_NVML_LIBRARY for both runs")
    a = ap.parse_args()
    hw = os.path.join(a.build, "tests", "hang_worker")
    if not os.access(os.path.join(a.build, "bin", "launch"), os.X_OK) or \
            not os.access(hw, os.X_OK):
        sys.exit("run_metrics_bench: %s/bin/launch or %s is missing: build them "
                 "(hang_worker needs -DLAUNCH_BUILD_TESTS=ON; cmake --build %s "
                 "--target launch hang_worker)" % (a.build, hw, a.build))
    off = run(a.build, a.nproc, a.seconds, False, a.nvml)
    on = run(a.build, a.nproc, a.seconds, True, a.nvml)
    print("agent, %d workers reporting 10 Hz, %g s steady state" %
          (a.nproc, a.seconds))
    print("  CPU: off %.2f %% of a core, on (1 scrape/s) %.2f %%: metrics "
          "%.2f %% (goal < 1 %%)" % (off["cpu_per_s"] * 100,
                                    on["cpu_per_s"] * 100,
                                    (on["cpu_per_s"] - off["cpu_per_s"]) * 100))
    print("  peak RSS: off %.2f MB, on %.2f MB (goal < 8 MB on)" %
          (off["hwm_kb"] / 1024, on["hwm_kb"] / 1024))
    for name, r in (("off", off), ("on", on)):
        rss, priv, shared = r["rss_kb"]
        print("  RSS at the end, %s: %.2f MB (private %.2f MB, shared %.2f "
              "MB: smaps_rollup)" % (name, rss / 1024, priv / 1024,
                                     shared / 1024))
    for name, r in (("off", off), ("on", on)):
        print_smaps(name, r["smaps"])
    print("  scrape of /metrics (%d series, %d bytes, kept-alive): p50 %.3f "
          "ms, p99 %.3f ms, max %.3f ms (goal < 1 ms)" %
          ((on["series"], on["bytes"]) + on["scrape_ms"]))
    smp = on.get("smp")
    if smp is None:
        print("  GPU sampler: none (no NVML here: no LAUNCH_NVML_LIBRARY, no "
              "/dev/nvidiactl)")
        return
    rss, priv, shared = smp["rss_kb"]
    print("  GPU sampler (launch gpu-sampler, pid %d, the agent's child; "
          "answered the last scrape: %s):" %
          (smp["pid"], "yes" if on["sampler_up"] else "no"))
    print("    CPU %.2f %% of a core; peak RSS %.2f MB; RSS at the end %.2f MB "
          "(private %.2f MB, shared %.2f MB)" %
          (on.get("smp_cpu_per_s", 0) * 100, smp["hwm_kb"] / 1024,
           rss / 1024, priv / 1024, shared / 1024))
    print("    agent + sampler, peak RSS: %.2f MB" %
          ((on["hwm_kb"] + smp["hwm_kb"]) / 1024))
    print_smaps("the sampler", smp["smaps"])


if __name__ == "__main__":
    main()
