"""The event log (launch --event-log, docs/events.md): train_gpt on CPU, 2
workers under --ckpt-dir, one worker SIGKILLed after the first checkpoint
commit; the job resumes from the checkpoint and finishes. The file holds
exactly the documented sequence of events, each line a JSON object with
the schema version, and the restart and the summary carry the reason,
downtime, steps redone and resume step; the hosted server's view of the
node is in the same file. --event-log-handler console writes the same
lines to stderr. A rank 3x slower than the others is flagged as a
straggler once. A standalone `launch server --event-log` writes every
node of its jobs joining, leaving and refused, and a limit_hit once per
limit per interval with the count of refusals; it keeps an ended job
(state, exit codes, root cause) for --keep-ended, which `launch status`
shows, and a new run with the same id starts while it is kept."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

BIN = os.path.dirname(os.path.abspath(lt.launch_bin()))
TRAIN = os.path.join(BIN, "train_gpt")
MODEL = ["--preset", "tiny", "--val-batches", "1", "--threads", "1",
         "--log-every", "10"]


def read_events(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = f.read().splitlines()
    return [json.loads(x) for x in lines]


def get_from(log, port_re, path):
    """GET path from the metrics port that log names (port_re). RET the
    body, "" while the log names no port, None when built without the
    metrics server."""
    if "built without libevent" in log:
        return None
    m = re.search(port_re, log)
    if not m:
        return ""
    with urllib.request.urlopen("http://127.0.0.1:%s%s" % (m.group(1), path),
                                timeout=5) as r:
        return r.read().decode()


def scrape_checkpoint(agent):
    """The agent's checkpoint series once it has them (None: built without
    the metrics server)."""
    out = {}

    def have():
        body = get_from(agent.output(),
                        r"metrics of job \S+ on http://127\.0\.0\.1:(\d+)/",
                        "/metrics")
        if body is None:
            return True
        for name in ("launch_checkpoint_bytes",
                     "launch_checkpoint_write_seconds"):
            v = re.search(r"^%s\{[^}]*\} (\S+)$" % name, body, re.M)
            if v:
                out[name] = float(v.group(1))
        return len(out) == 2
    lt.wait_until(have, 60, "the checkpoint series on the metrics port")
    return out or None


def test_checkpoint_metrics(d):
    """tests/ckpt_writer saves 3 steps of a 1 MiB shard with the checkpoint
    library, then waits for a gate file: checkpoint_committed carries the
    step's bytes, write time and MB/s, and the metrics port the same bytes
    and write time."""
    evp = os.path.join(d, "ck-metrics.jsonl")
    ck = os.path.join(d, "ck-metrics")
    gate = os.path.join(d, "gate")
    writer = os.path.join(os.path.dirname(lt.launch_bin()), "..", "tests",
                          "ckpt_writer")
    with lt.Cleanup() as c:
        agent = c.add(lt.launch(
            ["--standalone", "--nproc-per-node", "1", "--event-log", evp,
             "--ckpt-dir", ck, "--metrics-port", "127.0.0.1:0",
             "--no-python", "sh", "-c",
             '"$0" "$LAUNCH_CKPT_DIR" --mode single --steps 3 --size 1048576 '
             '&& while [ ! -e "$1" ]; do sleep 0.05; done', writer, gate],
            name="ckmetrics"))

        def committed():
            return [e for e in read_events(evp)
                    if e["event"] == "checkpoint_committed" and
                    e["step"] == 3]
        lt.wait_until(committed, 60, "checkpoint_committed of step 3")
        cm = committed()[0]
        scraped = scrape_checkpoint(agent)
        open(gate, "w").close()
        rc = agent.wait(60)
        assert rc == 0, agent.output()
    assert cm["bytes"] == 1048576 and cm["seconds"] > 0, cm
    assert abs(cm["mb_per_s"] - cm["bytes"] / 1e6 / cm["seconds"]) <= \
        1e-5 * cm["mb_per_s"], cm  # 6 significant digits
    if scraped:
        assert scraped["launch_checkpoint_bytes"] == 1048576 and \
            abs(scraped["launch_checkpoint_write_seconds"] - cm["seconds"]) \
            <= 1e-5 * cm["seconds"], (scraped, cm)
    print("checkpoint: %d bytes in %.3f s, %.1f MB/s%s" % (
        cm["bytes"], cm["seconds"], cm["mb_per_s"],
        "; the same on the metrics port" if scraped else
        " (no metrics server in this build)"))


def test_kill_and_resume(d):
    evp = os.path.join(d, "events.jsonl")
    ck = os.path.join(d, "ck")
    steps = 150
    with lt.Cleanup() as c:
        agent = c.add(lt.launch(
            ["--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
             "--stop-timeout", "5",
             "--event-log", evp, "--ckpt-dir", ck, TRAIN] + MODEL +
            ["--steps", str(steps), "--ckpt-every", "5"],
            env={"LAUNCH_HOSTNAME": "evhost"}, name="agent"))

        def committed():
            return any(e["event"] == "checkpoint_committed"
                       for e in read_events(evp))
        lt.wait_until(committed, 120, "a checkpoint_committed event")
        ev = read_events(evp)
        victim = [e for e in ev if e["event"] == "worker_started" and
                  e["rank"] == 1][0]["pid"]
        os.kill(victim, signal.SIGKILL)
        rc = agent.wait(300)
        out = agent.output()
        assert rc == 0, out
    ev = read_events(evp)
    for e in ev:
        assert e["v"] == 1 and e["job"] == ev[0]["job"] and \
            e["node"] == "evhost", e
        assert isinstance(e["time"], float), e
    times = [e["time"] for e in ev]
    assert times == sorted(times), "events out of time order"
    # checkpoint commits come as often as the 2 s commit timer sees them:
    # there is at least one before the kill; the rest are checked apart
    commits = [e for e in ev if e["event"] == "checkpoint_committed"]
    assert commits and all(c["dir"] == ck for c in commits), commits
    # Size and write time from the step's manifest: every step of this
    # model has the same shards, those of the newest step on disk.
    with open(os.path.join(ck, "latest")) as f:
        newest = os.path.join(ck, f.read().strip())
    shard_bytes = sum(os.path.getsize(os.path.join(newest, n))
                      for n in os.listdir(newest) if n.endswith(".bin"))
    for cm in commits:
        assert cm["bytes"] == shard_bytes and cm["seconds"] > 0, cm
        assert abs(cm["mb_per_s"] - cm["bytes"] / 1e6 / cm["seconds"]) <= \
            1e-5 * cm["mb_per_s"], cm  # 6 significant digits
    # The hosted server's view of its node: joined for each round, then
    # left at the end; apart from the agent's own sequence.
    sv = [(e["event"], e["host"]) for e in ev if e.get("source") == "server"]
    assert sv == [("node_joined", "evhost"), ("node_joined", "evhost")] or \
        sv == [("node_joined", "evhost"), ("node_joined", "evhost"),
               ("node_left", "evhost")], sv
    seq = [e for e in ev if e["event"] != "checkpoint_committed" and
           e.get("source") != "server"]
    kinds = [(e["event"], e.get("rank")) for e in seq]
    # The two exits of a round come in either order; the killed rank's is
    # the first of the failed round (it is the root cause).
    want = [("job_start", None), ("node_joined", None),
            ("round_formed", None), ("resume_agreed", None),
            ("worker_started", 0), ("worker_started", 1),
            ("worker_exited", 1), ("failure", 1), ("worker_exited", 0),
            ("node_joined", None), ("round_formed", None),
            ("resume_agreed", None), ("restart", None),
            ("worker_started", 0), ("worker_started", 1),
            ("worker_exited", None), ("worker_exited", None),
            ("job_end", None), ("summary", None)]
    ok = len(kinds) == len(want) and all(
        k == w[0] and (w[1] is None or r == w[1])
        for (k, r), w in zip(kinds, want))
    assert ok, \
        "event sequence:\n%s" % "\n".join(json.dumps(e) for e in seq)
    E = dict((i, e) for i, e in enumerate(seq))
    assert E[2]["round"] == 0 and E[2]["world_size"] == 2
    assert E[3]["step"] is None  # a fresh start
    assert E[6]["signal"] == "SIGKILL" and E[6]["pid"] == victim and \
        E[6]["expected"] is False
    assert E[7]["signal"] == "SIGKILL" and E[7]["host"] == "evhost"
    assert E[10]["round"] == 1 and E[10]["restarts"] == 1
    resumed = E[11]["step"]
    assert resumed is not None and resumed >= commits[0]["step"], E[11]
    r = E[12]
    assert r["round"] == 1 and r["resume_step"] == resumed, r
    assert "rank 1" in r["reason"] or "SIGKILL" in r["reason"], r
    assert 0 < r["downtime_s"] < 60, r
    # a lower bound: the last step the agent saw (reports are rate-limited
    # and read once a second) or the last checkpoint committed; a commit
    # after what the agent saw can make the resumed step the newer one
    assert r["last_step"] >= 0 and \
        r["steps_redone"] == max(0, r["last_step"] - resumed), r
    assert E[15]["exit_code"] == 0 and E[16]["exit_code"] == 0
    assert E[17]["ok"] is True and E[17]["exit_code"] == 0
    s = E[18]
    assert s["restarts"] == 1 and s["steps_redone"] == r["steps_redone"], s
    assert abs(s["downtime_s"] - r["downtime_s"]) < 1e-3, s
    assert abs(s["mean_resume_s"] - r["downtime_s"]) < 1e-3, s
    assert "job %s summary: 1 restart, " % ev[0]["job"] in out, out
    print("kill + resume: %d events in order; resumed from step %d, %d "
          "steps redone, %.2f s down" % (len(ev), resumed,
                                         r["steps_redone"], r["downtime_s"]))


def test_console(d):
    agent = lt.launch(["--standalone", "--nproc-per-node", "1",
                       "--event-log-handler", "console",
                       "--no-python", "true"], name="console")
    rc = agent.wait(60)
    out = agent.output()
    assert rc == 0, out
    ev = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert [e["event"] for e in ev if e.get("source") == "server"][:1] == \
        ["node_joined"], out
    ev = [e for e in ev if e.get("source") != "server"]
    kinds = [e["event"] for e in ev]
    assert kinds == ["job_start", "node_joined", "round_formed",
                     "worker_started", "worker_exited", "job_end",
                     "summary"], out
    assert ev[4]["exit_code"] == 0 and ev[-1]["restarts"] == 0
    print("console: the same lines on stderr")


def test_restart_without_steps(d):
    """A job that never reports a step and fails once: the restart event's
    last_step is null (docs/events.md: a step that does not exist), not -1,
    and no step is counted as redone."""
    path = os.path.join(d, "nosteps.jsonl")
    agent = lt.launch(["--standalone", "--nproc-per-node", "1",
                       "--max-restarts", "1", "--event-log", path,
                       "--no-python", "sh", "-c",
                       'test "$LAUNCH_ROUND" = 1 || exit 5'], name="nosteps")
    rc = agent.wait(60)
    assert rc == 0, agent.output()
    r = [e for e in read_events(path) if e["event"] == "restart"]
    assert len(r) == 1, read_events(path)
    assert r[0]["last_step"] is None and r[0]["steps_redone"] == 0, r[0]
    assert "resume_step" not in r[0], r[0]
    print("restart without steps: last_step null, nothing redone")


def test_straggler(d):
    """4 ranks of tests/hang_worker in its slow mode: rank 1's compute time
    is 3x the others'. It is flagged once, with its score against the
    node's median; the others are not."""
    evp = os.path.join(d, "strag.jsonl")
    hw = os.path.join(os.path.dirname(lt.launch_bin()), "..", "tests",
                      "hang_worker")
    agent = lt.launch(["--standalone", "--nproc-per-node", "4", "--event-log",
                       evp, "--no-python", hw, "80", "slow", d],
                      name="straggler")
    rc = agent.wait(120)
    assert rc == 0, agent.output()
    flagged = [e for e in read_events(evp)
               if e["event"] == "straggler_flagged"]
    assert len(flagged) == 1 and flagged[0]["rank"] == 1, flagged
    f = flagged[0]
    assert abs(f["score"] - 3.0) < 1e-6 and f["threshold"] == 1.2, f
    assert abs(f["seconds_per_step"] - 0.09) < 1e-9 and \
        abs(f["median_seconds_per_step"] - 0.03) < 1e-9, f
    assert "rank 1 is a straggler: 0.090 s a step, 3.00x the median" in \
        agent.output(), agent.output()
    print("straggler: rank 1 flagged once, score %.2f" % f["score"])


