"""Helpers for Python tests: start `launch server` by pid, free ports,
skip when a peer is missing (exit 77 = ctest skip)."""
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77

# Every scratch directory of a test (tempfile.mkdtemp() with no dir) and
# every run directory of the agents it starts (TMPDIR) lands in one
# directory of its own, removed when the test exits: a day of test runs
# left about 250 directories in /tmp (issue 27).
# A worker that imports this module (tests/py/real_ckpt.py) keeps its
# test's directory: a directory of its own in each worker, and in each
# process spawned from it that imports __main__ again, made the path of
# multiprocessing's sockets too long for AF_UNIX (108 bytes) under a
# TMPDIR of 20 characters (megatron-core's save).
if os.environ.get("LAUNCH_TEST_SCRATCH") and \
        os.environ.get("TMPDIR") == os.environ["LAUNCH_TEST_SCRATCH"]:
    SCRATCH = os.environ["LAUNCH_TEST_SCRATCH"]
else:
    SCRATCH = tempfile.mkdtemp(prefix="launch-test-")
    os.environ["LAUNCH_TEST_SCRATCH"] = SCRATCH
    atexit.register(shutil.rmtree, SCRATCH, True)
tempfile.tempdir = SCRATCH
os.environ["TMPDIR"] = SCRATCH


def launch_bin():
    return os.environ.get("LAUNCH_BIN", "build/bin/launch")


def skip(why):
    print("SKIP: " + why)
    sys.exit(SKIP)


def need_torch():
    try:
        import torch  # noqa: F401
        import torch.distributed  # noqa: F401
    except Exception as e:  # pragma: no cover - environment dependent
        skip("PyTorch is not importable by %s: %s" % (sys.executable, e))


class Server:
    """`launch server` on 127.0.0.1 with an OS-chosen port, ended by pid."""

    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="launch-pytest-")
        pf = os.path.join(self.dir, "port")
        self.log = open(os.path.join(self.dir, "server.log"), "w+")
        self.proc = subprocess.Popen(
            [launch_bin(), "server", "--host", "127.0.0.1", "--port", "0",
             "--port-file", pf] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            if os.path.exists(pf):
                with open(pf) as f:
                    txt = f.read().strip()
                if txt:
                    self.port = int(txt)
                    return
            if self.proc.poll() is not None:
                raise RuntimeError("launch server exited: " + self.logtext())
            time.sleep(0.01)
        raise RuntimeError("launch server did not start")

    def logtext(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("launch server ignored SIGTERM")
            if rc != 0:
                raise RuntimeError("launch server exited %d: %s" % (rc, self.logtext()))

    def __enter__(self):
        return self

    def __exit__(self, *a):
        try:
            self.stop()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.log.close()
            shutil.rmtree(self.dir, ignore_errors=True)


class Proc:
    """A process started by a test (an agent, a worker helper), ended by pid."""

    def __init__(self, argv, env=None, name="proc", cwd=None):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="launch-%s-" % name)
        self.logpath = os.path.join(self.dir, "out.log")
        self.log = open(self.logpath, "w+")
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=full_env, cwd=cwd)
        self.pid = self.proc.pid

    def output(self):
        self.log.flush()
        with open(self.logpath, errors="replace") as f:
            return f.read()

    def wait(self, timeout=60):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("%s did not finish in %s s:\n%s" % (self.name, timeout, self.output()))

    def signal(self, sig):
        if self.proc.poll() is None:
            os.kill(self.pid, sig)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def running(self):
        return self.proc.poll() is None


def launch(args, env=None, name="agent"):
    """Start `launch ARGS...`."""
    return Proc([launch_bin()] + list(args), env=env, name=name)


def launch_wait(args, env=None, name="agent", timeout=120):
    """Run `launch ARGS...` to its end (killed by pid after timeout s).
    RET (exit status, output)."""
    a = launch(args, env=env, name=name)
    try:
        rc = a.wait(timeout)
        return rc, a.output()
    finally:
        a.kill()


