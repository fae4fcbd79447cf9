"""A PyTorch trainer for tests/test_py_progress.py: each rank reports steps
1-20 in a burst through a Reporter with min_interval=60 (so every step
after the first report is held). Rank 0 ends its `with` block, then waits
for DIR/go; rank 1 just exits: the exit sends its step 20."""
import os
import sys
import time

import launch_progress as lp

d = sys.argv[1]
assert lp.__file__.startswith(os.environ["LP_SITE"]), lp.__file__
rank = int(os.environ["RANK"])


def burst(report):
    for step in range(1, 21):
        report(step, loss=1.0 / step + rank, total_steps=20)
        time.sleep(0.01)


if rank == 0:
    with lp.Reporter(min_interval=60) as report:
        burst(report)
    open(os.path.join(d, "reported.0"), "w").close()
    while not os.path.exists(os.path.join(d, "go")):
        time.sleep(0.05)
else:
    burst(lp.Reporter(min_interval=60))