def wait_event(path, kind, timeout):
    """The events of that kind in the log at path, once there is one."""
    got = []

    def seen():
        got[:] = [e for e in read_events(path) if e["event"] == kind]
        return got
    lt.wait_until(seen, timeout, "%s in %s" % (kind, path))
    return got


def status(port, job, *extra):
    r = subprocess.run([lt.launch_bin(), "status", "--rdzv-endpoint",
                        "127.0.0.1:%d" % port, "--rdzv-id", job] +
                       list(extra), capture_output=True, text=True,
                       timeout=30)
    return r.returncode, r.stdout, r.stderr


def node(port, job, host, code, extra=(), cmd=None):
    """One agent of a 2-node job on the standalone server; its worker
    exits with code, or runs cmd."""
    return lt.launch(["--rdzv-endpoint", "127.0.0.1:%d" % port,
                      "--rdzv-id", job, "--nnodes", "2",
                      "--nproc-per-node", "1", "--max-restarts", "0"] +
                     list(extra) + ["--no-python"] +
                     (cmd or ["sh", "-c", "exit %d" % code]),
                     env={"LAUNCH_HOSTNAME": host}, name=host)


def server_page(srv, marker):
    """The page of the server's metrics port once it holds marker (None:
    built without the metrics server)."""
    got = []

    def listed():
        page = get_from(srv.logtext(),
                        r"metrics on http://127\.0\.0\.1:(\d+)/metrics", "/")
        if page is None:
            return True
        got[:] = [page]
        return marker in page
    lt.wait_until(listed, 30, "%s on the server's page" % marker)
    return got[0] if got else None


