"""A trainer that uses launch_progress (python/, docs/events.md#progress)
runs without launch too: under plain python or torchrun (no
LAUNCH_RDZV_ENDPOINT) Reporter() warns once and reports nothing, instead
of ending the trainer with KeyError: 'LAUNCH_RDZV_ENDPOINT'."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "python")

TRAINER = r"""
import warnings
warnings.simplefilter("always")
import launch_progress as lp
report = lp.Reporter()
sent = [report(step, loss=1.0 / step, lr=1e-3) for step in range(1, 4)]
assert sent == [False, False, False], sent
print("trained 3 steps")
"""


def run(extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LAUNCH_") and k not in
           ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(extra)
    env["PYTHONPATH"] = SRC
    p = subprocess.run([sys.executable, "-c", TRAINER], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "trained 3 steps" in p.stdout, \
        (extra, p.stdout, p.stderr)
    # said once, why
    assert p.stderr.count("not started by launch") == 1, (extra, p.stderr)


def main():
    run({})  # python train.py
    # torchrun's environment: a rank, its store, no launch
    run({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2",
         "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
         "TORCHELASTIC_RUN_ID": "none"})
    print("test_py_progress_nolaunch: ok")


if __name__ == "__main__":
    main()
