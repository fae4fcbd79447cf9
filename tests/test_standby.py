"""launch --standby (workers/standby.c, rt_standby_wait, docs/launcher.md
#standby):
- resume: train_gpt under launch --standby with --ckpt-dir; the worker is
  SIGKILLed once a checkpoint exists and the standby said ready; its death
  is reported as its pipes close (exiting in /proc) and it is reaped; the
  standby started before the kill takes the rank (its pid is the new
  worker's), the job resumes at the agreed step, every loss after it and
  the final parameters are bitwise those of an uninterrupted run, a new
  standby appears, and at the end no process the job started is left.
- a standby that dies (SIGKILL) is replaced after a backoff, no worker
  failed and the job never restarted.
- a program that never says ready: at the restart the rank is forked as
  without --standby; with --standby-timeout the standby is killed and the
  warning says what --standby needs; a Python script gets no standby.
- a standby that prints 3 MB while it warms up (NCCL_DEBUG=INFO-like)
  still says ready and takes the rank (its output pipe held 64 KiB and
  blocked it), and what it printed reaches the console.
Gated on observed progress only (a checkpoint, a line, a standby blocked
in its read of fd 3), never on time; the worker is SIGSTOPped while the
test waits for a standby so that the job cannot end first. Every process
is ended by pid."""
import os
import re
import signal
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

BIN = os.path.dirname(os.path.abspath(lt.launch_bin()))
TRAIN = os.path.join(BIN, "train_gpt")
MULT = float(os.environ.get("LAUNCH_TEST_TIMEOUT_MULT", "1"))
MODEL = ["--preset", "tiny", "--steps", "120", "--val-every", "0",
         "--threads", "1", "--log-every", "1"]
# read(2) on this machine: a standby blocked reading fd 3 said ready
# (rt_standby_wait writes 'R' before it reads)
READ_NR = {"x86_64": 0, "aarch64": 63}.get(os.uname().machine)