def test_server_view(d):
    """Two nodes on a standalone server: node nb's worker exits 3, the job
    fails. The server's event log has both nodes joining and leaving;
    `launch status` still shows the job, failed, with nb's exit code and
    the root cause; the same id runs again (and succeeds) while the
    failed run is kept; a node with other flags is refused (node_refused
    with the reason); after --keep-ended the job is gone."""
    evp = os.path.join(d, "server.jsonl")
    with lt.Server("--keep-ended", "10s", "--event-log", evp,
                   "--metrics-port", "127.0.0.1:0") as srv, \
            lt.Cleanup() as c:
        a = c.add(node(srv.port, "sv1", "na", 0))
        b = c.add(node(srv.port, "sv1", "nb", 3))
        assert b.wait(120) != 0, b.output()
        assert a.wait(120) != 0, a.output()
        rc, out, err = status(srv.port, "sv1", "--json")
        assert rc == 0, (out, err)
        st = json.loads(out)
        assert st["state"] == "finished" and st["ok"] is False, st
        assert 0 < st["keep_ms"] <= 10000, st
        nodes = dict((m["host"], m) for m in st["members"])
        assert nodes["nb"]["state"] == "failed" and \
            nodes["nb"]["exit_code"] == 3, st
        assert (nodes["na"]["state"], nodes["na"]["exit_code"]) in \
            (("done", 0), ("stopped", -1)), st
        rc0 = st["root_cause"]
        assert rc0["host"] == "nb" and rc0["exit_code"] == 3 and \
            rc0["rank"] == 1, st
        rc, out, err = status(srv.port, "sv1")
        assert rc == 0 and "ended: FAILED" in out and \
            "root cause: rank 1" in out and "exit 3" in out, (out, err)
        page = server_page(srv, '<tr class="job failed" data-job="sv1">')
        if page is not None:
            row = re.search(r'<tr class="job failed" data-job="sv1">.*?</tr>',
                            page).group(0)
            assert re.search(r'data-host="nb">nb: failed, <span class="exit">'
                             r'exit 3</span>', row), row
            assert "root cause: rank 1 on nb" in row, row

        # the same id again, while the failed run is kept: a new run, whose
        # workers leave keys in the store (progress, barriers)
        hw = [os.path.join(os.path.dirname(lt.launch_bin()), "..", "tests",
                           "hang_worker"), "3", "run", d]
        a = c.add(node(srv.port, "sv1", "na", 0, cmd=hw))
        b = c.add(node(srv.port, "sv1", "nb", 0, cmd=hw))
        assert b.wait(120) == 0, b.output()
        assert a.wait(120) == 0, a.output()
        rc, out, err = status(srv.port, "sv1", "--json")
        st = json.loads(out)
        assert rc == 0 and st["ok"] is True and st["restarts"] == 0, st
        assert sorted((m["host"], m["state"], m["exit_code"])
                      for m in st["members"]) == \
            [("na", "done", 0), ("nb", "done", 0)], st

        # a node with other flags than the job's is refused
        a = c.add(node(srv.port, "sv2", "na", 0))
        lt.wait_until(lambda: any(e["event"] == "node_joined" and
                                  e["job"] == "sv2"
                                  for e in read_events(evp)),
                      30, "na joined sv2")  # its flags are the job's
        b = c.add(node(srv.port, "sv2", "nb", 0, ("--max-restarts", "3")))
        assert b.wait(60) != 0, b.output()
        refused = wait_event(evp, "node_refused", 30)
        assert refused[0]["host"] == "nb" and refused[0]["job"] == "sv2" and \
            "same flags" in refused[0]["reason"], refused
        a.signal(signal.SIGTERM)
        a.wait(60)

        def gone():
            return status(srv.port, "sv1")[0] == 1
        # its workers' keys go with it
        lt.wait_until(gone, 60, "the ended job forgotten after --keep-ended")
        assert "knows no job 'sv1'" in status(srv.port, "sv1")[2]
    ev = read_events(evp)
    assert all(e["v"] == 1 for e in ev), ev
    sv1 = [(e["event"], e["host"]) for e in ev if e["job"] == "sv1"]
    for h in ("na", "nb"):  # two runs: each node joined and left twice
        assert sv1.count(("node_joined", h)) == 2, sv1
        assert sv1.count(("node_left", h)) == 2, sv1
    joined = [e for e in ev if e["event"] == "node_joined"][0]
    assert joined["source"] == "server" and joined["nproc"] == 1 and \
        joined["addr"] == "127.0.0.1", joined
    print("server view: %d events; the failed job kept with exit code 3, "
          "then forgotten" % len(ev))


