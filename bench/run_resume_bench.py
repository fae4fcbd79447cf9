#!/usr/bin/env python3
"""Time from a worker's death to training running again at the resumed
step (docs/BENCHMARKS.md, "Resume after a failure"):

  launch   launch --standalone --ckpt-dir D ... train_gpt --ckpt-every K
  torchrun python -m torch.distributed.run --standalone ... torch_resume.py
           (bench/torch_resume.py: the GPT-2 of bench/torch_gpt2.py, DDP,
           its own torch.save checkpoint)

Each run trains until a checkpoint exists and a few steps more, SIGKILLs the
worker of rank `--victim`, and timestamps rank 0's output lines as they
arrive: "resumed" is the line saying the state was loaded, "first step"
the first completed step after it. Both jobs checkpoint every K steps.
For launch also the agents' agreement on the step (its log line: seconds,
shards hashed or trusted because this agent verified or committed them
before; docs/checkpoints.md).

torchrun runs with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 unless
--torchrun-shared-store: by default (PyTorch >= 2.4) a torchrun agent keeps
one TCPStore for every restart and the restarted workers find the killed
ones' gloo addresses in it (pytorch/pytorch#135712): on 2026-12-05, 8 of 16
restart attempts of 2 CPU ranks lost that race (a rank exits 1 with
"Connection refused", or both wait for each other until the 30-minute
process-group timeout), which counted failed attempts into torchrun's
figure or ended the run. The opt-out gives each restart a fresh store: 9 of
9 clean, no slower than a clean default restart. One rank (the GPU runs,
--nproc 1) has no peer to race.

With --standby, launch runs with --standby (docs/launcher.md#standby) and
the kill waits until the victim's standby is ready (blocked reading its
LAUNCH_STANDBY_FD, which it does after saying ready).

usage: run_resume_bench.py [--preset tiny|gpt2-124m] [--nproc 2]
                           [--repeat 3] [--build build] [--device cpu|cuda]
                           [--standby] [--torchrun-shared-store]
On the GPU machine: --preset gpt2-124m --device cuda --nproc 1 (or 2).
PYTHON_EXEC, else the first of python3, /usr/bin/python3 that imports torch,
runs torchrun and the PyTorch script.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def find_python():
    cands = [os.environ.get("PYTHON_EXEC"), "python3", "/usr/bin/python3"]
    for c in cands:
        if c and subprocess.run([c, "-c", "import torch.distributed.run"],
                                capture_output=True).returncode == 0:
            return c
    sys.exit("no python with torch found: set PYTHON_EXEC")


def descendants(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for k in kids.get(p, []):
            out.append(k)
            todo.append(k)
    return out


def rank_pid(root, rank):
    """The worker process of `rank` under root (its RANK variable)."""
    for p in descendants(root):
        try:
            with open("/proc/%d/environ" % p, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if b"RANK=%d" % rank in env:
            try:  # not launch's own processes (its guardian has the env too)
                if os.path.basename(os.readlink("/proc/%d/exe" % p)) == "launch":
                    continue
            except OSError:
                continue
            try:
                with open("/proc/%d/cmdline" % p, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if b"train_gpt" in cmd or b"torch_resume.py" in cmd:
                return p
    return None


def standby_ready(root):
    """A standby under root blocked in read(2) of fd 3 (x86-64: syscall
    0): it said ready."""
    for p in descendants(root):
        try:
            with open("/proc/%d/environ" % p, "rb") as f:
                if b"LAUNCH_STANDBY_FD=3" not in f.read().split(b"\0"):
                    continue
            with open("/proc/%d/syscall" % p) as f:
                sc = f.read().split()
        except OSError:
            continue
        if len(sc) > 1 and sc[0] == "0" and int(sc[1], 16) == 3:
            return True
    return False


class Job:
    def __init__(self, argv, env):
        self.lines = []  # (monotonic time, line)
        self.cv = threading.Condition()
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.p.stdout:
            t = time.monotonic()
            with self.cv:
                self.lines.append((t, raw.decode(errors="replace").rstrip()))
                self.cv.notify_all()
        with self.cv:
            self.lines.append((time.monotonic(), None))
            self.cv.notify_all()

    def wait_for(self, rx, after=0.0, timeout=600):
        """The first line matching rx that arrived after `after`."""
        deadline = time.monotonic() + timeout
        i = 0
        with self.cv:
            while True:
                while i < len(self.lines):
                    t, line = self.lines[i]
                    i += 1
                    if line is None:
                        raise RuntimeError("the job ended:\n" + self.text())
                    m = re.search(rx, line)
                    if m and t >= after:
                        return t, m
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError("timed out waiting for %r:\n%s" % (rx, self.text()))
                self.cv.wait(left)

    def text(self):
        return "\n".join(l for _, l in self.lines[-40:] if l)

    def stop(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()


AGREED = r"checkpoint agreement on step \d+ took ([0-9.]+) s: (.*)"


def measure(argv, env, every, victim, step_rx, resumed_rx, timeout, ready,
            trace=False, agreed_rx=None, standby=False):
    job = Job(argv, env)
    try:
        # a checkpoint, and a few steps past it; the kill only once the
        # checkpoint is committed (`ready` exists: a big model's background
        # save takes seconds, and a kill before it is a fresh start)
        job.wait_for(step_rx.replace(r"(\d+)", str(every + 3)), timeout=timeout)
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready):
            if time.monotonic() > deadline:
                raise RuntimeError("no committed checkpoint (%s) after %.0f s:\n%s"
                                   % (ready, timeout, job.text()))
            time.sleep(0.05)
        while standby and not standby_ready(job.p.pid):
            if time.monotonic() > deadline:
                raise RuntimeError("no ready standby after %.0f s:\n%s"
                                   % (timeout, job.text()))
            time.sleep(0.05)
        pid = rank_pid(job.p.pid, victim)
        if pid is None:
            raise RuntimeError("no worker of rank %d found" % victim)
        t_kill = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        t_res, m = job.wait_for(resumed_rx, after=t_kill, timeout=timeout)
        step = int(m.group(1))
        read_ms = float(m.group(2))
        t_step, _ = job.wait_for(step_rx.replace(r"(\d+)", str(step + 1)),
                                 after=t_res, timeout=timeout)
        if trace:  # every line of the restart, timed from the kill
            with job.cv:
                for t, line in job.lines:
                    if line is not None and t_kill <= t <= t_step:
                        print("  +%.3f s  %s" % (t - t_kill, line), flush=True)
        agreed = None
        if agreed_rx:
            _, m = job.wait_for(agreed_rx, after=t_kill, timeout=timeout)
            agreed = (float(m.group(1)), m.group(2))
        return t_res - t_kill, t_step - t_kill, read_ms, agreed
    finally:
        job.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--only", choices=["launch", "torchrun"])
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds to wait for each awaited line; on expiry the "
                    "job's last lines are printed and the run fails")
    ap.add_argument("--standby", action="store_true",
                    help="launch --standby: the kill waits for a ready "
                    "standby, which takes the rank")
    ap.add_argument("--torchrun-shared-store", action="store_true",
                    help="leave torchrun its default store shared across "
                    "restarts (racy with 2+ ranks, see above)")
    ap.add_argument("--trace", action="store_true",
                    help="print the jobs' lines from the kill to the first "
                    "step, timed from the kill")
    a = ap.parse_args()
    py = find_python()
    victim = 1 if a.nproc > 1 else 0
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LAUNCH_CKPT_DIR",
              "LAUNCH_RESUME_STEP", "LAUNCH_CKPT_VERIFIED"):
        env.pop(k, None)
    if a.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    launch = os.path.join(a.build, "bin", "launch")
    train = os.path.join(a.build, "bin", "train_gpt")
    res = {"launch": [], "torchrun": []}
    # What the jobs leave in TMPDIR (torchrun's torchelastic_* log dirs,
    # torch's torchinductor_USER, launch's registry launch-UID) goes too.
    top = tempfile.mkdtemp(prefix="resume-bench-")
    env["TMPDIR"] = top
    try:
        run_all(a, py, env, victim, launch, train, res, top)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    report(a, res)


def run_all(a, py, env, victim, launch, train, res, top):
    for i in range(a.repeat):
        d = tempfile.mkdtemp(prefix="run-", dir=top)
        try:
            if a.only != "torchrun":
                argv = [launch, "--standalone", "--nproc-per-node", str(a.nproc),
                        "--max-restarts", "3", "--ckpt-dir",
                        os.path.join(d, "ck")] + (
                            ["--standby"] if a.standby else []) + [
                        train, "--preset", a.preset,
                        "--steps", "100000", "--ckpt-every", str(a.every),
                        "--log-every", "1", "--device", a.device]
                res["launch"].append(measure(
                    argv, env, a.every, victim, r"\bstep +(\d+)/",
                    r"resumed from step (\d+) of .*? read in ([0-9.]+) ms", a.timeout,
                    os.path.join(d, "ck", "latest"), a.trace, AGREED,
                    a.standby))
            if a.only != "launch":
                tenv = dict(env)
                if not a.torchrun_shared_store:
                    tenv["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
                argv = [py, "-m", "torch.distributed.run", "--standalone",
                        "--nproc_per_node", str(a.nproc), "--max_restarts", "3",
                        "--redirects", "0:1", "--tee", "0:1",
                        os.path.join(HERE, "torch_resume.py"), "--ckpt",
                        os.path.join(d, "torch.pt"), "--preset", a.preset,
                        "--ckpt-every", str(a.every)]
                res["torchrun"].append(measure(
                    argv, tenv, a.every, victim, r"\bstep (\d+) loss",
                    r"resumed from step (\d+) \(read in ([0-9.]+) ms", a.timeout,
                    os.path.join(d, "torch.pt"), a.trace))
        finally:
            shutil.rmtree(d, ignore_errors=True)
        for k, v in res.items():
            if v:
                print("run %d %-8s resumed %.3f s, first step %.3f s, "
                      "checkpoint read %.0f ms%s" % ((i + 1, k) + v[-1][:3] + (
                          "; agreement %.3f s: %s" % v[-1][3] if v[-1][3]
                          else "",)), flush=True)


def report(a, res):
    out = {}
    for k, v in res.items():
        if v:
            out[k] = [statistics.median(x[j] for x in v) for j in range(3)]
            print("%-8s median of %d: worker death -> state loaded %.3f s, -> "
                  "first step done %.3f s (checkpoint read %.0f ms)%s"
                  % ((k, len(v)) + tuple(out[k]) + (
                      "; agreement %.3f s" % statistics.median(
                          x[3][0] for x in v) if v[0][3] else "",)))
    if len(out) == 2:
        print("RESULT preset=%s nproc=%d launch_s=%.3f torchrun_s=%.3f "
              "speedup=%.1f torchrun_store=%s"
              % (a.preset, a.nproc, out["launch"][1], out["torchrun"][1],
                 out["torchrun"][1] / out["launch"][1],
                 "shared" if a.torchrun_shared_store else "per-restart"))


if __name__ == "__main__":
    main()
