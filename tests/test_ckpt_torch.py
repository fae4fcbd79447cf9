"""A PyTorch 1.13 DDP trainer (CPU, gloo: tests/py/ddp_ckpt.py) under launch
--ckpt-dir, saving with torch.save in the Hugging Face Trainer's layout and
in launch's (completion files, committed by the agent). Rank 1 is SIGKILLed
at step 7 after the save of step 6; the job restarts, the agents agree on
step 6, the trainer resumes from it (LAUNCH_RESUME_STEP) and ends with the
parameters of an uninterrupted run."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINER = os.path.join(HERE, "py", "ddp_ckpt.py")
PY = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")


def run(d, layout, ck, out, die_at=None):
    args = ["--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
            "--stop-timeout", "5"]
    if ck:
        args += ["--ckpt-dir", ck, "--ckpt-layout", layout]
    args += ["--no-python", PY, TRAINER, layout, ck or d, "10", "2", out]
    if die_at:
        args.append(str(die_at))
    a = lt.launch(args, name="ddp-" + layout)
    try:
        rc = a.wait(300)
        assert rc == 0, "exit %d\n%s" % (rc, a.output())
        return a.output()
    finally:
        a.kill()


def main():
    lt.need_torch()
    import torch
    os.environ.pop("LAUNCH_RESUME_STEP", None)
    os.environ.pop("LAUNCH_CKPT_DIR", None)
    d = tempfile.mkdtemp(prefix="launch-ckpt-torch-")
    try:
        ref = os.path.join(d, "ref.pt")
        run(d, "launch", None, ref)
        want = torch.load(ref)
        for layout in ("launch", "hf"):
            ck = os.path.join(d, "ck-" + layout)
            out = os.path.join(d, "out-%s.pt" % layout)
            log = run(d, layout, ck, out, die_at=7)
            assert "resuming from checkpoint step 6 of" in log, log
            assert "ddp_ckpt: resumed from step 6" in log, log
            got = torch.load(out)
            for k in want:
                assert torch.equal(want[k], got[k]), (layout, k, log)
            names = sorted(os.listdir(ck))
            if layout == "launch":
                assert "step-8" in names and "latest" in names, names
                assert os.path.exists(os.path.join(ck, "step-8", "manifest.json")), \
                    "the agent did not commit step 8: %s\n%s" % (names, log)
            print("%s layout: killed at step 7, resumed from step 6, final "
                  "parameters equal an uninterrupted run's" % layout)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("test_ckpt_torch: ok")


if __name__ == "__main__":
    main()
