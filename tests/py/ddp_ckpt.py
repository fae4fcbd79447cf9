"""A PyTorch DDP trainer (CPU, gloo) that checkpoints with torch.save and
resumes from the step launch agreed on (LAUNCH_RESUME_STEP), in one of two
layouts (docs/checkpoints.md):

  hf      checkpoint-N/ as the Hugging Face Trainer writes it: rank 0 saves
          pytorch_model.bin, optimizer.pt, scheduler.pt, every rank its
          rng_state_R.pth, and rank 0 trainer_state.json last
  launch  step-N/rank-R.bin and the completion file rank-R.done; the agent
          commits the step

usage: ddp_ckpt.py LAYOUT DIR STEPS EVERY OUT [DIE_AT]
DIE_AT: in round 0, rank 1 SIGKILLs itself at the start of that step.
OUT: rank 0 writes the final parameters there (torch.save of the state).
"""
import hashlib
import json
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def atomic_write(path, write):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_launch(d, step, rank, state):
    """The shard, then its completion file (docs/checkpoints.md)."""
    sd = os.path.join(d, "step-%d" % step)
    os.makedirs(sd, exist_ok=True)
    shard = os.path.join(sd, "rank-%d.bin" % rank)
    atomic_write(shard, lambda f: torch.save(state, f))
    with open(shard, "rb") as f:
        data = f.read()
    done = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "replicated": True}
    atomic_write(os.path.join(sd, "rank-%d.done" % rank),
                 lambda f: f.write(json.dumps(done).encode()))


def save_hf(d, step, rank, model, opt, sched):
    sd = os.path.join(d, "checkpoint-%d" % step)
    os.makedirs(sd, exist_ok=True)
    atomic_write(os.path.join(sd, "rng_state_%d.pth" % rank),
                 lambda f: torch.save({"cpu": torch.get_rng_state()}, f))
    dist.barrier()
    if rank == 0:
        atomic_write(os.path.join(sd, "pytorch_model.bin"),
                     lambda f: torch.save(model.state_dict(), f))
        atomic_write(os.path.join(sd, "optimizer.pt"),
                     lambda f: torch.save(opt.state_dict(), f))
        atomic_write(os.path.join(sd, "scheduler.pt"),
                     lambda f: torch.save(sched.state_dict(), f))
        atomic_write(os.path.join(sd, "trainer_state.json"),
                     lambda f: f.write(json.dumps({"global_step": step}).encode()))
    dist.barrier()


def load(layout, d, step, rank, model, opt, sched):
    if layout == "launch":
        st = torch.load(os.path.join(d, "step-%d" % step, "rank-%d.bin" % rank))
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        sched.load_state_dict(st["sched"])
        torch.set_rng_state(st["rng"])
    else:
        sd = os.path.join(d, "checkpoint-%d" % step)
        model.load_state_dict(torch.load(os.path.join(sd, "pytorch_model.bin")))
        opt.load_state_dict(torch.load(os.path.join(sd, "optimizer.pt")))
        sched.load_state_dict(torch.load(os.path.join(sd, "scheduler.pt")))
        torch.set_rng_state(torch.load(
            os.path.join(sd, "rng_state_%d.pth" % rank))["cpu"])


def main():
    layout, d, steps, every, out = sys.argv[1:6]
    steps, every = int(steps), int(every)
    die_at = int(sys.argv[6]) if len(sys.argv) > 6 else -1
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    torch.manual_seed(1000 + rank)  # the data order: part of the RNG state
    start = 0
    resume = os.environ.get("LAUNCH_RESUME_STEP", "")
    if resume:
        start = int(resume)
        load(layout, d, start, rank, model, opt, sched)
        if rank == 0:
            print("ddp_ckpt: resumed from step %d" % start, flush=True)
    ddp = DDP(model)
    for step in range(start + 1, steps + 1):
        if die_at > 0 and step == die_at and os.environ.get("LAUNCH_ROUND") == "0":
            # Every rank has saved the step before (at the end of the last
            # iteration) before rank 1 dies: otherwise the agent stops
            # rank 0 in the middle of its save when rank 1 is faster, and
            # that step is rightly not resumed from.
            dist.barrier()
            if rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
        x = torch.randn(8, 16)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % every == 0 and step < steps:
            if layout == "launch":
                save_launch(d, step, rank, {"model": model.state_dict(),
                                            "opt": opt.state_dict(),
                                            "sched": sched.state_dict(),
                                            "rng": torch.get_rng_state()})
            else:
                save_hf(d, step, rank, model, opt, sched)
    if rank == 0:
        torch.save(model.state_dict(), out)
        print("ddp_ckpt: done, loss %.6f" % loss.item(), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
