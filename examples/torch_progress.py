"""Progress reports from a PyTorch trainer for launch's hang detection
(`launch --hang-timeout S`, docs/launcher.md#hangs): each step sets the
job's store key launch/progress/<RANK> to "<step> <unix time in ms>
<LAUNCH_PROGRESS_TAG>".
LAUNCH_RDZV_ENDPOINT is launch's server, which speaks TCPStore; under the
default --torch-store agent it is also MASTER_ADDR:MASTER_PORT.

    launch --standalone --nproc-per-node 2 --hang-timeout 60 examples/torch_progress.py
"""
import os
import time

import torch.distributed as dist


def progress_reporter():
    host, port = os.environ["LAUNCH_RDZV_ENDPOINT"].rsplit(":", 1)
    store = dist.TCPStore(host.strip("[]"), int(port), is_master=False)
    key = "launch/progress/" + os.environ["RANK"]
    # The agent's secret for this worker: without it a value cannot arm
    # hang detection (something else could have written it).
    tag = os.environ.get("LAUNCH_PROGRESS_TAG", "")
    tag = " " + tag if tag else ""
    return lambda step: store.set(key, "%d %d%s" % (step, time.time() * 1000, tag))


if __name__ == "__main__":
    report = progress_reporter()
    for step in range(1, int(os.environ.get("STEPS", "20")) + 1):
        time.sleep(0.1)  # forward, backward, optimizer step
        report(step)  # once a step, or about once a second when steps are short
