"""What a torchrun user relies on (issue 13), each checked on loopback:

- argparse's unique-prefix options; --exit-code torchrun (1 for any failure);
- never waiting in silence for a server nobody hosts: a status line within
  seconds, read_timeout bounding the wait, one clean message, exit 75;
- `launch status` of an unknown job exits 1;
- the user's debug variables win over the profile (and the lint warns); a
  job without GPUs is not refused for NCCL settings; --report-bindings
  leaves the workers' environment alone;
- the async error handling variable named as the workers' PyTorch reads it
  (Debian's 1.13, a site-packages tree claiming 2.11, a pyenv shim,
  --torch-version);
- ${local_rank} in the program's arguments; '\\r' progress lines passed
  through with the prefix at once;
- a node joining (scale-up) spends no restart: TORCHELASTIC_RESTART_COUNT
  stays 0, LAUNCH_ROUND counts the generation;
- a healthy run prints its workers' output, one start and one end line; the
  messages are plain English (no document sections, ASCII);
- launch doctor: CUDA without a driver is no PASS, huge pages are not
  recommended, and `launch env --fingerprint` finds the libraries it does.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

L = lt.launch_bin()
PY = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")
DUMP = """import json, os, sys
out = sys.argv[1]
rank = os.environ["RANK"]
with open(os.path.join(out, "env.%s.%s.json" % (rank, os.environ["LAUNCH_ROUND"])), "w") as f:
    json.dump({"env": dict(os.environ), "argv": sys.argv}, f)
"""


SCRATCH = None  # every directory a test makes is under it (main removes it)


def scratch():
    return tempfile.mkdtemp(dir=SCRATCH)


def env(extra=None, drop=()):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("PET_", "NCCL_", "LAUNCH_", "TORCHELASTIC_", "TORCH_",
                              "SLURM_", "OMPI_"))}
    e["PYTHON_EXEC"] = PY
    if SCRATCH:  # the agents' run directories (/tmp/launch_<id>) go here
        e["TMPDIR"] = os.path.join(SCRATCH, "runs")
    for k in drop:
        e.pop(k, None)
    e.update(extra or {})
    return e


def run(args, extra=None, timeout=60, drop=()):
    p = subprocess.run([L] + args, capture_output=True, text=True, env=env(extra, drop),
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def script(name, text, d=None):
    """text as file name in d (default: a fresh directory); its path."""
    d = d or scratch()
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def dumps(d):
    out = []
    for n in sorted(os.listdir(d)):
        if n.startswith("env.") and n.endswith(".json"):
            with open(os.path.join(d, n)) as f:
                out.append(json.load(f))
    return out


def dump_run(args, prog=None, extra=None, nproc=1):
    """Run the env dump under launch --standalone; the workers' records."""
    path = script("dump.py", DUMP)
    d = os.path.dirname(path)
    cmd = ["--standalone", "--nproc-per-node", str(nproc)] + args + \
        (prog if prog else [path]) + [d]
    rc, out, err = run(cmd, extra)
    assert rc == 0, (cmd, out, err)
    recs = dumps(d)
    assert len(recs) == nproc, (recs, err)
    return recs, out, err


def test_options():
    # "--nproc" is --nproc-per-node (argparse), "--n" could be several
    recs, _, _ = dump_run(["--nproc", "2"], nproc=2)
    assert {r["env"]["LOCAL_WORLD_SIZE"] for r in recs} == {"2"}
    rc, _, err = run(["--n", "2", "/bin/true"])
    assert rc == 2 and "ambiguous" in err and "--nnodes" in err and "--nproc-per-node" in err, err
    # a short option's value attached, as argparse takes it: -r3 -t3
    rc, out, err = run(["--standalone", "-r3", "-t3", "--no-python", "/bin/sh", "-c",
                        "echo to-out; echo to-err >&2"])
    assert rc == 0 and "to-out" in out + err and "to-err" in out + err, (rc, out, err)
    rc, _, err = run(["--standalone", "-r9", "/bin/true"])
    assert rc == 2 and "--redirects" in err, (rc, err)
    # --start-method is in --help
    rc, out, _ = run(["--help"])
    assert rc == 0 and "--start-method" in out and "--exit-code" in out and "--torch-version" in out


