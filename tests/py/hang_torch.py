"""A PyTorch trainer for tests/test_hang.py: reports progress through
examples/torch_progress.py's TCPStore key; in round 0, rank 1 stops
reporting after step 3 (sleeps: hung). faulthandler dumps its stack on
SIGUSR1. Writes DIR/done.<round>.<rank> at the end."""
import faulthandler
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "examples"))
from torch_progress import progress_reporter  # noqa: E402

faulthandler.register(signal.SIGUSR1)
d = sys.argv[1]
rnd, rank = int(os.environ["LAUNCH_ROUND"]), int(os.environ["RANK"])
report = progress_reporter()
for step in range(1, 31):
    if rnd == 0 and rank == 1 and step == 4:
        time.sleep(600)  # hung: no more progress
    report(step)
    time.sleep(0.1)
with open(os.path.join(d, "done.%d.%d" % (rnd, rank)), "w"):
    pass
