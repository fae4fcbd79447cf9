#!/usr/bin/env python3
"""2 gloo ranks under launch that save a DCP checkpoint into a directory
already holding one (a step-N saved again; dcp.save to one fixed path),
for tests/test_ckpt_real_resave.py, with the venv's current PyTorch.

  dcp_resave.py MODE DIR OUT

Every mode saves {"wR": tensor of 1.0} from rank R into DIR, waits GAP
seconds (environment, default 3: longer than the 2 s launch allows for
clocks) and saves {"wR": tensor of 2.0} into the same DIR:

  resave      the second save completes
  async       both with dcp.async_save (waited for)
  nocoll      both with use_collectives=False (one __R.metadata per rank)
  torn        inside the second save rank 1 writes its data file and rank 0
              is SIGKILLed before writing its own (DCP's coordinator: no new
              .metadata): the old .metadata, __0_0 old, __1_0 new
  torn-nocoll the same without collectives: rank 1 killed after its data
              file, before its __1.metadata
  tmp         (GAP 0) rank 0 killed inside finish() after writing
              .metadata.tmp, before replacing .metadata
  trunc       N large; rank 1 killed inside its new data file (after a
              write that took it past 1 MiB: the tensor's bytes, not
              torch.save's zip directory after them)
  load        loads w0 and w1 from DIR; rank 0 writes OUT/load.json
              {"w0": [values], "w1": [values]}
  resume      rank 0 writes OUT/resume.json {"resume": LAUNCH_RESUME_STEP}

OUT/saved-1 is written once the first save completed on every rank."""
import contextlib
import json
import os
import signal
import sys
import time

MODE, D, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
GAP = float(os.environ.get("GAP", "3"))
N = 4 << 20 if MODE == "trunc" else 1000

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint import FileSystemWriter  # noqa: E402


def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def marker(name):
    with open(os.path.join(OUT, name), "w"):
        pass


def wait_marker(name):
    p = os.path.join(OUT, name)
    for _ in range(6000):
        if os.path.exists(p):
            return
        time.sleep(0.01)
    raise SystemExit("no %s in 60 s" % p)


class TornWriter(FileSystemWriter):
    """Rank 1 writes its data file, then rank 0 dies before writing its
    own; rank 1 waits in DCP's collective until launch ends it (nocoll:
    it dies before writing its metadata)."""

    def write_data(self, plan, planner):
        r = dist.get_rank()
        if r == 0:
            wait_marker("rank1-wrote")
            die()
        fut = super().write_data(plan, planner)
        fut.wait()
        marker("rank1-wrote")
        if MODE == "torn-nocoll":
            time.sleep(30)  # rank 0's death ends it through launch
            die()
        return fut


class TmpWriter(FileSystemWriter):
    """Rank 0 (the coordinator) dies after .metadata.tmp, before it
    removes .metadata to rename the temp file over it."""

    def finish(self, metadata, results):
        self.fs.rm_file = lambda path: die()
        super().finish(metadata, results)


class CutStream:
    def __init__(self, f):
        self.f, self.n = f, 0

    def write(self, b):
        k = self.f.write(b)
        self.n += len(b)
        if self.n > 1 << 20:
            self.f.flush()
            die()
        return k

    def __getattr__(self, name):
        return getattr(self.f, name)


class TruncWriter(FileSystemWriter):
    """Rank 1 dies once 1 MiB of its new data file is written."""

    def write_data(self, plan, planner):
        if dist.get_rank() == 1:
            orig = self.fs.create_stream

            @contextlib.contextmanager
            def cut(path, mode):
                with orig(path, mode) as f:
                    yield CutStream(f)
            self.fs.create_stream = cut
        return super().write_data(plan, planner)


def main():
    dist.init_process_group("gloo")
    r = dist.get_rank()
    if MODE == "load":
        st = {"w0": torch.zeros(N), "w1": torch.zeros(N)}
        dcp.load(st, checkpoint_id=D)
        if r == 0:
            with open(os.path.join(OUT, "load.json"), "w") as f:
                json.dump({k: sorted(set(v.tolist())) for k, v in st.items()}, f)
        return
    if MODE == "resume":
        if r == 0:
            with open(os.path.join(OUT, "resume.json"), "w") as f:
                json.dump({"resume": os.environ.get("LAUNCH_RESUME_STEP")}, f)
        return
    nocoll = MODE in ("nocoll", "torn-nocoll")
    kw = {"use_collectives": False} if nocoll else {}
    dcp.save({"w%d" % r: torch.full((N,), 1.0)}, checkpoint_id=D, **kw)
    dist.barrier()
    if r == 0:
        marker("saved-1")
    time.sleep(GAP)
    st = {"w%d" % r: torch.full((N,), 2.0)}
    if MODE == "async":
        dcp.async_save(st, checkpoint_id=D).result()
    elif MODE in ("resave", "nocoll"):
        dcp.save(st, checkpoint_id=D, **kw)
    else:
        w = {"torn": TornWriter, "torn-nocoll": TornWriter, "tmp": TmpWriter,
             "trunc": TruncWriter}[MODE](D)
        dcp.save(st, storage_writer=w, **kw)
    dist.barrier()


if __name__ == "__main__":
    main()
    # As tests/py/real_ckpt.py: leave without the interpreter's
    # finalization, where gloo's threads can abort the process.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