def test_kept_make_room(d):
    """--max-jobs 1: a job ended and kept for status never refuses the next
    job; the kept one goes to make room."""
    with lt.Server("--max-jobs", "1", "--keep-ended", "10m") as srv:
        for job in ("k1", "k2"):
            rc, out = lt.launch_wait(
                ["--rdzv-endpoint", "127.0.0.1:%d" % srv.port, "--rdzv-id",
                 job, "--nnodes", "1", "--nproc-per-node", "1",
                 "--no-python", "true"], name=job, timeout=60)
            assert rc == 0, out
            rc, out, err = status(srv.port, job, "--json")
            assert rc == 0 and json.loads(out)["ok"] is True, (out, err)
        # k2 took k1's room (and asking for k1 takes k2's)
        rc, out, err = status(srv.port, "k1")
        assert rc == 1 and "knows no job 'k1'" in err, (out, err)
    print("kept jobs make room: a second job under --max-jobs 1 ran")


TS_FILL = r"""
import datetime, sys
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False,
                  timeout=datetime.timedelta(seconds=10))
s.set("k1", b"x" * 40000)
try:
    s.set("k2", b"y" * 40000)
    s.get("k2")
except Exception as e:
    print("refused:", e)
"""


def test_limit_store(d):
    """A PyTorch TCPStore client fills its job's store over
    --max-store-bytes: limit_hit names the limit, its value and the job.
    Needs PyTorch (LAUNCH_VENV's python, or this one)."""
    py = os.path.join(os.environ.get("LAUNCH_VENV", ""), "bin", "python")
    if not os.environ.get("LAUNCH_VENV") or not os.path.exists(py):
        py = sys.executable
    if subprocess.run([py, "-c", "import torch.distributed"],
                      capture_output=True).returncode != 0:
        print("note: no PyTorch (set LAUNCH_VENV): the TCPStore limit_hit "
              "is not tested")
        return
    evp = os.path.join(d, "store-limit.jsonl")
    with lt.Server("--max-store-bytes", "64K", "--event-log", evp) as srv:
        r = subprocess.run([py, "-c", TS_FILL, str(srv.port)],
                           capture_output=True, text=True, timeout=120)
        assert "refused:" in r.stdout, (r.stdout, r.stderr)
        hits = wait_event(evp, "limit_hit", 10)
    h = hits[0]
    assert h["limit"] == "max-store-bytes" and h["value"] == 65536 and \
        h["job"] == "default" and h["refused"].startswith("TCPStore SET"), h
    print("limit_hit from a TCPStore client: %s" % h["refused"])


