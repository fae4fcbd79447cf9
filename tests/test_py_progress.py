"""launch's pure-Python package (python/launch_progress, docs/events.md
#progress): `pip install` accepts it (into a --target directory, offline,
no build isolation), and a PyTorch trainer that imports the installed copy
reports its step and scalars with one call; `launch status --json` then
shows them per rank; with min_interval, the last step of a burst held back
is still reported at the end of a `with` block and at the exit. Run with Debian's PyTorch 1.13 and with the cached
virtual environment's PyTorch 2.x (scripts/venv.sh) when it exists."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "python")
VENV = "/var/cache/launch/venv/bin/python"


def has_torch(py):
    return subprocess.run([py, "-c", "import torch.distributed"],
                          capture_output=True).returncode == 0


def one(py, d):
    site = os.path.join(d, "site")
    p = subprocess.run([py, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--no-index", "--no-build-isolation", "--target",
                        site, SRC], capture_output=True, text=True,
                       cwd=d)
    assert p.returncode == 0, p.stdout + p.stderr
    assert os.path.exists(os.path.join(site, "launch_progress",
                                       "__init__.py")), os.listdir(site)
    # the source tree's build/ and egg-info stay out of the checkout
    shutil.rmtree(os.path.join(SRC, "build"), ignore_errors=True)
    for e in os.listdir(SRC):
        if e.endswith(".egg-info"):
            shutil.rmtree(os.path.join(SRC, e))
    work = os.path.join(d, "work")
    os.mkdir(work)
    env = {"PYTHON_EXEC": py, "PYTHONPATH": site, "LP_SITE": site}
    with lt.Cleanup() as c:
        agent = c.add(lt.launch(["--standalone", "--nproc-per-node", "2",
                                 os.path.join(HERE, "py", "progress_torch.py"),
                                 work], env=env, name="agent"))
        lt.wait_until(lambda: all(os.path.exists(os.path.join(
            work, "reported.%d" % r)) for r in (0, 1)) or not agent.running(),
            120, "both ranks' reports")
        m = re.search(r"--rdzv-endpoint (\S+) --rdzv-id (\S+)\)",
                      agent.output())
        assert agent.running() and m, agent.output()
        st = lt.Proc([lt.launch_bin(), "status", "--json", "--rdzv-endpoint",
                      m.group(1), "--rdzv-id", m.group(2)], name="status")
        assert st.wait(30) == 0, st.output()
        ranks = json.loads(st.output())["ranks"]
        open(os.path.join(work, "go"), "w").close()
        assert agent.wait(60) == 0, agent.output()
    assert [r["rank"] for r in ranks] == [0, 1], ranks
    for r in ranks:
        assert r["step"] == 20 and r["total_steps"] == 20, r
        assert abs(r["loss"] - (0.5 + r["rank"])) < 1e-6, r
        assert r["lr"] == 1e-3 and r["grad_norm"] == 0.5, r
        # integers stay integers, every digit (not 1.23457e+08)
        assert r["step_time"] == 0.01 and r["tokens"] == 123456789, r
        assert type(r["tokens"]) is int and type(r["total_steps"]) is int, r
    flush(env, os.path.join(d, "flush"))


def status_ranks(agent):
    m = re.search(r"--rdzv-endpoint (\S+) --rdzv-id (\S+)\)", agent.output())
    assert agent.running() and m, agent.output()
    st = subprocess.run([lt.launch_bin(), "status", "--json",
                         "--rdzv-endpoint", m.group(1), "--rdzv-id",
                         m.group(2)], capture_output=True, text=True,
                        timeout=30)
    assert st.returncode == 0, st.stdout + st.stderr
    return {r["rank"]: r for r in json.loads(st.stdout)["ranks"]}


def flush(env, work):
    """min_interval=60 holds steps 2-20 of a burst: rank 0's `with` block
    and rank 1's exit send step 20 all the same."""
    os.mkdir(work)
    got = {}
    with lt.Cleanup() as c:
        agent = c.add(lt.launch(["--standalone", "--nproc-per-node", "2",
                                 os.path.join(HERE, "py", "progress_flush.py"),
                                 work], env=env, name="agent"))

        def both_at_20():
            if not agent.running():
                raise AssertionError("the agent ended:\n" + agent.output())
            if not os.path.exists(os.path.join(work, "reported.0")):
                return False
            got.update(status_ranks(agent))
            return all(got.get(r, {}).get("step") == 20 for r in (0, 1))
        try:
            lt.wait_until(both_at_20, 30, "step 20 of both ranks")
        except AssertionError:
            raise AssertionError("launch status: %s" % got)
        open(os.path.join(work, "go"), "w").close()
        assert agent.wait(60) == 0, agent.output()
    for r in (0, 1):
        assert abs(got[r]["loss"] - (0.05 + r)) < 1e-9, got[r]


def main():
    pythons = [py for py in ("/usr/bin/python3", VENV)
               if os.path.exists(py) and has_torch(py)]
    if not pythons:
        lt.skip("no Python with PyTorch (Debian's python3-torch, or "
                "scripts/venv.sh)")
    for py in pythons:
        d = tempfile.mkdtemp(prefix="launch-pyprog-")
        try:
            one(py, d)
            ver = subprocess.run([py, "-c", "import torch; print(torch."
                                  "__version__)"], capture_output=True,
                                 text=True).stdout.strip()
            print("%s (PyTorch %s): pip install python/, one call a step, "
                  "launch status shows the scalars" % (py, ver))
        finally:
            shutil.rmtree(d)
    print("test_py_progress: ok")


if __name__ == "__main__":
    main()
