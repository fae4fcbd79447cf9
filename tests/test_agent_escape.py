"""The agent's supervision gaps of issue #11, through `launch` itself:

- a worker's process that leaves its process group (a setsid child, or a
  daemon: fork, setsid, fork) dies with the job: after kill -9 of the
  agent, after its SIGTERM, and after the worker's normal exit ends the
  job (launch on main left it running in all six cases), and after kill -9
  of an agent stopped right after its fork, before it said more to its
  guardian (with cgroups);
- a program that does not exist or is not executable fails at once with
  one line and no restart, exit 127 / 126 (main retried it
  --max-restarts times, one message per worker and attempt).

Every sleeper a case leaves behind is SIGKILLed by pid at the end."""
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
LEFT = []  # sleepers still alive when a case failed: ended at exit
DIRS = []  # made with mkdtemp, removed at exit


def wk_child():
    b = os.environ.get("LAUNCH_BUILD_DIR", "build")
    p = os.path.join(b, "tests", "wk_child")
    if not os.access(p, os.X_OK):
        raise RuntimeError("helper %s is not built" % p)
    return p


def gone(pid, seconds):
    """Dead within `seconds`: no such process or a zombie (reaped here
    when it came to this process, a subreaper)."""
    deadline = time.time() + seconds
    while True:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        if lt.proc_state(pid) in (None, "Z", "X"):
            return True
        if time.time() >= deadline:
            return False
        time.sleep(0.005)


def read_pid(path, seconds=10):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with open(path) as f:
                txt = f.read().strip()
            if txt:
                return int(txt)
        except FileNotFoundError:
            pass
        time.sleep(0.005)
    return None


def end_case(p, sleeper):
    """The agent ended by pid; a sleeper still alive is ended at exit."""
    if p.poll() is None:
        p.kill()
        p.wait()
    if sleeper and not gone(sleeper, 0):
        LEFT.append(sleeper)


def escape_case(how, end):
    d = tempfile.mkdtemp(prefix="launch-escape-")
    DIRS.append(d)
    pidfile = os.path.join(d, "sleeper")
    out = open(os.path.join(d, "out"), "w+")
    then = "exit" if end == "exit" else "wait"
    p = subprocess.Popen([lt.launch_bin(), "--standalone", "--nproc-per-node", "1",
                          "--no-python", wk_child(), "escape", how, pidfile, then],
                         stdout=out, stderr=subprocess.STDOUT)
    sleeper = None
    try:
        sleeper = read_pid(pidfile)
        assert sleeper, "the worker did not start its sleeper"
        out.flush()
        with open(out.name) as f:
            text = f.read()
        if end == "kill9":
            if "contained by subreaper" in text:
                # The /proc scan runs once a second: give it that.
                time.sleep(1.6)
            p.send_signal(signal.SIGKILL)
            p.wait(10)
        elif end == "term":
            p.send_signal(signal.SIGTERM)
            rc = p.wait(10)
            assert rc == 128 + signal.SIGTERM, rc
        else:
            rc = p.wait(30)
            assert rc == 0, rc
        if not gone(sleeper, 3):
            out.flush()
            with open(out.name) as f:
                raise AssertionError("%s escape, %s: sleeper %d outlived the job\n%s" %
                                     (how, end, sleeper, f.read()))
        print("%-6s escape, %-5s: the sleeper is gone" % (how, end))
    finally:
        end_case(p, sleeper)
        out.close()


def killed_right_after_fork():
    """kill -9 of an agent stopped right after it forked the worker
    (LAUNCH_TEST_STOP_AFTER_FORK), before it said anything more to its
    guardian: with cgroups the worker's setsid child dies all the same (the
    guardian knew the cgroup before the fork). Under the subreaper that
    window is documented as open (the agent says so at start): skipped."""
    d = tempfile.mkdtemp(prefix="launch-escape-")
    DIRS.append(d)
    pidfile = os.path.join(d, "sleeper")
    env = dict(os.environ, LAUNCH_TEST_STOP_AFTER_FORK="1")
    p = subprocess.Popen([lt.launch_bin(), "--standalone", "--nproc-per-node", "1",
                          "--no-python", wk_child(), "escape", "setsid", pidfile, "wait"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    sleeper = None
    try:
        sleeper = read_pid(pidfile)
        assert sleeper, "the worker did not start its sleeper"
        deadline = time.time() + 10
        while lt.proc_state(p.pid) != "T" and time.time() < deadline:
            time.sleep(0.005)
        assert lt.proc_state(p.pid) == "T", "the agent did not stop after the fork"
        with open("/proc/%d/cgroup" % sleeper) as f:
            cg = f.read()
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        if "/w0." not in cg:
            print("killed right after the fork: subreaper, not cgroups: skipped")
            return
        if not gone(sleeper, 3):
            raise AssertionError("killed right after the fork: sleeper %d in %s "
                                 "outlived the agent" % (sleeper, cg.strip()))
        print("killed right after the fork: the sleeper is gone (cgroup)")
    finally:
        end_case(p, sleeper)


def exec_failure_cases():
    d = tempfile.mkdtemp(prefix="launch-exec-")
    DIRS.append(d)
    noexec = os.path.join(d, "not-executable")
    with open(noexec, "w") as f:
        f.write("echo hi\n")
    os.chmod(noexec, 0o644)
    for prog, want in (("/nonexistent/prog", 127), (noexec, 126)):
        p = subprocess.run([lt.launch_bin(), "--standalone", "--nproc-per-node", "2",
                            "--max-restarts", "3", "--no-python", prog],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        lines = [ln for ln in p.stdout.splitlines() if prog in ln]
        assert p.returncode == want, (p.returncode, p.stdout)
        assert len(lines) == 1, p.stdout
        assert "cannot execute" in lines[0] and "not restarting" in lines[0], p.stdout
        assert "restarting the workers" not in p.stdout, p.stdout
        print("%s: exit %d, one line: %s" % (prog, p.returncode, lines[0]))


def main():
    libc = ctypes.CDLL(None, use_errno=True)
    # Orphans come here once the agent is gone, so that their death can be
    # seen (and they are reaped).
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        only = os.environ.get("ESCAPE_ONLY")
        for how in ("setsid", "daemon"):
            for end in ("kill9", "term", "exit"):
                escape_case(how, end)
        killed_right_after_fork()
        exec_failure_cases()
    finally:
        for pid in LEFT:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for d in DIRS:
            shutil.rmtree(d, ignore_errors=True)
    print("test_agent_escape: ok")


if __name__ == "__main__":
    main()