def hold(port):
    """A connection that said it speaks the native protocol: not silent,
    so the server does not close it to make room."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"RDZV")
    return s


def refused(port):
    """Connect; RET True when the server closed it at once (refused)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.settimeout(10)
        return s.recv(1) == b""
    except (ConnectionResetError, socket.timeout):
        return True
    finally:
        s.close()


def test_limit_hit(d):
    """--max-conns-per-addr 2: 20 connections over it are refused. The
    log says limit_hit for max-conns-per-addr, never two within
    --limit-event-interval, and once the interval passed the next refusal's
    event counts every refusal not yet reported."""
    evp = os.path.join(d, "limits.jsonl")
    with lt.Server("--max-conns-per-addr", "2", "--handshake-timeout", "120s",
                   "--limit-event-interval", "1s", "--event-log", evp) as srv:
        held = [hold(srv.port) for _ in range(2)]
        try:
            flood = 20
            assert all(refused(srv.port) for _ in range(flood))

            def hits():
                return [e for e in read_events(evp)
                        if e["event"] == "limit_hit"]
            lt.wait_until(hits, 10, "a limit_hit event")
            first = hits()[0]
            # one more refusal once the interval has passed since the last
            # event: its event carries the rest of the count
            last = hits()[-1]["time"]
            lt.wait_until(lambda: time.time() > last + 1.1, 10, "the interval")
            assert refused(srv.port)
            lt.wait_until(lambda: sum(e["count"] for e in hits()) ==
                          flood + 1, 10, "every refusal counted")
        finally:
            for s in held:
                s.close()
        ev = hits()
    assert first["limit"] == "max-conns-per-addr" and first["value"] == 2 and \
        first["count"] == 1 and first["peer"].startswith("127.0.0.1:") and \
        first["refused"] == "a connection", first
    assert all(e["limit"] == "max-conns-per-addr" for e in ev), ev
    times = [e["time"] for e in ev]
    assert all(b - a >= 0.999 for a, b in zip(times, times[1:])), times
    assert len(ev) < flood + 1, ev
    print("limit_hit: %d refusals in %d events" % (flood + 1, len(ev)))


def main():
    d = tempfile.mkdtemp(prefix="launch-events-")
    try:
        test_limit_hit(d)
        test_limit_store(d)
        test_server_view(d)
        test_kept_make_room(d)
        test_checkpoint_metrics(d)
        test_console(d)
        test_restart_without_steps(d)
        test_straggler(d)
        test_kill_and_resume(d)
    finally:
        shutil.rmtree(d)
    print("test_events: ok")


if __name__ == "__main__":
    main()
