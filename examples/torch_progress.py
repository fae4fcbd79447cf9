"""Progress reports from a PyTorch trainer for launch (hang detection with
`launch --hang-timeout S`, docs/launcher.md#hangs; the scalars in metrics,
events and `launch status`, docs/events.md#progress): each step sets the
job's store key launch/progress/<RANK> to one msgpack map
{step, time_ms, loss, grad_norm, lr, step_time, tokens, total_steps, tag}
(only the scalars given), or to "<step> <unix time in ms> <tag>" when none
are given; the tag is the worker's LAUNCH_PROGRESS_TAG, the agent's secret
without which a value never arms hang detection.
LAUNCH_RDZV_ENDPOINT is launch's server, which speaks TCPStore; under the
default --torch-store agent it is also MASTER_ADDR:MASTER_PORT.

    launch --standalone --nproc-per-node 2 --hang-timeout 60 examples/torch_progress.py

The encoder is launch_progress's (python/ in launch's tree, pip-installable),
which needs nothing but the standard library.
"""
import os
import sys
import time

# The reporter lives in launch's pure-Python package (pip install python/);
# from the source tree it is found next to this file.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
from launch_progress import Reporter, encode_progress  # noqa: E402,F401


def progress_reporter():
    """report(step, **scalars) over the job's TCPStore (reports step 0 at
    once)."""
    return Reporter()


if __name__ == "__main__":
    report = progress_reporter()
    steps = int(os.environ.get("STEPS", "20"))
    for step in range(1, steps + 1):
        t0 = time.time()
        time.sleep(0.1)  # forward, backward, optimizer step
        # once a step, or about once a second when steps are short
        report(step, loss=4.0 / step, lr=3e-4, step_time=time.time() - t0,
               tokens=8192, total_steps=steps)
