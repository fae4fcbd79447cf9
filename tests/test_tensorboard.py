"""train_gpt --tb-dir (runtime/tb.c): TensorBoard event files, read back by
the `tensorboard` package's own event reader (the cached virtual
environment's, scripts/venv.sh; skipped without it). A run of 10 steps that
saves step 5, then a resume from step 5: two files, each starting with the
file version; the first holds steps 1-10, the resumed one goes on at step 6;
every loss, lr and grad norm is the one train_gpt printed for its step;
val_loss at the validation steps; TensorBoard's EventAccumulator lists the
tags. The reader checks the TFRecord CRCs. Skips when train_gpt was built
without protobuf-c."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

BIN = os.path.dirname(os.path.abspath(lt.launch_bin()))
TRAIN = os.path.join(BIN, "train_gpt")
PYS = [os.environ.get("LAUNCH_TB_PYTHON", ""), "/var/cache/launch/venv/bin/python",
       "/usr/bin/python3"]
READER = r"""
import json, sys
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
out = {"files": []}
for f in sys.argv[2:]:
    # the legacy loader: the events as written (the newer one converts
    # simple_value into tensors)
    evs = list(event_file_loader.LegacyEventFileLoader(f).Load())
    out["files"].append({
        "version": evs[0].file_version,
        "scalars": [(e.step, v.tag, v.simple_value) for e in evs[1:]
                    for v in e.summary.value]})
ea = EventAccumulator(sys.argv[1])
ea.Reload()
out["tags"] = sorted(ea.Tags()["scalars"])
print(json.dumps(out))
"""


def printed(text):
    """{step: (loss, norm, lr)} of train_gpt's step lines."""
    return dict((int(m.group(1)), (float(m.group(2)), float(m.group(3)),
                                   float(m.group(4))))
                for m in re.finditer(r"step +(\d+)/\d+ \| loss ([\d.]+) \| "
                                     r"norm ([\d.]+) \| lr ([\d.e+-]+)", text))


def main():
    py = next((p for p in PYS if p and os.path.exists(p) and subprocess.run(
        [p, "-c", "import tensorboard"], capture_output=True).returncode == 0),
        None)
    if py is None:
        lt.skip("no Python with the tensorboard package (scripts/venv.sh)")
    d = tempfile.mkdtemp(prefix="launch-tb-")
    try:
        tb, ck = os.path.join(d, "tb"), os.path.join(d, "ck")
        m = [TRAIN, "--preset", "tiny", "--val-batches", "1", "--threads",
             "1", "--steps", "10", "--val-every", "5", "--ckpt-dir", ck,
             "--tb-dir", tb]
        env = {"RANK": "", "WORLD_SIZE": "", "LAUNCH_RESUME_STEP": ""}
        p = lt.Proc(m + ["--ckpt-every", "5"], env=env, name="first")
        rc = p.wait(300)
        out1 = p.output()
        if rc == 2 and "built without protobuf-c" in out1:
            lt.skip("train_gpt was built without protobuf-c")
        assert rc == 0, out1
        p = lt.Proc(m, env=dict(env, LAUNCH_RESUME_STEP="5"), name="resumed")
        assert p.wait(300) == 0, p.output()
        out2 = p.output()
        assert "resumed from step 5" in out2, out2
        # the first run's file, then the resumed one's
        files = sorted(glob.glob(os.path.join(tb, "events.out.tfevents.*")),
                       key=os.path.getmtime)
        assert len(files) == 2, files
        r = subprocess.run([py, "-c", READER, tb] + files,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["tags"] == ["grad_norm", "loss", "lr", "tokens_per_s",
                               "val_loss"], got["tags"]
        for f, text, first in zip(got["files"], (out1, out2), (1, 6)):
            assert f["version"] == "brain.Event:2", f["version"]
            said = printed(text)
            steps = sorted({s for s, tag, v in f["scalars"] if tag == "loss"})
            assert steps == list(range(first, 11)), steps
            for s, tag, v in f["scalars"]:
                if tag in ("loss", "grad_norm", "lr"):
                    want = said[s][("loss", "grad_norm", "lr").index(tag)]
                    tol = 1e-5 if tag == "loss" else (1e-4 if tag ==
                                                       "grad_norm" else
                                                       want * 1e-2)
                    assert abs(v - want) <= tol, (s, tag, v, want)
            vals = sorted(s for s, tag, v in f["scalars"] if tag == "val_loss")
            assert vals == ([5, 10] if first == 1 else [10]), vals
        print("tensorboard: 2 files read by tensorboard's reader (%s); "
              "resumed file starts at step 6; losses as printed" % py)
    finally:
        shutil.rmtree(d)
    print("test_tensorboard: ok")


if __name__ == "__main__":
    main()
