"""A PyTorch trainer for tests/test_py_progress.py: reports 20 steps with
scalars through the installed launch_progress package (not the tree's),
then waits for DIR/go so that the test can read the reports, and checks
resume_step() and ckpt_dir()."""
import os
import sys
import time

import launch_progress as lp

d = sys.argv[1]
assert lp.__file__.startswith(os.environ["LP_SITE"]), lp.__file__
assert lp.resume_step() is None and lp.ckpt_dir() is None
rank = int(os.environ["RANK"])
report = lp.Reporter()
for step in range(1, 21):
    report(step, loss=10.0 / step + rank, lr=1e-3, grad_norm=0.5,
           step_time=0.01, tokens=123456789, total_steps=20)
    time.sleep(0.01)
with open(os.path.join(d, "reported.%d" % rank), "w"):
    pass
while not os.path.exists(os.path.join(d, "go")):
    time.sleep(0.05)
