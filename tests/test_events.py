"""The event log (launch --event-log, docs/events.md): train_gpt on CPU, 2
workers under --ckpt-dir, one worker SIGKILLed after the first checkpoint
commit; the job resumes from the checkpoint and finishes. The file holds
exactly the documented sequence of events, each line a JSON object with
the schema version, and the restart and the summary carry the reason,
downtime, steps redone and resume step. --event-log-handler console
writes the same lines to stderr. A rank 3x slower than the others is
flagged as a straggler once."""
import json
import os
import shutil
import signal
import sys
import tempfile
import time

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
    seq = [e for e in ev if e["event"] != "checkpoint_committed"]
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
    # and read once a second) or the last checkpoint committed
    assert r["last_step"] >= resumed and \
        r["steps_redone"] == r["last_step"] - resumed, r
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
    kinds = [e["event"] for e in ev]
    assert kinds == ["job_start", "node_joined", "round_formed",
                     "worker_started", "worker_exited", "job_end",
                     "summary"], out
    assert ev[4]["exit_code"] == 0 and ev[-1]["restarts"] == 0
    print("console: the same lines on stderr")


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


def main():
    d = tempfile.mkdtemp(prefix="launch-events-")
    try:
        test_console(d)
        test_straggler(d)
        test_kill_and_resume(d)
    finally:
        shutil.rmtree(d)
    print("test_events: ok")


if __name__ == "__main__":
    main()
