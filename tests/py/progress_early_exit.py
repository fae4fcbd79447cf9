"""A trainer for tests/test_metrics_done.py: rank 1 reports a few steps,
its last one (step 4) right before it exits 0; rank 0 reports on (saving the final model, say) until DIR/go
exists."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "python"))
import launch_progress as lp  # noqa: E402

d = sys.argv[1]
rank = int(os.environ["RANK"])
report = lp.Reporter()
step = 0
for step in range(1, 4):
    report(step, loss=1.0 / step, step_time=0.1)
    time.sleep(0.5)  # read by the agent (once a second) before the exit
if rank == 1:
    report(4, loss=0.25, step_time=0.1)
    os._exit(0)  # at once: no time for the agent's next read
while rank == 0 and not os.path.exists(os.path.join(d, "go")):
    step += 1
    report(step, loss=1.0 / step, step_time=0.1)
    time.sleep(0.1)