def proc_env(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def standby_of(agent_pid, not_pid=None):
    """The agent's standby (LAUNCH_STANDBY_FD in its environment as it
    started: an adopted one keeps it in /proc) other than not_pid, or
    None."""
    for p in lt.children(agent_pid):
        if p != not_pid and b"LAUNCH_STANDBY_FD=3" in proc_env(p):
            return p
    return None


def ready(pid):
    """pid is blocked in read(3, ...): it said ready."""
    try:
        with open("/proc/%d/syscall" % pid) as f:
            f = f.read().split()
    except OSError:
        return False
    return len(f) > 1 and f[0] == str(READ_NR) and int(f[1], 16) == 3


def wait_standby(agent, not_pid=None):
    """A ready standby of agent other than not_pid: its pid."""
    found = []

    def cond():
        p = standby_of(agent.pid, not_pid)
        if p is not None and ready(p):
            found.append(p)
            return True
        return not agent.running()
    lt.wait_until(cond, 120 * MULT, "a ready standby")
    assert found, "the agent ended first:\n" + agent.output()
    return found[0]


def worker_of(agent_pid):
    for p in lt.children(agent_pid):
        if b"RANK=0" in proc_env(p) and b"LAUNCH_STANDBY_FD=3" not in proc_env(p):
            return p
    return None


def losses(out):
    """{step: loss text} of train_gpt's step lines."""
    return dict((int(m.group(1)), m.group(2)) for m in
                re.finditer(r"step +(\d+)/\d+ \| loss ([0-9.]+)", out))


def hold(a, pid, stopped, not_pid=None):
    """SIGSTOP the worker pid (the job cannot end meanwhile) until a
    standby other than not_pid is ready; RET the standby's pid."""
    os.kill(pid, signal.SIGSTOP)
    stopped.append(pid)
    return wait_standby(a, not_pid)


def finish(a):
    """The agent's end, exit 0: RET its output."""
    rc = a.wait(300 * MULT)
    out = a.output()
    assert rc == 0, out
    return out


def release(a, stopped):
    for p in stopped:
        if lt.pid_alive(p):
            os.kill(p, signal.SIGCONT)
    a.kill()


def gone(pids):
    left = [p for p in pids if lt.pid_alive(p)]
    assert not left, "processes left after the job: %s" % left


def test_resume(d, via):
    """via "launch": launch --ckpt-dir (the standby gets LAUNCH_STANDBY_CKPT,
    not the rank's LAUNCH_CKPT_DIR); "train_gpt": train_gpt's own flag.
    Either way the standby prepared the buffer the resume reads into."""
    ref = os.path.join(d, "ref.bin")
    if not os.path.exists(ref):
        p = lt.Proc([TRAIN] + MODEL + ["--dump-params", ref],
                    env={"RANK": "", "WORLD_SIZE": ""}, name="ref")
        assert p.wait(300 * MULT) == 0, p.output()
        with open(os.path.join(d, "ref.out"), "w") as f:
            f.write(p.output())
    with open(os.path.join(d, "ref.out")) as f:
        ref_losses = losses(f.read())
    ck = os.path.join(d, "ck-" + via)
    got = os.path.join(d, "got-%s.bin" % via)
    flag = ["--ckpt-dir", ck]
    a = lt.launch(["--standalone", "--nproc-per-node", "1", "--standby",
                   "--max-restarts", "1"] + (flag if via == "launch" else []) +
                  [TRAIN] + MODEL + (flag if via == "train_gpt" else []) +
                  ["--ckpt-every", "5", "--dump-params", got],
                  env={"LAUNCH_DEBUG": "spawn"})
    seen = set()
    stopped = []
    try:
        lt.wait_until(lambda: os.path.exists(os.path.join(ck, "latest")) or
                      not a.running(), 120 * MULT, "a checkpoint")
        w = worker_of(a.pid)
        assert w, "no worker:\n" + a.output()
        # the job must not end while the standby starts
        sb = hold(a, w, stopped)
        seen |= {w, sb}
        os.kill(w, signal.SIGKILL)
        lt.wait_until(lambda: "resumed from step" in a.output() or
                      not a.running(), 120 * MULT, "the resume")
        # the dead worker, reported as its pipes closed, is still reaped
        lt.wait_until(lambda: not os.path.exists("/proc/%d" % w),
                      60 * MULT, "the killed worker reaped")
        out = a.output()
        m = re.search(r"local rank 0: standby pid (\d+) takes the rank", out)
        assert m, "the standby did not take the rank:\n" + out
        assert int(m.group(1)) == sb, (m.group(1), sb, out)
        # the death was seen as the pipes closed, with its signal
        assert "local rank 0 pid %d: exiting (its pipes closed), exit -1 " \
            "signal 9; reaped later" % w in out, out
        # the new worker is the standby process, started before the kill
        assert sb in lt.children(a.pid), out
        if "workers contained by cgroup v2" in out:
            # in its rank's cgroup, as a forked worker would be
            with open("/proc/%d/cgroup" % sb) as f:
                cg = [l for l in f.read().splitlines() if l.startswith("0::")]
            assert cg and re.search(r"/w0\.\d+$", cg[0]), (cg, out)
        sb2 = hold(a, sb, stopped, not_pid=sb)
        seen.add(sb2)
        os.kill(sb, signal.SIGCONT)
        out = finish(a)
        step = int(re.search(r"resumed from step (\d+)", out).group(1))
        assert 5 <= step < 120, out
        # read into the memory the standby made ready while it waited
        assert re.search(r"resumed from step \d+ of .* read in \d+ ms beside the "
                         r"start-up into the standby's (page-locked )?buffer", out), out
        mine = losses(out)
        # every step after the resume, as without the kill, bit for bit
        after = [s for s in mine if s > step]
        assert after and all(mine[s] == ref_losses[s] for s in after), out
        with open(ref, "rb") as f1, open(got, "rb") as f2:
            assert f1.read() == f2.read(), "final parameters differ"
        gone(seen)
        print("resume (--ckpt-dir of %s): standby pid %d took rank 0 at step %d, "
              "read into its buffer, %d steps after it bitwise the uninterrupted "
              "run; standby %d replaced it; nothing left"
              % (via, sb, step, len(after), sb2))
    finally:
        release(a, stopped)


def test_standby_dies(d):
    a = lt.launch(["--standalone", "--nproc-per-node", "1", "--standby",
                   TRAIN] + MODEL)
    seen = set()
    stopped = []
    try:
        lt.wait_until(lambda: worker_of(a.pid) or not a.running(),
                      60 * MULT, "the worker")
        w = worker_of(a.pid)
        assert w, a.output()
        sb = hold(a, w, stopped)
        seen |= {w, sb}
        os.kill(sb, signal.SIGKILL)
        lt.wait_until(lambda: "standby pid %d was killed by signal 9" % sb in
                      a.output() or not a.running(), 60 * MULT,
                      "the standby's death")
        sb2 = wait_standby(a, not_pid=sb)
        seen.add(sb2)
        os.kill(w, signal.SIGCONT)
        out = finish(a)
        assert "(no worker failed)" in out, out
        assert "exited 0 in round 0" in out, out
        assert "restarting" not in out, out
        gone(seen)
        print("standby dies: pid %d replaced by %d, the job never restarted"
              % (sb, sb2))
    finally:
        release(a, stopped)


NEVER = r"""#!/bin/sh
# a program that does not know the standby protocol: as a standby it
# never says ready; as a worker, round 0 fails once told, round 1 succeeds
if [ -n "${LAUNCH_STANDBY_FD:-}" ]; then
  exec sleep 600
fi
if [ "${LAUNCH_ROUND:-0}" = 0 ]; then
  while [ ! -e "$SB_GO" ]; do sleep 0.05; done
  exit 1
fi
echo "worker of round $LAUNCH_ROUND"
"""


def test_never_ready(d, timeout_arg):
    prog = os.path.join(d, "never.sh")
    with open(prog, "w") as f:
        f.write(NEVER)
    os.chmod(prog, 0o755)
    go = os.path.join(d, "go%d" % len(timeout_arg))
    a = lt.launch(["--standalone", "--nproc-per-node", "1", "--standby",
                   "--max-restarts", "1"] + timeout_arg + [prog],
                  env={"SB_GO": go})
    seen = set()
    try:
        def has_standby():
            return standby_of(a.pid) is not None or not a.running()
        lt.wait_until(has_standby, 60 * MULT, "the standby")
        sb = standby_of(a.pid)
        assert sb, a.output()
        seen.add(sb)
        if timeout_arg:
            lt.wait_until(lambda: "did not say ready within" in a.output(),
                          60 * MULT, "the ready deadline")
            lt.wait_until(lambda: not lt.pid_alive(sb), 60 * MULT,
                          "the standby's end")
        open(go, "w").close()
        out = finish(a)
        assert "worker of round 1" in out, out
        assert "takes the rank" not in out, out
        if timeout_arg:
            assert "--standby needs a program that calls rt_standby_wait()" \
                in out, out
        gone(seen)
        print("never ready%s: the rank was forked at the restart%s" % (
            " (--standby-timeout 1)" if timeout_arg else "",
            ", the standby killed at its deadline" if timeout_arg else ""))
    finally:
        a.kill()


# The standby protocol by hand (rt_standby_wait's): 3 MB of warm-up
# lines, 'R' on the socket, the rank's environment (a 4-byte length, then
# NUL-separated K=V) read back. Round 0 fails once told; round 1 ends.
CHATTY = r'''#!/usr/bin/env python3
import os, struct, sys
fd = os.environ.get("LAUNCH_STANDBY_FD")
if fd:
    fd = int(fd)
    for i in range(WARM_LINES):
        sys.stdout.write("warm-up %05d %s\n" % (i, "x" * 85))
    sys.stdout.flush()
    os.write(fd, b"R")
    n = struct.unpack("=I", os.read(fd, 4))[0]
    blob = b""
    while len(blob) < n:
        blob += os.read(fd, n - len(blob))
    os.environ.clear()
    for kv in blob.split(b"\0"):
        if kv:
            k, v = kv.split(b"=", 1)
            os.environ[k.decode()] = v.decode()
if os.environ.get("LAUNCH_ROUND", "0") == "0":
    import time
    while not os.path.exists(os.environ["SB_GO"]):
        time.sleep(0.05)
    sys.exit(1)
print("round %s: pid %d" % (os.environ["LAUNCH_ROUND"], os.getpid()), flush=True)
'''


# 100-byte lines, three times what launch keeps of a standby's stream
# (WK_SB_HOLD_MAX) and of what a pipe holds (1 MiB at most unprivileged).
WARM_LINES = 30000


def test_chatty_standby(d):
    prog = os.path.join(d, "chatty")
    with open(prog, "w") as f:
        f.write(CHATTY.replace("WARM_LINES", str(WARM_LINES)))
    os.chmod(prog, 0o755)
    go = os.path.join(d, "go-chatty")
    a = lt.launch(["--standalone", "--nproc-per-node", "1", "--standby",
                   "--standby-timeout", "%d" % (60 * MULT), "--max-restarts", "1", prog],
                  env={"SB_GO": go})
    try:
        sb = wait_standby(a)
        open(go, "w").close()
        out = finish(a)
        assert "standby pid %d takes the rank" % sb in out, out
        assert "round 1: pid %d" % sb in out, out
        # the last MiB of the warm-up, in whole lines, reaches the console;
        # what went before is counted in a warning
        kept = out.count("warm-up ")
        last = "warm-up %05d " % (WARM_LINES - 1)
        assert last in out and "warm-up %05d " % (WARM_LINES - kept) in out, \
            out[-2000:]
        m = re.search(r"the first (\d+) bytes its standby printed to stdout "
                      r"before it took the rank are not in the logs", out)
        assert m, out[-3000:]
        assert int(m.group(1)) + 100 * kept == 100 * WARM_LINES, (m.group(1), kept)
        assert 10000 <= kept < WARM_LINES, kept
        print("chatty standby: said ready after %d bytes of output, took the "
              "rank; the last %d lines shown, %s bytes counted as dropped"
              % (100 * WARM_LINES, kept, m.group(1)))
    finally:
        a.kill()


def test_python(d):
    """A Python script never gets a standby (it would run rankless)."""
    prog = os.path.join(d, "hello.py")
    with open(prog, "w") as f:
        f.write("print('worker ran')\n")
    rc, out = lt.launch_wait(["--standalone", "--nproc-per-node", "1",
                              "--standby", prog], timeout=60 * MULT)
    assert rc == 0 and "worker ran" in out, out
    assert "--standby: a Python script cannot be a standby" in out, out
    print("python: no standby, said once")


def main():
    if READ_NR is None:
        lt.skip("no read(2) number known for %s" % os.uname().machine)
    if not os.path.exists(TRAIN):
        lt.skip("no train_gpt in " + BIN)
    d = tempfile.mkdtemp()
    test_resume(d, "launch")
    test_resume(d, "train_gpt")
    test_standby_dies(d)
    test_never_ready(d, [])
    test_never_ready(d, ["--standby-timeout", "1"])
    test_chatty_standby(d)
    test_python(d)
    print("test_standby: ok")


if __name__ == "__main__":
    main()
