"""`launch status` with no endpoint (issue #23): every agent registers its
job in the user's runtime directory, so `launch status` lists this node's
jobs without being told where their servers are: a running one with its
endpoint (and `--rdzv-id` alone shows it in full, from its server), an
ended one with its exit code and reason after its embedded server is gone,
an agent killed by SIGKILL as gone; an ended job is forgotten after ten
minutes; a registry that is not the user's own is refused."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402


def status(env, *args):
    p = subprocess.run([lt.launch_bin(), "status"] + list(args),
                       capture_output=True, text=True, env=env, timeout=60)
    return p.returncode, p.stdout + p.stderr


def jobs(env):
    rc, out = status(env, "--json")
    assert rc == 0, out
    return {j["job"]: j for j in json.loads(out)["jobs"]}


def main():
    d = tempfile.mkdtemp(prefix="launch-status-list-")
    procs = []
    try:
        run = os.path.join(d, "run")
        os.mkdir(run, 0o700)
        env = dict(os.environ, XDG_RUNTIME_DIR=run)
        rc, out = status(env)
        assert rc == 0 and "no job of this user on this node" in out, out

        # a job that fails: exit 3 (a code that is not restarted), on a host
        # whose name holds terminal controls (a title, a colour)
        a = lt.launch(["--standalone", "--nproc-per-node", "1", "--no-python",
                       "/bin/sh", "-c", "exit 3"],
                      env={"XDG_RUNTIME_DIR": run,
                           "LAUNCH_HOSTNAME": "h\x1b]0;pwned\x07\x1b[31mRED"},
                      name="fail")
        procs.append(a)
        assert a.wait(60) == 3, a.output()
        # a job that runs until the test opens its gate
        gate = os.path.join(d, "gate")
        b = lt.launch(["--standalone", "--nproc-per-node", "1", "--no-python",
                       "/bin/sh", "-c",
                       "while [ ! -e %s ]; do sleep 0.05; done" % gate],
                      env={"XDG_RUNTIME_DIR": run}, name="run")
        procs.append(b)
        lt.wait_until(lambda: "standalone server" in b.output(), 30,
                      "the running job's start line")
        line = [x for x in b.output().splitlines() if "standalone server" in x][0]
        endpoint = line.split("standalone server ")[1].split()[0]
        running_id = line.split("--rdzv-id ")[1].rstrip(")")

        j = jobs(env)
        assert len(j) == 2, j
        r = j[running_id]
        assert r["state"] == "running" and r["endpoint"] == endpoint, r
        assert r["pid"] == b.pid and r["program"] == "/bin/sh", r
        (failed,) = [x for x in j.values() if x["job"] != running_id]
        assert failed["state"] == "failed" and failed["exit_code"] == 3, failed
        assert "exit code 3" in failed["reason"], failed
        rc, text = status(env)
        assert rc == 0 and running_id in text and "running" in text, text
        assert "3: rank 0" in text, text
        # the list is for a terminal: the host's controls are shown escaped
        assert "\x1b" not in text and "\x07" not in text, repr(text)
        assert "h\\x1b]0;pwned\\x07\\x1b[31mRED" in text, text

        # --rdzv-id alone: the running job from its own server
        rc, out = status(env, "--rdzv-id", running_id)
        assert rc == 0 and ("job %s: running" % running_id) in out, out
        # an unknown id says what to do
        rc, out = status(env, "--rdzv-id", "nosuch")
        assert rc == 1 and "no job nosuch on this node" in out, out

        # the gate opens: the job finishes and stays listed, with exit 0
        open(gate, "w").close()
        assert b.wait(60) == 0, b.output()
        r = jobs(env)[running_id]
        assert r["state"] == "finished" and r["exit_code"] == 0, r

        # an agent killed with SIGKILL cannot say how its job ended: gone
        os.unlink(gate)
        c = lt.launch(["--standalone", "--nproc-per-node", "1", "--no-python",
                       "/bin/sh", "-c",
                       "while [ ! -e %s ]; do sleep 0.05; done" % gate],
                      env={"XDG_RUNTIME_DIR": run}, name="killed")
        procs.append(c)
        lt.wait_until(lambda: any(x["pid"] == c.pid and x["state"] == "running"
                                  for x in jobs(env).values()), 30,
                      "the third job in the registry")
        c.signal(signal.SIGKILL)
        c.wait(30)
        lt.wait_until(lambda: any(x["pid"] == c.pid and x["state"] == "gone"
                                  for x in jobs(env).values()), 30,
                      "the killed agent's job shown as gone")

        # an ended job is forgotten ten minutes after its end: its file goes
        reg = os.path.join(run, "launch")
        f = [n for n in os.listdir(reg) if n.startswith(running_id)][0]
        with open(os.path.join(reg, f)) as fh:
            rec = json.load(fh)
        rec["ended"] = int(time.time()) - 601
        with open(os.path.join(reg, f), "w") as fh:
            json.dump(rec, fh)
        assert running_id not in jobs(env)
        assert not os.path.exists(os.path.join(reg, f)), os.listdir(reg)
        # a file that is not one of ours is left alone, and not listed
        with open(os.path.join(reg, "other.json"), "w") as fh:
            fh.write("{not json")
        assert "other" not in jobs(env)
        assert os.path.exists(os.path.join(reg, "other.json"))

        # a runtime directory others may write is not used
        os.chmod(reg, 0o777)
        rc, out = status(env)
        assert rc == 1 and "cannot read this node's job registry" in out, out
        os.chmod(reg, 0o700)
        print("status list: running, failed (exit 3), finished, gone; "
              "--rdzv-id alone; forgotten after ten minutes")
    finally:
        for p in procs:
            p.kill()
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