def test_suggestions():
    """A misspelt subcommand or option suggests the one meant, as git and
    argparse do (issue 27): `launch statu` ran 'statu' as a program (exit
    127)."""
    rc, _, err = run(["statu"])
    assert rc == 2 and "did you mean `launch status`" in err, (rc, err)
    rc, out, _ = run(["help"])
    assert rc == 0 and "usage: launch" in out and "ckpt" in out.splitlines()[1], out
    rc, out, _ = run(["help", "status"])
    assert rc == 0 and "usage: launch status" in out, out
    rc, _, err = run(["--nprocs-per-node", "2", "/bin/true"])
    assert rc == 2 and "did you mean --nproc-per-node?" in err, err
    # doctor --timeout is in seconds, as status --timeout (it was ms)
    rc, _, err = run(["doctor", "--timeout", "3000", "--no-probe"])
    assert rc == 2 and "write 3 or 3000ms" in err, (rc, err)
    rc, out, err = run(["doctor", "--timeout", "2", "--no-probe", "--compact"])
    assert rc == 0, (rc, out, err)
    # a program of that name still runs
    d = scratch()
    prog = os.path.join(d, "statu")
    with open(prog, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(prog, 0o755)
    rc, _, err = run(["statu"], {"PATH": d + ":" + os.environ["PATH"], "PET_STANDALONE": "1"})
    shutil.rmtree(d)
    assert rc == 0, err


def test_torchrun_settings():
    """torchrun settings run unchanged (issue 27): --monitor-interval (both
    spellings, PET_MONITOR_INTERVAL) and the c10d and static backends'
    --rdzv-conf keys, with one note for each that has no effect here."""
    for args, extra in ((["--monitor-interval", "5"], None),
                        (["--monitor_interval", "0.1"], None),
                        ([], {"PET_MONITOR_INTERVAL": "5"}),
                        (["--rdzv-conf", "timeout=900,heartbeat_timeout=30,"
                          "keep_alive_max_attempt=3"], None)):
        rc, _, err = run(["--no-log-time", "--standalone"] + args + ["/bin/true"], extra)
        assert rc == 0, (args, extra, rc, err)
        notes = [ln for ln in err.splitlines() if "note:" in ln]
        # with c10d (--standalone), timeout is the static wait: a note too
        want = 2 if "--rdzv-conf" in args else 1
        assert len(notes) == want and all("no effect" in n for n in notes), (args, err)
        assert "etcd" not in err, err
    # rank=N is the static node rank, as torchrun passes --node-rank
    port = lt.free_port()
    rc, _, err = run(["--no-log-time", "--nnodes", "2", "--master-port", str(port),
                      "--rdzv-conf", "rank=1,timeout=2", "/bin/true"], timeout=60)
    assert rc == 75 and "after 2 s (--rdzv-conf timeout)" in err, (rc, err)


def test_static_node_waits():
    """--node-rank 1 started before node 0 waits 900 s for it, as torchrun
    does (the runbooks start their nodes by hand), and says so."""
    port = lt.free_port()
    p = subprocess.Popen([L, "--no-log-time", "--nnodes", "2", "--node-rank", "1",
                          "--master-addr", "127.0.0.1", "--master-port", str(port),
                          "/bin/true"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    line = ""
    try:
        for line in p.stderr:
            if "waiting for the rendezvous server" in line:
                break
    finally:
        p.terminate()  # SIGTERM: the agent removes its run directory
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        p.stderr.close()
        p.stdout.close()
    assert "giving up after 900 s (--rdzv-conf timeout)" in line, line


def test_long_run_id():
    """The longest run id --rdzv-id takes (255 characters) runs: the
    workers' log folder, named after it, must still fit a file name."""
    rid = "r" * 255
    w = script("w.sh", "#!/bin/sh\n%s status --json\n" % L)
    os.chmod(w, 0o755)
    rc, out, err = run(["--no-log-time", "--nnodes", "1", "--nproc-per-node", "1",
                        "--rdzv-id", rid, "--rdzv-endpoint", "127.0.0.1:%d" % lt.free_port(),
                        w])
    assert rc == 0, err
    # and `launch status` lists it, by its whole id
    assert '"job":"%s"' % rid in out.replace(" ", ""), out
    rc, _, err = run(["--no-log-time", "--rdzv-id", "r" * 256, "/bin/true"])
    assert rc == 2 and "--rdzv-id" in err, (rc, err)


def test_exit_codes():
    rc, _, _ = run(["--standalone", "/bin/sh", "-c", "exit 3"])
    assert rc == 3, rc
    rc, _, _ = run(["--standalone", "--exit-code", "torchrun", "/bin/sh", "-c", "exit 3"])
    assert rc == 1, rc
    rc, _, _ = run(["--standalone", "--exit-code", "torchrun", "/bin/true"])
    assert rc == 0, rc
    # a program that cannot be executed: 127, or torchrun's 1
    rc, _, _ = run(["--standalone", "/no/such/program"])
    assert rc == 127, rc
    rc, _, _ = run(["--standalone", "--exit-code=torchrun", "/no/such/program"])
    assert rc == 1, rc


def test_repeating_failures():
    """A failure that would repeat is not retried (issue 27): an exit code of
    --no-restart-exit-codes (train_gpt's divergence, 3, by default) ends the
    job at once; a missing Python script is not started --max-restarts
    times."""
    d = scratch()
    count = os.path.join(d, "count")
    prog = ["/bin/sh", "-c", "echo x >> %s; exit $0" % count]
    for args, code, runs in (([], "3", 1), (["--no-restart-exit-codes", "none"], "3", 3),
                             (["--no-restart-exit-codes", "5,7-9"], "8", 1),
                             ([], "4", 3)):
        if os.path.exists(count):
            os.unlink(count)
        rc, _, err = run(["--no-log-time", "--standalone", "--max-restarts", "2"] + args +
                         prog + [code])
        with open(count) as f:
            n = len(f.read().split())
        assert rc == int(code) and n == runs, (args, code, rc, n, err)
        if runs == 1:
            assert "--no-restart-exit-codes" in err and "not restarting" in err, err
    rc, _, err = run(["--no-log-time", "--standalone", "--max-restarts", "3",
                      os.path.join(d, "missing.py")])
    assert rc == 127 and "cannot open the Python script" in err, (rc, err)
    assert "restart" not in err.replace("not restarting", ""), err
    shutil.rmtree(d)


def test_idle_store_client():
    """A PyTorch 1.13 trainer that connects to the agent's store, then loads
    data for longer than the server's handshake timeout before its first
    request (a 1.13 client sends nothing until then): its store still
    answers (it died with 'Broken pipe')."""
    path = script("idle.py", """import datetime, os, time
import torch.distributed as dist
s = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                  is_master=False, timeout=datetime.timedelta(seconds=30))
time.sleep(2.5)  # loading data
s.set("after-idle-%s" % os.environ["RANK"], "1")
assert s.get("after-idle-%s" % os.environ["RANK"]) == b"1"
print("rank %s: store answered after idling" % os.environ["RANK"], flush=True)
""")
    rc, out, err = run(["--no-log-time", "--standalone", "--nproc-per-node", "2", path],
                       {"LAUNCH_HANDSHAKE_TIMEOUT": "1"}, timeout=120)
    assert rc == 0, (rc, out, err)
    assert out.count("store answered after idling") == 2, (out, err)
    assert "handshake" not in err, err


def test_lost_steps():
    """Without --ckpt-dir a restart starts at step 1 again: launch says how
    many steps rank 0 had reached (its progress key), i.e. were lost."""
    d = scratch()
    path = script("lost.py", """import datetime, os, sys, time
import torch.distributed as dist
marker = os.path.join(os.path.dirname(sys.argv[0]), "once")
if not os.path.exists(marker):
    open(marker, "w").close()
    s = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                      is_master=False, timeout=datetime.timedelta(seconds=30))
    s.set("launch/progress/0", "40 %d" % int(time.time() * 1000))
    sys.exit(1)
""", d)
    rc, _, err = run(["--no-log-time", "--standalone", "--max-restarts", "1", path],
                     timeout=120)
    # a fresh start with --ckpt-dir says so, not "agreement on step -1"
    rc2, _, err2 = run(["--no-log-time", "--standalone", "--ckpt-dir",
                        os.path.join(d, "ck"), "/bin/true"])
    shutil.rmtree(d)
    assert rc2 == 0 and "step -1" not in err2 and "start fresh" in err2, err2
    assert rc == 0, (rc, err)
    lost = [ln for ln in err.splitlines() if "steps rank 0 had reached are lost" in ln]
    assert len(lost) == 1 and "40 steps" in lost[0] and "--ckpt-dir" in lost[0], err


def test_failure_summary():
    """A failure summary points only where there is something (issue 27): no
    run directory line (and no directory left in TMPDIR) when nothing was
    written there, and the Python @record hint only for Python workers."""
    d = scratch()
    rc, _, err = run(["--no-log-time", "--standalone", "/bin/sh", "-c", "exit 4"],
                     {"TMPDIR": d})
    assert rc == 4 and "Root cause" in err, err
    assert "@record" not in err and "logs and error files" not in err, err
    assert os.listdir(d) == [], os.listdir(d)
    path = script("fail.py", "import sys\nsys.exit(5)\n", d)
    rc, _, err = run(["--no-log-time", "--standalone", path], {"TMPDIR": d})
    assert rc == 5 and "@record" in err, err
    assert os.listdir(d) == ["fail.py"], os.listdir(d)
    # old run directories do not pile up: a week old and no live agent's
    # (its lock not held) goes; a live agent's, a fresh one, others stay
    import fcntl
    # an empty one of a killed agent (nothing in it, its lock not held)
    # goes once it is a minute old; one that holds a log stays
    for name in ("launch_old_aaaaaa", "launch_live_bbbbbb", "launch_new_cccccc", "mine",
                 "launch_dead_dddddd", "launch_kept_eeeeee"):
        os.makedirs(os.path.join(d, name, "attempt_0"))
    with open(os.path.join(d, "launch_kept_eeeeee", "attempt_0", "stderr.log"), "w") as f:
        f.write("Traceback\n")
    week, minutes = time.time() - 8 * 86400, time.time() - 300
    for name in ("launch_old_aaaaaa", "launch_live_bbbbbb", "mine"):
        os.utime(os.path.join(d, name), (week, week))
    for name in ("launch_dead_dddddd", "launch_kept_eeeeee"):
        os.utime(os.path.join(d, name), (minutes, minutes))
    with open(os.path.join(d, "launch_live_bbbbbb", ".agent.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rc, _, err = run(["--no-log-time", "--standalone", "/bin/true"], {"TMPDIR": d})
    assert rc == 0 and "removed 1 run directory of failed jobs older than 7 days" in err, err
    assert "removed 1 empty run directory of agents that are gone" in err, err
    assert sorted(os.listdir(d)) == ["fail.py", "launch_kept_eeeeee", "launch_live_bbbbbb",
                                     "launch_new_cccccc", "mine"], os.listdir(d)
    shutil.rmtree(d)


def test_rdzv_timeout_once():
    """A rendezvous that times out is said once, as the agent's error (the
    server it hosts said it too, as a warning)."""
    port = lt.free_port()
    rc, _, err = run(["--no-log-time", "--nnodes", "2", "--rdzv-endpoint",
                      "127.0.0.1:%d" % port, "--rdzv-conf", "join_timeout=2", "/bin/true"])
    assert rc == 75, (rc, err)
    said = [ln for ln in err.splitlines() if "rendezvous timed out" in ln]
    assert len(said) == 1 and " error: " in said[0], err


def test_mismatch_named_on_node0():
    """Two nodes with the same host name, one with another NCCL setting: the
    diff tells them apart by address, and node 0's rendezvous timeout names
    the refused node (it was waiting without saying whom for)."""
    port = lt.free_port()
    common = ["--no-log-time", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:%d" % port,
              "/bin/true"]
    n0 = subprocess.Popen([L, "--local-addr", "127.0.0.1", "--rdzv-conf", "join_timeout=4"] +
                          common, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env({"LAUNCH_HOSTNAME": "twin"}))
    try:
        time.sleep(1)
        rc1, _, err1 = run(["--local-addr", "127.0.0.2"] + common,
                           {"LAUNCH_HOSTNAME": "twin", "NCCL_IB_TIMEOUT": "20"})
        _, err0 = n0.communicate(timeout=60)
    finally:
        if n0.poll() is None:
            n0.kill()
            n0.communicate()
    assert rc1 != 0 and "twin@127.0.0.2 differs from node 0 (twin@127.0.0.1)" in err1, err1
    assert "twin@127.0.0.1=(unset) twin@127.0.0.2=20" in err1, err1
    end = [ln for ln in err0.splitlines() if "rendezvous timed out" in ln]
    assert n0.returncode == 75 and len(end) == 1, err0
    assert "refused for differing from node 0" in end[0] and "twin@127.0.0.2" in end[0], end


def test_status_while_reforming():
    """While the job re-forms after a lost node, `launch status` names the
    round being formed, as the agents do, not the one that ended."""
    with lt.Server() as srv:
        ep = "127.0.0.1:%d" % srv.port
        common = ["--no-log-time", "--nnodes", "2", "--rdzv-endpoint", ep, "--rdzv-id",
                  "reform", "--rdzv-conf", "join_timeout=60", "/bin/sleep", "60"]
        a = lt.launch(["--local-addr", "127.0.0.2"] + common, name="reformA")
        b = lt.launch(["--local-addr", "127.0.0.3"] + common, name="reformB")
        try:
            lt.wait_until(lambda: "round 0 of job reform" in a.output(), 30, "round 0")
            b.kill()
            lt.wait_until(lambda: "restarting the workers (round 1)" in a.output(), 30,
                          "the restart")
            rc, out, err = run(["status", "--rdzv-endpoint", ep, "--rdzv-id", "reform"])
        finally:
            a.kill()
            b.kill()
    assert rc == 0 and "forming round 1 (round 0 ended)" in out, (rc, out, err)


def test_port_in_use():
    """A port held by another program is said to be (issue 27): "Address
    already in use" and which program holds it, at once, not "did not answer
    for 15 s"; a launch server there is still joined."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    port = s.getsockname()[1]
    try:
        t0 = time.time()
        rc, _, err = run(["--no-log-time", "--nnodes", "1", "--rdzv-endpoint",
                          "127.0.0.1:%d" % port, "/bin/true"])
    finally:
        s.close()
    assert rc == 75 and time.time() - t0 < 10, (rc, err)
    assert "Address already in use" in err and "(pid %d) holds the port" % os.getpid() in err, err
    assert "did not answer" not in err, err
    with lt.Server() as srv:
        rc, _, err = run(["--no-log-time", "--nnodes", "1", "--rdzv-endpoint",
                          "127.0.0.1:%d" % srv.port, "/bin/true"])
    assert rc == 0 and "joining it" in err, (rc, err)


def test_silent_wait():
    """Nobody hosts (is_host=false) the endpoint: a status line naming it and
    why within seconds, then one clean message at read_timeout, exit 75."""
    port = lt.free_port()
    cmd = [L, "--no-log-time", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:%d" % port,
           "--rdzv-conf", "is_host=false,read_timeout=6,join_timeout=600", "/bin/true"]
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env())
    first = None
    lines = []
    try:
        for line in p.stderr:
            lines.append(line)
            if first is None and "waiting for the rendezvous server" in line:
                first = time.time() - t0
        rc = p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    dt = time.time() - t0
    text = "".join(lines)
    assert first is not None and first < 5, (first, text)
    assert "127.0.0.1:%d" % port in text and "connection refused" in text, text
    assert rc == 75, (rc, text)
    # read_timeout, not the 600 s join timeout
    assert 5 <= dt < 20, dt
    errors = [ln for ln in lines if " error: " in ln]
    assert len(errors) == 1, text
    # the reason once, not fed back into itself
    assert errors[0].count("cannot reach") == 1 and errors[0].count("refused") == 1, errors
    # a name that does not resolve says so
    rc, _, err = run(["--no-log-time", "--nnodes", "2", "--rdzv-endpoint",
                      "no-such-host.invalid:29400", "--rdzv-conf", "read_timeout=3", "/bin/true"])
    assert rc == 75 and "does not resolve" in err, err


def test_host_by_any_address():
    """The node the endpoint names hosts the server whatever --local-addr
    says: by one of its addresses (any interface) or by its host name."""
    import socket
    me = socket.gethostname()
    addrs = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    addrs = [a for a in addrs if ":" not in a and not a.startswith("127.")]
    cases = [me] + addrs[:1]
    for host in cases:
        port = lt.free_port()
        t0 = time.time()
        rc, out, err = run(["--no-log-time", "--nnodes", "1", "--rdzv-endpoint",
                            "%s:%d" % (host, port), "--local-addr", "127.0.0.2",
                            "--rdzv-conf", "read_timeout=20", "/bin/true"], timeout=60)
        assert rc == 0 and time.time() - t0 < 15, (host, rc, err)
        assert "waiting for the rendezvous server" not in err, (host, err)


def test_own_store_hint():
    path = script("own.py", "import os, socket\ns = socket.socket()\n"
                "s.bind((os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])))\n")
    d = os.path.dirname(path)
    rc, _, err = run(["--standalone", path])
    assert rc == 1 and "needs --torch-store rank0" in err, err
    rc, _, err = run(["--standalone", "--torch-store", "rank0", path])
    assert rc == 0, err


def test_status_unknown_job():
    with lt.Cleanup() as c:
        port = lt.free_port()
        srv = c.add(lt.Proc([L, "server", "--host", "127.0.0.1", "--port", str(port)],
                            name="server"))
        res = {}

        def asked():
            res["r"] = run(["status", "--rdzv-endpoint", "127.0.0.1:%d" % port,
                            "--rdzv-id", "nobody", "--timeout", "2"])
            return "cannot reach" not in res["r"][2]
        lt.wait_until(asked, 30, "the server")
        rc, _, err = res["r"]
        assert rc == 1 and "knows no job 'nobody'" in err, (rc, err)
        srv.signal(15)
        srv.wait(20)


def test_user_env():
    # NCCL_DEBUG=INFO from the shell stays (the profile says WARN); the lint
    # warns about it
    recs, out, err = dump_run([], extra={"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    assert recs[0]["env"]["NCCL_DEBUG"] == "INFO", recs[0]["env"].get("NCCL_DEBUG")
    assert recs[0]["env"]["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    # one warning with one piece of advice (issue 27: there were two, one
    # saying to set WARN, the other to unset it)
    nccl = [ln for ln in err.splitlines() if "warning:" in ln and "NCCL_DEBUG=INFO" in ln]
    assert len(nccl) == 1 and "inherited, kept over the profile" in nccl[0], err
    assert "unset NCCL_DEBUG in your shell" in nccl[0], nccl
    # no GPU here: NCCL settings this node cannot honour warn, do not refuse
    recs, out, err = dump_run([], extra={"CUDA_VISIBLE_DEVICES": "",
                                         "NCCL_SOCKET_IFNAME": "ib0",
                                         "NCCL_IB_HCA": "mlx5_0"})
    assert "no GPU is used here" in err, err
    assert " error: " not in err, err
    # --report-bindings prints, and changes nothing for the workers
    plain, _, _ = dump_run(["--cpu-bind", "none"], nproc=2)
    rep, _, err = dump_run(["--cpu-bind", "none", "--report-bindings"], nproc=2)
    skip = re.compile(r"^(TORCHELASTIC_RUN_ID|TORCHELASTIC_ERROR_FILE|MASTER_PORT|"
                      r"LAUNCH_RDZV_ENDPOINT|LAUNCH_RDZV_ID|LAUNCH_ATTEMPT_DIR)$")
    for a, b in zip(sorted(plain, key=lambda r: r["env"]["RANK"]),
                    sorted(rep, key=lambda r: r["env"]["RANK"])):
        ka = {k for k in a["env"] if not skip.match(k)}
        kb = {k for k in b["env"] if not skip.match(k)}
        assert ka == kb, (ka ^ kb)
    assert "rank 0:" in err, err


def test_async_error_name():
    # Debian's torch 1.13 behind /usr/bin/python3 reads the old name only
    p = subprocess.run([PY, "-c", "import torch.version as v; print(v.__version__)"],
                       capture_output=True, text=True)
    if p.returncode == 0 and p.stdout.startswith("1."):
        recs, _, _ = dump_run([])
        e = recs[0]["env"]
        assert e.get("NCCL_ASYNC_ERROR_HANDLING") == "1", e
        assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in e, e
    # an explicit version wins
    recs, _, _ = dump_run(["--torch-version", "2.4"])
    e = recs[0]["env"]
    assert e.get("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1" and "NCCL_ASYNC_ERROR_HANDLING" not in e
    # a virtual environment whose site-packages claims 2.11
    v = scratch()
    real = os.path.realpath(PY)
    ver = os.path.basename(real)[len("python"):]
    os.makedirs(os.path.join(v, "bin"))
    os.symlink(real, os.path.join(v, "bin", "python3"))
    with open(os.path.join(v, "pyvenv.cfg"), "w") as f:
        f.write("home = %s\ninclude-system-site-packages = false\n" % os.path.dirname(real))
    site = os.path.join(v, "lib", "python" + ver, "site-packages")
    os.makedirs(os.path.join(site, "torch-2.11.0.dist-info"))
    with open(os.path.join(site, "torch-2.11.0.dist-info", "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+cu128\n")
    recs, _, _ = dump_run([], extra={"PYTHON_EXEC": os.path.join(v, "bin", "python3")})
    e = recs[0]["env"]
    assert e.get("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1", e
    assert "NCCL_ASYNC_ERROR_HANDLING" not in e, e
    # the program named through its shebang, torch/version.py this time
    os.makedirs(os.path.join(site, "torch"))
    with open(os.path.join(site, "torch", "version.py"), "w") as f:
        f.write("__version__ = '2.1.2'\n")
    prog = script("dump", "#!%s\n%s" % (os.path.join(v, "bin", "python3"), DUMP))
    os.chmod(prog, 0o755)
    recs, _, _ = dump_run([], prog=[prog])
    e = recs[0]["env"]
    assert e.get("NCCL_ASYNC_ERROR_HANDLING") == "1" and "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in e, e
    # pyenv: the interpreter on the PATH is a shell-script shim; torch is in
    # the prefix of the interpreter it execs (a fake one claiming 2.1.2)
    pyenv = scratch()
    os.makedirs(os.path.join(pyenv, "shims"))
    os.makedirs(os.path.join(pyenv, "versions"))
    os.symlink(v, os.path.join(pyenv, "versions", "fake"))
    shim = script("python3", '#!/bin/sh\nexec "%s/versions/fake/bin/python3" "$@"\n'
                  % pyenv, os.path.join(pyenv, "shims"))
    os.chmod(shim, 0o755)
    recs, _, _ = dump_run([], extra={"PYTHON_EXEC": "python3", "PATH": "%s:%s" % (
        os.path.dirname(shim), os.environ.get("PATH", "/usr/bin:/bin"))})
    e = recs[0]["env"]
    assert e.get("NCCL_ASYNC_ERROR_HANDLING") == "1" and "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in e, e


def test_local_rank_macro():
    path = script("dump.py", DUMP)
    d = os.path.dirname(path)
    rc, out, err = run(["--standalone", "--nproc-per-node", "2", path, d,
                        "--out=f${local_rank}.txt", "${local_rank}", "x${local_rank}y${local_rank}"])
    assert rc == 0, err
    got = {r["env"]["LOCAL_RANK"]: r["argv"][2:] for r in dumps(d)}
    assert got == {"0": ["--out=f0.txt", "0", "x0y0"], "1": ["--out=f1.txt", "1", "x1y1"]}, got


def test_progress_lines():
    """'\\r' updates reach the console as they come, with the prefix."""
    path = script("bar.py", "import sys, time\nsys.stdout.write('\\rstep 1')\nsys.stdout.flush()\n"
                "time.sleep(4)\nsys.stdout.write('\\rstep 2\\n')\n")
    d = os.path.dirname(path)
    p = subprocess.Popen([L, "-q", "--standalone", "--log-line-prefix", "<${rank}> ", path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
    t0 = time.time()
    got = b""
    try:
        while b"\r" not in got and time.time() - t0 < 3.5:
            chunk = os.read(p.stdout.fileno(), 4096)
            if not chunk:
                break
            got += chunk
        early = time.time() - t0
        rest, _ = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert got.startswith(b"<0> step 1\r") and early < 3.5, (got, early)
    assert (got + rest).endswith(b"<0> step 2\n"), got + rest


def test_scale_up_spends_no_restart():
    d = scratch()
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "py", "worker.py")
    port = lt.free_port()
    common = ["--nnodes", "1:2", "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", "grow",
              "--max-restarts", "0", "--rdzv-conf", "last_call_timeout=1", "--no-python", PY,
              worker, d, "hold"]
    with lt.Cleanup() as c:
        a = c.add(lt.launch(["--local-addr", "127.0.0.1"] + common, name="a",
                            env={"LAUNCH_HOSTNAME": "node1"}))
        lt.wait_until(lambda: len(lt.records(d, 0)) == 1, 60, "round 0")
        b = c.add(lt.launch(["--local-addr", "127.0.0.2"] + common, name="b",
                            env={"LAUNCH_HOSTNAME": "node2"}))
        assert a.wait(90) == 0 and b.wait(90) == 0, a.output() + b.output()
    g1 = lt.records(d, 1)
    assert len(g1) == 2, g1
    assert all(r["env"]["TORCHELASTIC_RESTART_COUNT"] == "0" and
               r["env"]["LAUNCH_ROUND"] == "1" for r in g1), [r["env"] for r in g1]


def test_close_timeout():
    """close_timeout: how long the hosting agent keeps the server for a node
    that has not learnt the end yet (here one that is stopped)."""
    import signal as sig
    hold = script("hold.py", "import os, sys, time\nd = sys.argv[1]\n"
                  "open(os.path.join(d, 'up.' + os.environ['RANK']), 'w').close()\n"
                  "while os.environ['RANK'] == '1' or not os.path.exists(os.path.join(d, 'go')):\n"
                  "    time.sleep(0.05)\nsys.exit(1)\n")
    d = os.path.dirname(hold)
    took = {}
    for close in (1, 7):
        for n in ("up.0", "up.1", "go"):
            if os.path.exists(os.path.join(d, n)):
                os.unlink(os.path.join(d, n))
        port = lt.free_port()
        common = ["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id",
                  "close%d" % close, "--rdzv-conf", "close_timeout=%d,heartbeat=10" % close,
                  "--no-python", PY, hold, d]
        with lt.Cleanup() as c:
            a = c.add(lt.launch(["--local-addr", "127.0.0.1"] + common, name="a",
                                env={"LAUNCH_HOSTNAME": "node1"}))
            b = c.add(lt.launch(["--local-addr", "127.0.0.2"] + common, name="b",
                                env={"LAUNCH_HOSTNAME": "node2"}))
            lt.wait_until(lambda: all(os.path.exists(os.path.join(d, "up.%d" % r))
                                      for r in (0, 1)), 60, "both workers")
            b.signal(sig.SIGSTOP)
            try:
                t0 = time.time()
                open(os.path.join(d, "go"), "w").close()
                rc = a.wait(60)
                took[close] = time.time() - t0
            finally:
                b.signal(sig.SIGCONT)
            b.wait(60)
        assert rc == 1, a.output()
    # the stopped node holds the hosting agent for close_timeout, no longer
    assert took[1] < 5 and 6 <= took[7] < 14, took


def test_quiet_healthy_run():
    rc, out, err = run(["--standalone", "--nproc-per-node", "2", "/bin/echo", "hi"])
    assert rc == 0 and out.count("hi") == 2, (out, err)
    # a node without cgroup v2 (or a TSan build: no clone3) also says, once,
    # that it falls back to a weaker containment: a fact about the node
    lines = [ln for ln in err.splitlines()
             if ln.strip() and "workers contained by subreaper" not in ln]
    assert len(lines) == 2, err
    assert "round 0" in lines[0] and "finished" in lines[1], err
    assert "1 nodes" not in err and "profile auto line" not in err, err
    # the traceback once in the summary, from the error file when there is one
    path = script("bad.py", "import sys\nsys.stderr.write('Traceback (most recent call last):\\n"
                "  File x\\nValueError: boom\\n')\nsys.exit(1)\n")
    d = os.path.dirname(path)
    rc, out, err = run(["--standalone", path])
    summary = err[err.index("Root cause"):]
    assert rc == 1 and summary.count("Traceback") == 1, summary


def test_plain_messages():
    """What users read names facts, not document sections, in ASCII."""
    texts = []
    for args in (["--help"], ["env", "--help"], ["doctor", "--help"], ["topo", "--help"],
                 ["env", "--list-profiles"]):
        rc, out, err = run(args)
        texts.append(out + err)
    rc, out, _ = run(["env", "--list-profiles"])
    for name in ("auto", "pcie-ib", "nvlink-ib", "roce", "socket"):
        rc, out, err = run(["env", "--show-profile", name])
        assert rc == 0, err
        texts.append(out)
    rc, out, err = run(["doctor", "--no-probe"])
    texts.append(out + err)
    for t in texts:
        assert "\u00a7" not in t and not re.search(r"\bseed \d", t), t
        assert all(ord(ch) < 128 for ch in t), [ch for ch in t if ord(ch) >= 128]


def test_shell_script_fingerprint():
    """A job started as `bash -eo pipefail run.sh ARGS` (a wrapper script, as
    the runbooks' jobs are) is fingerprinted by the script, as a Python job
    by its .py: two nodes with different run.sh are told apart, where the
    shell's binary is the same on both; sh -c has no file to hash."""
    import hashlib
    d = scratch()
    sh = script("run.sh", "echo train\n", d)
    rc, fp, err = run(["env", "--fingerprint", "--no-python", "bash", "-eo", "pipefail",
                       sh, "data.bin"])
    assert rc == 0, err
    want = hashlib.sha256(open(sh, "rb").read()).hexdigest()
    assert "sha256.run.sh=%s" % want in fp, fp
    assert "sha256.bash" not in fp and "data.bin" not in fp, fp
    rc, fp, err = run(["env", "--fingerprint", "--no-python", "sh", "-c", "echo hi"])
    assert rc == 0 and "sha256." not in fp, (rc, fp, err)


def test_doctor_and_fingerprint():
    rc, out, err = run(["doctor", "--json"], timeout=120)
    items = {i["id"]: i for i in json.loads(out)["items"]}
    cuda = items.get("cuda")
    if cuda and "driver supports none" in cuda["value"]:
        assert cuda["status"] != "pass", cuda
    if "hugepages" in items:
        assert items["hugepages"]["status"] in ("info", "pass"), items["hugepages"]
        assert not items["hugepages"].get("fix"), items["hugepages"]
    assert "nccl.vars" in items, sorted(items)
    rc, fp, err = run(["env", "--fingerprint"])
    assert rc == 0, err
    kv = dict(ln.split("=", 1) for ln in fp.splitlines() if "=" in ln)
    if cuda and not cuda["value"].startswith("runtime none"):
        assert kv.get("cuda.runtime") not in (None, "none"), (cuda, kv)
    nccl = items.get("nccl")
    if nccl and not nccl["value"].startswith("none"):
        assert kv.get("nccl") not in (None, "none"), (nccl, kv)


def main():
    global SCRATCH
    SCRATCH = tempfile.mkdtemp(prefix="launch-compat-")
    os.mkdir(os.path.join(SCRATCH, "runs"))
    try:
        run_tests(sys.argv[1:])
        # successful runs remove their run directory, failed ones keep it
        # only when it holds something (issue 27: 250 dirs a day in /tmp)
        left = os.listdir(os.path.join(SCRATCH, "runs"))
        assert left == [], left
    finally:
        shutil.rmtree(SCRATCH)
    print("test_torchrun_compat: ok")


def run_tests(only):
    for t in (test_options, test_suggestions, test_torchrun_settings, test_static_node_waits,
              test_repeating_failures, test_idle_store_client, test_lost_steps, test_failure_summary,
              test_port_in_use, test_status_while_reforming, test_rdzv_timeout_once, test_mismatch_named_on_node0,
              test_exit_codes, test_long_run_id, test_silent_wait, test_host_by_any_address,
              test_own_store_hint, test_status_unknown_job,
              test_user_env, test_async_error_name, test_local_rank_macro,
              test_progress_lines, test_scale_up_spends_no_restart, test_close_timeout,
              test_quiet_healthy_run,
              test_plain_messages, test_doctor_and_fingerprint, test_shell_script_fingerprint):
        if only and t.__name__ not in only:
            continue
        t0 = time.time()
        t()
        print("%s: ok (%.1f s)" % (t.__name__, time.time() - t0), flush=True)


if __name__ == "__main__":
    main()
