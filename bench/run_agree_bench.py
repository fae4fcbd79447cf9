#!/usr/bin/env python3
"""Restart latency with --ckpt-dir at N nodes, split into the round forming
and the checkpoint agreement (issue #25, "the resume step inside the
rounds"; docs/BENCHMARKS.md, "Checkpoint agreement").

For each N: N `launch` agents on 127.0.x.y, one worker each
(bench_worker respawn), one shared --ckpt-dir holding a final step of
launch's layout written by N ranks (one small shard each), --max-restarts 1.
Round 0's rank 0 fails once every worker of round 0 started (gated on
their stamps, not on time); round 1 exits 0. Every agent's --event-log
gives, for the restart (round 1):
  down     restart.downtime_s: first sign of the failure -> workers started
  form     round_formed.seconds: JOIN sent -> the round's reply
  agree    resume_agreed.seconds: the round -> every node agreed and
           rolled back (views, verification, rollback barrier)
The figures are the median and the max over the nodes (the slowest node
gates the job), per run; `agree/down` is the agreement's share of the
restart. --without runs the same jobs without --ckpt-dir for the
baseline. Never part of the tests; no GPU, no torch, no iproute2.

  bench/run_agree_bench.py [--build build] [--nodes 1,8,256] [--runs 3]
                           [--without] [--json FILE]
"""
import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where a failed run's logs are kept: launchtest's scratch dir replaces
# TMPDIR and is removed at exit.
KEEP_DIR = os.environ.get("TMPDIR") or "/tmp"
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
import ckptfix  # noqa: E402
import launchtest as lt  # noqa: E402  (free_port; its scratch dir holds ours)


def addr(i):
    """Agent i: 127.0.0.1 .. 127.0.0.254, then 127.0.1.1 ..."""
    return "127.0.%d.%d" % (i // 254, i % 254 + 1)


def events(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def one_run(bin_dir, n, ckpt, tmp):
    d = tempfile.mkdtemp(prefix="agree%d-" % n, dir=tmp)
    stamps = os.path.join(d, "stamps")
    os.mkdir(stamps)
    ck = os.path.join(d, "ck")
    os.mkdir(ck)
    ckptfix.launch_step(ck, 100, n, False, job="agree")
    port = lt.free_port()
    logf = open(os.path.join(d, "agents.log"), "w")
    ps = []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    try:
        for i in range(n):
            argv = [os.path.join(bin_dir, "launch"), "--nnodes", str(n),
                    "--nproc-per-node", "1",
                    "--rdzv-endpoint", "127.0.0.1:%d" % port,
                    "--rdzv-id", "agree", "--local-addr", addr(i),
                    "--rdzv-conf", "join_timeout=300", "--max-restarts", "1",
                    "--event-log", os.path.join(d, "ev%d.jsonl" % i)]
            if ckpt:
                argv += ["--ckpt-dir", ck]
            argv += ["--no-python", os.path.join(bin_dir, "bench_worker"),
                     "respawn", stamps, "0"]
            env = dict(os.environ, LAUNCH_HOSTNAME="node%03d" % i)
            ps.append(subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True))
            if i == 0:  # the hosting agent first: the others find it listening
                t_end = time.time() + 10
                while time.time() < t_end:
                    try:
                        socket.create_connection(("127.0.0.1", port), 0.2).close()
                        break
                    except OSError:
                        time.sleep(0.01)
        load_max = load0
        t_end = time.time() + 600
        while any(p.poll() is None for p in ps) and time.time() < t_end:
            load_max = max(load_max, os.getloadavg()[0])
            time.sleep(0.2)
        rcs = [p.poll() for p in ps]
    finally:
        for p in ps:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        logf.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = {"down": [], "form": [], "agree": []}
    for i in range(n):
        for e in events(os.path.join(d, "ev%d.jsonl" % i)):
            if e.get("round") != 1:
                continue
            if e["event"] == "restart":
                res["down"].append(e["downtime_s"])
            elif e["event"] == "round_formed":
                res["form"].append(e["seconds"])
            elif e["event"] == "resume_agreed":
                res["agree"].append(e["seconds"])
    ok = all(rc == 0 for rc in rcs) and len(res["down"]) == n and \
        len(res["form"]) == n and (len(res["agree"]) == n or not ckpt)
    if not ok:
        # Out of tmp (and of launchtest's scratch dir), both removed at exit.
        kept = tempfile.mkdtemp(prefix="agree-bench-failed-", dir=KEEP_DIR)
        shutil.move(d, kept)
        print("  %d nodes: a run failed (exit codes %s, %d restart events); "
              "its logs and event logs kept in %s" % (
                  n, sorted(set(rcs)), len(res["down"]), kept))
        return None
    shutil.rmtree(d)
    res["cpu_s"] = (after.ru_utime + after.ru_stime) - \
        (before.ru_utime + before.ru_stime)
    res["load_max"] = load_max
    return res


def summary(runs, key):
    med = [statistics.median(r[key]) for r in runs if r[key]]
    mx = [max(r[key]) for r in runs if r[key]]
    if not med:
        return None
    return {"median": statistics.median(med), "max": statistics.median(mx)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--nodes", default="1,8,256")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--without", action="store_true",
                    help="also run without --ckpt-dir (the baseline)")
    ap.add_argument("--json")
    a = ap.parse_args()
    bin_dir = os.path.join(a.build if os.path.isabs(a.build)
                           else os.path.join(ROOT, a.build), "bin")
    for b in ("launch", "bench_worker"):
        if not os.access(os.path.join(bin_dir, b), os.X_OK):
            sys.exit("run_agree_bench: %s/%s is missing: build first "
                     "(cmake --build %s)" % (bin_dir, b, a.build))
    tmp = tempfile.mkdtemp(prefix="agree-bench-")
    out = {"nproc": os.cpu_count(), "results": []}
    try:
        for n in [int(x) for x in a.nodes.split(",")]:
            for ckpt in ([True, False] if a.without else [True]):
                runs = [r for r in (one_run(bin_dir, n, ckpt, tmp)
                                    for _ in range(a.runs)) if r]
                row = {"nodes": n, "ckpt": ckpt, "runs": len(runs),
                       "failed": a.runs - len(runs)}
                for k in ("down", "form", "agree"):
                    row[k] = summary(runs, k)
                if runs:
                    row["cpu_s"] = statistics.median(r["cpu_s"] for r in runs)
                    row["load_max"] = max(r["load_max"] for r in runs)
                out["results"].append(row)

                def f(k, w):
                    return "%.3f" % row[k][w] if row.get(k) else "-"
                share = "-"
                if row.get("agree") and row.get("down") and row["down"]["max"]:
                    share = "%.0f%%" % (100 * row["agree"]["max"] / row["down"]["max"])
                print("%4d nodes %-8s runs %d/%d  down med %s max %s s | form "
                      "med %s max %s s | agree med %s max %s s | agree/down "
                      "(max) %s | cpu %.1f s, load max %.1f" % (
                          n, "ckpt" if ckpt else "no-ckpt", len(runs), a.runs,
                          f("down", "median"), f("down", "max"),
                          f("form", "median"), f("form", "max"),
                          f("agree", "median"), f("agree", "max"), share,
                          row.get("cpu_s", 0), row.get("load_max", 0)),
                      flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
