#!/usr/bin/env python3
"""DCP saved again into a directory that already holds a complete
checkpoint (the same step-N saved twice, or dcp.save to one fixed path),
with current PyTorch (scripts/venv.sh), 2 gloo ranks under launch
(tests/py/dcp_resave.py).

DCP reopens every __R_I.distcp with O_TRUNC and replaces .metadata last.
A save killed in between leaves the old .metadata naming data files some
of which are the new save's, as long as before: launch called that step
complete and resumed from it, and dcp.load loads the mix without a word
(w0 from the first save, w1 from the second). Now:

  torn        rank 1 wrote its new __1_0.distcp, rank 0 died before its
              own: incomplete, naming __1_0.distcp; DCP indeed loads a mix
  torn-nocoll the same with use_collectives=False (__1.metadata old)
  tmp         the coordinator died after writing .metadata.tmp, before
              replacing .metadata (no gap: caught without clocks)
  trunc       rank 1 killed inside its new 16 MiB data file (cut short:
              caught by its size before, too)
  resave, async (dcp.async_save), nocoll: both saves complete: complete,
              resume step-4, and DCP loads the second save
  resume      launch --ckpt-dir over step-2 (complete) and a torn step-4:
              the workers get LAUNCH_RESUME_STEP=2 and launch names the file

Skips (77) without the venv. GAP (seconds between the two saves, default
3) must exceed launch's 2 s allowance for clocks."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "py"))
import launchtest as lt  # noqa: E402
from test_ckpt_real import venv_python  # noqa: E402

WORKER = os.path.join(HERE, "py", "dcp_resave.py")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(py, mode, d, out, ckdir=None, gap=None):
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, PYTHONWARNINGS="ignore", CUDA_VISIBLE_DEVICES="")
    if gap is not None:
        env["GAP"] = str(gap)
    for k in ("LAUNCH_RESUME_STEP", "LAUNCH_CKPT_DIR"):
        env.pop(k, None)
    args = ["--standalone", "--nproc-per-node", "2", "--max-restarts", "0",
            "--stop-timeout", "5"]
    if ckdir:
        args += ["--ckpt-dir", ckdir]
    return lt.launch_wait(args + ["--no-python", py, WORKER, mode, d, out],
                          env=env, name="%s-%s" % (mode, os.path.basename(out)),
                          timeout=180)


def verify(root):
    p = subprocess.run([lt.launch_bin(), "ckpt", "verify", root, "--json"],
                       capture_output=True, text=True, timeout=60)
    try:
        return p.returncode, json.loads(p.stdout)
    except ValueError:
        fail("ckpt verify %s: not JSON: %s %s" % (root, p.stdout, p.stderr))


def step(rep, name):
    for s in rep["steps"]:
        if s["name"] == name:
            return s
    fail("no %s in %s" % (name, rep))


def saved(py, tmp, mode, gap=None):
    """ROOT/step-4 saved twice by MODE; RET (root, launch's output)."""
    root = os.path.join(tmp, mode)
    out = os.path.join(tmp, mode + "-out")
    rc, log = run(py, mode, os.path.join(root, "step-4"), out, gap=gap)
    if not os.path.exists(os.path.join(out, "saved-1")):
        fail("%s: the first save did not complete (exit %d)\n%s" % (mode, rc, log[-6000:]))
    return root, rc, log


def load(py, tmp, d, name):
    out = os.path.join(tmp, name + "-load")
    rc, log = run(py, "load", d, out)
    p = os.path.join(out, "load.json")
    if rc != 0 or not os.path.exists(p):
        fail("%s: dcp.load exited %d\n%s" % (name, rc, log[-6000:]))
    with open(p) as f:
        return json.load(f)


def incomplete(py, tmp, mode, want, gap=None):
    root, rc, log = saved(py, tmp, mode, gap)
    if rc == 0:
        fail("%s: the second save was not killed\n%s" % (mode, log[-6000:]))
    vrc, rep = verify(root)
    s = step(rep, "step-4")
    if vrc != 1 or s["state"] != "incomplete" or want not in (s["problem"] or ""):
        fail("%s: a save into step-4 cut short: verify exit %d, %s (wanted incomplete, "
             "naming '%s'); files %s" % (mode, vrc, s, want,
                                          sorted(os.listdir(os.path.join(root, "step-4")))))
    print("ok: %s: step-4 %s: %s" % (mode, s["state"], s["problem"]))
    return root


def complete(py, tmp, mode):
    root, rc, log = saved(py, tmp, mode)
    if rc != 0:
        fail("%s: exit %d\n%s" % (mode, rc, log[-6000:]))
    vrc, rep = verify(root)
    s = step(rep, "step-4")
    if vrc != 0 or s["state"] != "complete" or (rep["resume"] or {}).get("name") != "step-4":
        fail("%s: two complete saves into step-4: verify exit %d, %s" % (mode, vrc, rep))
    if mode != "nocoll":
        got = load(py, tmp, os.path.join(root, "step-4"), mode)
        if got != {"w0": [2.0], "w1": [2.0]}:
            fail("%s: DCP loaded %s, not the second save" % (mode, got))
    print("ok: %s: saved twice into step-4: complete, resume step-4" % mode)


def main():
    if not os.path.exists(lt.launch_bin()):
        lt.skip("no launch binary at " + lt.launch_bin())
    py = venv_python()
    tmp = tempfile.mkdtemp(prefix="launch-ckpt-resave-")
    try:
        root = incomplete(py, tmp, "torn", "__1_0.distcp: modified")
        got = load(py, tmp, os.path.join(root, "step-4"), "torn")
        if got != {"w0": [1.0], "w1": [2.0]}:
            fail("torn: DCP loaded %s (the hazard this test is about: a mix of "
                 "w0 of the first save and w1 of the second)" % got)
        print("ok: torn: dcp.load takes it without a word: w0 %s, w1 %s" % (got["w0"], got["w1"]))
        incomplete(py, tmp, "torn-nocoll", "__1_0.distcp: modified")
        incomplete(py, tmp, "tmp", ".metadata.tmp", gap=0)
        incomplete(py, tmp, "trunc", ".distcp")
        for mode in ("resave", "async", "nocoll"):
            complete(py, tmp, mode)

        # The agent's resume: step-2 complete, step-4 torn, in one root.
        root = os.path.join(tmp, "agent")
        rc, log = run(py, "resave", os.path.join(root, "step-2"), os.path.join(tmp, "a2"))
        if rc != 0:
            fail("agent: saving step-2 exited %d\n%s" % (rc, log[-6000:]))
        rc, log = run(py, "torn", os.path.join(root, "step-4"), os.path.join(tmp, "a4"))
        out = os.path.join(tmp, "a-resume")
        rc, log = run(py, "resume", os.path.join(root, "unused"), out, ckdir=root)
        p = os.path.join(out, "resume.json")
        if rc != 0 or not os.path.exists(p):
            fail("agent: exit %d\n%s" % (rc, log[-6000:]))
        with open(p) as f:
            got = json.load(f)["resume"]
        if got != "2" or "__1_0.distcp: modified" not in log:
            fail("agent: a torn step-4 beside a complete step-2: LAUNCH_RESUME_STEP=%s "
                 "(wanted 2, and the file named)\n%s" % (got, log[-6000:]))
        print("ok: resume: LAUNCH_RESUME_STEP=2 past the torn step-4")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
