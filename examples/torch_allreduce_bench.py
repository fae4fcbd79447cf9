"""PyTorch's own NCCL all-reduce, to compare with allreduce_check --bench on
the same GPUs. Run it under launch (workers then use launch's server as
their TCPStore: TORCHELASTIC_USE_AGENT_STORE=True) or under torchrun:

    launch --standalone --nproc-per-node 2 examples/torch_allreduce_bench.py 268435456 20

Rank 0 prints the NCCL init time (init_process_group with device_id, which
creates the communicator eagerly, plus the first collective) and the bus
bandwidth (algorithm bandwidth x 2(n-1)/n)."""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    nbytes = int(sys.argv[1]) if len(sys.argv) > 1 else 256 << 20
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    t0 = time.perf_counter()
    dist.init_process_group("nccl", device_id=dev)
    one = torch.ones(1, device=dev)
    dist.all_reduce(one)
    torch.cuda.synchronize()
    init_ms = (time.perf_counter() - t0) * 1e3
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.full((nbytes // 4,), float(rank + 1), device=dev)
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / iters
    algbw = x.numel() * 4 / dt / 1e9
    check = torch.tensor([float(rank + 1)], device=dev)
    dist.all_reduce(check)
    if rank == 0:
        print("torch_allreduce_bench bytes=%d iters=%d time_us=%.1f algbw_GBps=%.2f "
              "busbw_GBps=%.2f init_ms=%.1f torch=%s nccl=%s store=%s sum_ok=%s"
              % (x.numel() * 4, iters, dt * 1e6, algbw, algbw * 2 * (world - 1) / world,
                 init_ms, torch.__version__, ".".join(map(str, torch.cuda.nccl.version())),
                 "agent" if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" else "rank0",
                 check.item() == world * (world + 1) / 2), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