def proc_state(pid):
    """The state letter of pid in /proc/PID/stat ("R", "S", "T", "Z"...),
    None when it is gone. Reaped between the open and the read, the read
    fails with ESRCH (ProcessLookupError): gone as well (test_standby's
    never-ready case met it once in CI)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def children(pid):
    """The live (not zombie) direct children of pid, from /proc/*/stat:
    an agent's workers and its standby processes."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(d))
    return out


def round0_last_call(n, nnodes):
    """last_call_timeout (s) for n agents of --nnodes NNODES started at once
    that must all be in round 0: 15 where they are the job's most nodes
    (the round forms when the last joins, so it costs nothing), else 1.
    With 1 s, an agent slow to start on a loaded machine (CI: 2 cores,
    three tests at once) was left to round 1."""
    return 15 if n == int(nnodes.split(":")[-1]) else 1


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is as good as dead: it holds nothing
    return proc_state(pid) not in (None, "Z")


def gpu_sampler_of(pid):
    """The pid of the `launch gpu-sampler` child of pid (the agent's, or
    launch server's: launcher/sampler.h), from /proc/PID/task/*/children;
    None when it has none."""
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            continue
        for c in kids:
            try:
                with open("/proc/%d/cmdline" % c, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if len(argv) > 1 and argv[1] == b"gpu-sampler":
                return c
    return None


def wait_until(cond, timeout=10, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def wait_match(p, pattern, timeout=30, what="a line"):
    """The first match of pattern in process p's output, waited for; p
    ending first fails, or skips where launch was built without libevent
    (no metrics port to print)."""
    found = []

    def seen():
        out = p.output()
        m = re.search(pattern, out)
        if m:
            found.append(m)
            return True
        if not p.running():
            if "without libevent" in out:
                skip("launch was built without libevent")
            raise AssertionError("%s ended before %s:\n%s" % (p.name, what, out))
        return False
    wait_until(seen, timeout, what)
    return found[0]


# The sockets that hold free_port()'s ports until this test exits.
_RESERVED = []


def free_port():
    """A port of 127.0.0.1 for a server the test starts later (an agent that
    hosts, etcd, Prometheus). It stays bound here, with SO_REUSEADDR and not
    listening, until the test exits: the kernel gives it to no other bind to
    port 0 or connect of any test running beside this one (two tests once
    got the same port and one's agent joined the other's job), while the
    server, binding with SO_REUSEADDR as libuv, Go and PyTorch do, still
    listens on it; a connect to it before then is refused."""
    import socket
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    _RESERVED.append(s)
    return s.getsockname()[1]


class Cleanup:
    """Kill every Proc registered, at the end of a test, by pid."""

    def __init__(self):
        self.procs = []

    def add(self, p):
        self.procs.append(p)
        return p

    def __enter__(self):
        return self

    def __exit__(self, *a):
        for p in self.procs:
            p.kill()


def records(d, gen=None):
    """What tests/py/worker.py recorded in d: one dict per worker (its env,
    argv, pid), optionally only those of generation gen (LAUNCH_ROUND: every
    restart counts, membership changes too)."""
    import glob
    import json
    out = []
    for p in sorted(glob.glob(os.path.join(d, "w.*.json"))):
        with open(p) as f:
            r = json.load(f)
        if gen is None or r["env"].get("LAUNCH_ROUND",
                                       r["env"]["TORCHELASTIC_RESTART_COUNT"]) == str(gen):
            out.append(r)
    return out


def tree_hash(root):
    """{relative path: what it is} for everything under root: a file's
    SHA-256, a symlink's target, "dir". Two calls compare equal when nothing
    was written, renamed or deleted in between."""
    import hashlib
    out = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(base, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = "link " + os.readlink(p)
            elif os.path.isdir(p):
                out[rel] = "dir"
            else:
                with open(p, "rb") as f:
                    out[rel] = "file " + hashlib.sha256(f.read()).hexdigest()
    return out


def tree_diff(before, after):
    """The paths added, removed or changed between two tree_hash results."""
    return sorted(set(before) ^ set(after)) + sorted(
        k for k in set(before) & set(after) if before[k] != after[k])
