"""A PyTorch job that fails once comes back, on the default store.

Issue #22: since PyTorch 2.5 a worker's TCPStore keys carry no per-attempt
prefix (torchrun gives every retry a fresh store), so a restarted gloo job
read round 0's peer addresses from launch's server and failed ("Gloo
connectFullMesh failed ... Connection refused") or hung. Every round's
TCPStore clients now get a namespace of their own (docs/protocol.md#tcpstore-namespaces).

For Debian's PyTorch 1.13 and current PyTorch from PyPI (scripts/venv.sh):
LAUNCH_RESTART_TRIALS (default 10) runs of a 2-rank gloo DDP job whose rank 1
exits 1 in round 0, under `launch --standalone --max-restarts 1` with the
default --torch-store agent. Every run must exit 0 with both ranks done in
round 1 and the same parameters on both ranks. Before the fix about half
the runs failed: 10 trials miss that with a chance of 0.5^10 (0.1 %), in
half the time of the 20 this test ran before (CI's pass must stay under 30
minutes); LAUNCH_RESTART_TRIALS=100 for a longer look.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "py", "ddp_restart.py")
TRIALS = int(os.environ.get("LAUNCH_RESTART_TRIALS", "10"))


def pythons():
    out = []
    if subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed"],
                      capture_output=True).returncode == 0:
        out.append(("debian", "/usr/bin/python3"))
    venv = os.environ.get("LAUNCH_VENV")
    if venv and os.access(os.path.join(venv, "bin", "python"), os.X_OK):
        out.append(("pypi", os.path.join(venv, "bin", "python")))
    else:
        print("note: no current PyTorch (LAUNCH_VENV unset; scripts/venv.sh "
              "builds it): only Debian's is tested")
    return out


def trial(py, n):
    d = tempfile.mkdtemp(prefix="launch-torchrestart-")
    try:
        # launch's run directory goes under d too, removed with it
        env = dict(os.environ, PYTHON_EXEC=py, OMP_NUM_THREADS="1", TMPDIR=d)
        t0 = time.time()
        p = subprocess.run(
            [lt.launch_bin(), "--standalone", "--nproc-per-node", "2",
             "--max-restarts", "1", WORKER, d],
            env=env, capture_output=True, text=True, timeout=240)
        dt = time.time() - t0
        done = sorted(f for f in os.listdir(d) if f.startswith("done."))
        vals = {}
        for f in done:
            with open(os.path.join(d, f)) as fh:
                vals[f] = fh.read().split()
        ok = (p.returncode == 0 and done == ["done.0.1", "done.1.1"] and
              vals["done.0.1"][0] == vals["done.1.1"][0] and
              float(vals["done.0.1"][1]) == 1.0)
        if not ok:
            print("trial %d FAILED (exit %d, %.1f s, files %s %s)\n%s\n%s" %
                  (n, p.returncode, dt, done, vals, p.stdout[-3000:],
                   p.stderr[-6000:]))
        return ok, dt, (vals.get("done.0.1") or ["", "", "?"])[2]
    finally:
        shutil.rmtree(d)  # ours, from mkdtemp


def main():
    pys = pythons()
    if not pys:
        lt.skip("no PyTorch: neither Debian's python3-torch nor scripts/venv.sh")
    failed = 0
    for name, py in pys:
        times, version = [], "?"
        bad = 0
        for n in range(TRIALS):
            ok, dt, version = trial(py, n)
            times.append(dt)
            bad += not ok
        print("%s PyTorch %s: %d of %d restarts came back (median %.1f s a run)"
              % (name, version, TRIALS - bad, TRIALS,
                 sorted(times)[len(times) // 2]))
        failed += bad
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
