"""A plain gloo DDP trainer that fails once: what a PyTorch user restarts.

    ddp_restart.py OUTDIR [STEPS] [BACKEND]

Every rank joins the default process group the usual way (env://, from the
variables launch sets), trains a small DDP model for STEPS steps and, in the
first round (LAUNCH_ROUND 0), rank 1 exits 1 after step 2: the agent
restarts the job. The next round must form its process group again through
the same server: with PyTorch >= 2.5 (no per-attempt prefix) a store that
still held round 0's keys sent it to round 0's dead peers. Writes
OUTDIR/done.<RANK>.<ROUND> with the final parameters' sum when it finishes.
BACKEND is gloo (default) or nccl (one GPU a rank, LOCAL_RANK's; a 1-rank
job fails in round 0 instead of rank 1).
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist

outdir = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
backend = sys.argv[3] if len(sys.argv) > 3 else "gloo"
rnd = int(os.environ["LAUNCH_ROUND"])
dev = torch.device("cpu")
if backend == "nccl":
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
failer = 1 if dist.get_world_size() > 1 else 0
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Linear(8, 4).to(dev), device_ids=[dev.index] if dev.index is not None else None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1234 + rank)
for step in range(1, steps + 1):
    x = torch.randn(16, 8, generator=g).to(dev)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rnd == 0 and rank == failer and step == 2:
        sys.stdout.flush()
        os._exit(1)
# One more collective after the loop: every rank is still connected.
t = torch.tensor([float(rank)], device=dev)
dist.all_reduce(t)
total = sum(float(p.sum()) for p in model.parameters())
with open(os.path.join(outdir, "done.%d.%d" % (rank, rnd)), "w") as f:
    f.write("%r %r %s\n" % (total, float(t), torch.__version__))
# Leave without gloo's teardown: with PyTorch 2.15 a rank that tears its
# pairs down while its peer is still tearing down aborts now and then
# ("terminate called without an active exception", 2 runs in 20 under
# load, after both ranks had finished): a race inside PyTorch, with or
# without a launcher, that this test is not about.
dist.barrier()
sys.stdout.flush()
os._exit(0)
