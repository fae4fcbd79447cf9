"""One node, --standalone: the worker environment (torchrun's contract and
launch's variables), argv passed unchanged, .py under PYTHON_EXEC, exit
codes, restarts counted for the job, the failure summary, log files per
attempt and rank, --tee/--redirects/--local-ranks-filter and line prefixes,
signals and orphans, and `launch status`."""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "py", "worker.py")
PY = sys.executable


records = lt.records


def run(args, timeout=120, env=None):
    p = lt.launch(args, env=env)
    try:
        rc = p.wait(timeout)
    finally:
        p.kill()
    return rc, p.output()


def test_contract():
    d = tempfile.mkdtemp()
    e = dict(os.environ)
    e.pop("OMP_NUM_THREADS", None)
    e["PYTHON_EXEC"] = PY
    p = subprocess.run([lt.launch_bin(), "--standalone", "--nproc-per-node", "4",
                        "--max-restarts", "2", "--role", "trainer", WORKER, d, "ok",
                        "a b", "", "--lr=3e-4"],
                       capture_output=True, text=True, env=e, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OMP_NUM_THREADS=1" in p.stderr, p.stderr
    recs = records(d)
    assert len(recs) == 4, recs
    ranks = sorted(int(r["env"]["RANK"]) for r in recs)
    assert ranks == [0, 1, 2, 3]
    run_ids = set()
    for r in recs:
        env = r["env"]
        rank = int(env["RANK"])
        assert env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == "4" and env["LOCAL_WORLD_SIZE"] == "4"
        assert env["GROUP_RANK"] == "0" and env["GROUP_WORLD_SIZE"] == "1"
        assert env["ROLE_RANK"] == str(rank) and env["ROLE_WORLD_SIZE"] == "4"
        assert env["ROLE_NAME"] == "trainer"
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert env["TORCHELASTIC_MAX_RESTARTS"] == "2"
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["MASTER_PORT"].isdigit()
        assert env["TORCHELASTIC_ERROR_FILE"].endswith("/attempt_0/%d/error.json" % rank)
        # the name the worker's PyTorch reads (test_torchrun_compat.py checks
        # each version): exactly one of the two
        assert [env.get(k) for k in ("NCCL_ASYNC_ERROR_HANDLING",
                                     "TORCH_NCCL_ASYNC_ERROR_HANDLING")].count("1") == 1, env
        assert env["OMP_NUM_THREADS"] == "1"
        assert env["NCCL_NVLS_ENABLE"] == "0"
        assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert env["NVSHMEM_DISABLE_NVLS"] == "1"
        assert env["LAUNCH_RDZV_ENDPOINT"] == "127.0.0.1:" + env["MASTER_PORT"]
        assert env["LAUNCH_RDZV_ID"] == env["TORCHELASTIC_RUN_ID"]
        run_ids.add(env["TORCHELASTIC_RUN_ID"])
        # argv unchanged, no --local-rank appended, run under PYTHON_EXEC -u
        assert r["argv"][1:] == [d, "ok", "a b", "", "--lr=3e-4"], r["argv"]
        # the agent's own environment is passed through
        assert env.get("PATH") == os.environ.get("PATH")
    assert len(run_ids) == 1 and len(run_ids.pop()) == 36  # a uuid


def test_exit_codes_and_restarts():
    d = tempfile.mkdtemp()
    # fails only in generation 0: succeeds after one restart, seen by all
    rc, out = run(["--standalone", "--nproc-per-node", "3", "--max-restarts", "1",
                   "--no-python", PY, WORKER, d, "fail-first", "5"])
    assert rc == 0, out
    gens = sorted(r["env"]["TORCHELASTIC_RESTART_COUNT"] for r in records(d))
    assert gens.count("1") == 3, gens
    # always fails: restarts run out, the exit code is the worker's
    d = tempfile.mkdtemp()
    t0 = time.time()
    rc, out = run(["--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
                   "--no-python", PY, WORKER, d, "fail", "7"])
    assert rc == 7, (rc, out)
    # 3 generations (the others may be stopped before they record anything)
    assert {r["env"]["TORCHELASTIC_RESTART_COUNT"] for r in records(d)} == {"0", "1", "2"}
    assert "Root cause" in out and "exit code" in out, out
    assert "failing on purpose with 7" in out, out  # the stderr tail
    # killed by a signal: 128 + signal, named
    rc, out = run(["--standalone", "--nproc-per-node", "1", "--no-python", "sh", "-c",
                   "kill -SEGV $$"])
    assert rc == 128 + signal.SIGSEGV, (rc, out)
    assert "SIGSEGV" in out, out
    # a program that cannot be executed
    rc, out = run(["--standalone", "--no-python", "/nonexistent/prog"])
    assert rc == 127, (rc, out)
    assert "/nonexistent/prog" in out, out


def test_limits_and_launch_failures():
    """The job's `ulimit -n` reaches the workers, as under torchrun: the
    agent raises its own soft limit (its server's connections), not
    theirs. launch's own failure (its log directory cannot be made) is
    exit 70 (docs/exit-codes.md), not a worker's 1."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > 1000:
        p = lt.Proc(["/bin/sh", "-c", 'ulimit -S -n 1000 && exec "$0" "$@"',
                     lt.launch_bin(), "--standalone", "--nproc-per-node", "2",
                     "--no-python", "/bin/sh", "-c", 'echo "soft $(ulimit -Sn)"'])
        try:
            assert p.wait(60) == 0, p.output()
        finally:
            p.kill()
        assert p.output().count("soft 1000") == 2, p.output()
    # a file-size limit (ulimit -f, as some clusters set) that a worker's
    # log passes: the agent loses the rest of that log, not the job (it
    # died of SIGXFSZ; torchrun's Python ignores it too), and the workers
    # get the signal's default back
    logdir = tempfile.mkdtemp()
    p = lt.Proc(["/bin/sh", "-c", 'ulimit -f 128 && exec "$0" "$@"',
                 lt.launch_bin(), "--standalone", "--log-dir", logdir,
                 "--redirects", "1", "--no-python", "/bin/sh", "-c",
                 "head -c 300000 /dev/zero | tr '\\0' x; echo; "
                 "echo sigign $(grep ^SigIgn: /proc/self/status | cut -f2) >&2"])
    try:
        rc = p.wait(60)
    finally:
        p.kill()
    out = p.output()
    assert rc == 0, (rc, out[-2000:])
    assert "File too large" in out and "not saved" in out, out[-2000:]
    assert "sigign 0000000000000000" in out, out[-2000:]
    (log,) = glob.glob(os.path.join(logdir, "*", "attempt_0", "0", "stdout.log"))
    assert 0 < os.path.getsize(log) <= 128 * 1024, os.path.getsize(log)
    d = tempfile.mkdtemp()
    blocker = os.path.join(d, "a-file")
    open(blocker, "w").close()
    rc, out = run(["--standalone", "--log-dir", os.path.join(blocker, "logs"),
                   "--no-python", "/bin/true"])
    assert rc == 70, (rc, out)
    assert "cannot create" in out and "a-file" in out, out


def test_logs():
    d = tempfile.mkdtemp()
    logdir = tempfile.mkdtemp()
    rc, out = run(["--standalone", "--nproc-per-node", "3", "--log-dir", logdir,
                   "--tee", "0:3,1:1", "--redirects", "2:3", "--local-ranks-filter", "0,2",
                   "--log-line-prefix", "<${role_name}${local_rank}|${rank}> ",
                   "--no-python", PY, WORKER, d, "chatty", "5"])
    assert rc == 0, out
    # rank 0: teed, on the console with its prefix; rank 1 filtered out of
    # the console; rank 2 redirected to files only.
    assert "<default0|0> out 0 line 4" in out, out
    assert "<default0|0> err 0 line 4" in out, out
    assert "out 1 line" not in out and "err 1 line" not in out, out
    assert "out 2 line" not in out, out
    runs = glob.glob(os.path.join(logdir, "*", "attempt_0"))
    assert len(runs) == 1, runs
    a0 = runs[0]
    def read(p):
        with open(os.path.join(a0, p)) as f:
            return f.read()
    assert read("0/stdout.log").count("out 0 line") == 5
    assert read("0/stderr.log").count("err 0 line") == 5
    assert read("1/stdout.log").count("out 1 line") == 5
    assert not os.path.exists(os.path.join(a0, "1/stderr.log")) or read("1/stderr.log") == ""
    assert read("2/stdout.log").count("out 2 line") == 5
    assert read("2/stderr.log").count("err 2 line") == 5
    # default prefix: [host:rank]
    d = tempfile.mkdtemp()
    rc, out = run(["--standalone", "--nproc-per-node", "2", "--no-python", PY, WORKER,
                   d, "chatty", "2"], env={"LAUNCH_HOSTNAME": "nodeX"})
    assert rc == 0 and "[nodeX:1]: out 1 line 1" in out, out
    # every line starts with a prefix: no partial lines interleaved
    for line in out.splitlines():
        if "line" in line and ("out " in line or "err " in line):
            assert line.startswith("[nodeX:"), line


def test_error_file_summary():
    script = os.path.join(tempfile.mkdtemp(), "boom.py")
    with open(script, "w") as f:
        f.write('import json, os, sys\n'
                'json.dump({"message": {"message": "ValueError: bad batch 42",'
                ' "extraInfo": {"py_callstack": "Traceback: boom", "timestamp": "1"}}},'
                ' open(os.environ["TORCHELASTIC_ERROR_FILE"], "w"))\n'
                'sys.exit(3)\n')
    rc, out = run(["--standalone", "--nproc-per-node", "1", script],
                  env={"PYTHON_EXEC": PY})
    assert rc == 3, (rc, out)
    assert "ValueError: bad batch 42" in out, out


def test_signals_and_orphans():
    # SIGTERM to launch: forwarded, no worker left, exit 128+15
    d = tempfile.mkdtemp()
    a = lt.launch(["--standalone", "--nproc-per-node", "2", "--stop-timeout", "2",
                   "--no-python", PY, WORKER, d, "forever"])
    try:
        lt.wait_until(lambda: len(records(d)) == 2, 60, "workers")
        pids = [r["pid"] for r in records(d)]
        a.signal(signal.SIGTERM)
        assert a.wait(30) == 128 + signal.SIGTERM, a.output()
        lt.wait_until(lambda: not any(lt.pid_alive(p) for p in pids), 10, "workers gone")
    finally:
        a.kill()
    # SIGKILL to launch: the workers and their children die too
    d = tempfile.mkdtemp()
    a = lt.launch(["--standalone", "--nproc-per-node", "2", "--no-python", PY, WORKER,
                   d, "spawn-child"])
    try:
        lt.wait_until(lambda: len(glob.glob(os.path.join(d, "child.*"))) == 2, 60, "workers")
        pids = [r["pid"] for r in records(d)]
        a.signal(signal.SIGKILL)
        a.wait(10)
        lt.wait_until(lambda: not any(lt.pid_alive(p) for p in pids), 10,
                      "workers of a SIGKILLed agent gone")
    finally:
        a.kill()
        for p in glob.glob(os.path.join(d, "child.*")):
            with open(p) as f:
                cp = int(f.read())
            if lt.pid_alive(cp):
                os.kill(cp, signal.SIGKILL)
    # Ctrl-C: the first SIGINT reaches the workers as SIGINT
    d = tempfile.mkdtemp()
    a = lt.launch(["--standalone", "--nproc-per-node", "2", "--no-python", PY, WORKER,
                   d, "trap-int"])
    try:
        lt.wait_until(lambda: len(records(d)) == 2, 60, "workers")
        a.signal(signal.SIGINT)
        assert a.wait(30) == 128 + signal.SIGINT, a.output()
        assert len(glob.glob(os.path.join(d, "sigint.*"))) == 2
    finally:
        a.kill()
    # a second SIGINT kills workers that ignore the first
    d = tempfile.mkdtemp()
    a = lt.launch(["--standalone", "--nproc-per-node", "1", "--stop-timeout", "60",
                   "--no-python", PY, WORKER, d, "ignore-term"])
    try:
        lt.wait_until(lambda: os.path.exists(os.path.join(d, "ready.0")), 60, "worker")
        pid = records(d)[0]["pid"]
        a.signal(signal.SIGINT)
        time.sleep(0.5)
        assert lt.pid_alive(pid)
        a.signal(signal.SIGINT)
        assert a.wait(20) == 128 + signal.SIGINT, a.output()
        lt.wait_until(lambda: not lt.pid_alive(pid), 10, "worker killed")
    finally:
        a.kill()
    # SIGUSR1 is forwarded without ending the job
    d = tempfile.mkdtemp()
    script = os.path.join(d, "usr1.py")
    with open(script, "w") as f:
        f.write("import signal, sys, time, os\n"
                "signal.signal(signal.SIGUSR1, lambda s, fr: sys.exit(0))\n"
                "open(os.path.join(%r, 'ready'), 'w').close()\n"
                "time.sleep(60)\nsys.exit(9)\n" % d)
    a = lt.launch(["--standalone", "--signals-to-handle", "SIGTERM,SIGINT,SIGUSR1",
                   "--no-python", PY, script])
    try:
        lt.wait_until(lambda: os.path.exists(os.path.join(d, "ready")), 60, "worker")
        a.signal(signal.SIGUSR1)
        assert a.wait(30) == 0, a.output()
    finally:
        a.kill()


def main():
    test_contract()
    test_exit_codes_and_restarts()
    test_limits_and_launch_failures()
    test_logs()
    test_error_file_summary()
    test_signals_and_orphans()
    print("test_agent_single: ok")


if __name__ == "__main__":
    main()
