#!/usr/bin/env python3
"""The PyTorch side of bench/run_resume_bench.py: the GPT-2 of
bench/torch_gpt2.py trained with DDP under torchrun, saving model, AdamW
and step with torch.save every K steps (rank 0, temp file and rename) and
resuming from that file when torchrun restarts it. Rank 0 prints
"resumed from step S (read in X ms)" and "step N" lines (flushed).

usage: torch_resume.py --ckpt FILE [--preset tiny|gpt2-124m] [--steps N]
                       [--ckpt-every K] [--batch B] [--seq-len T]
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

if not hasattr(F, "scaled_dot_product_attention"):  # torch < 2.0
    def _sdpa(q, k, v, is_causal=True):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) / (q.size(-1) ** 0.5)
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        return att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
    F.scaled_dot_product_attention = _sdpa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2 import GPT  # noqa: E402

PRESETS = {"tiny": (2, 4, 64, 256, 64, 8),          # L, NH, C, Vp, T, B
           "gpt2-124m": (12, 12, 768, 50304, 1024, 4)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--ckpt-every", type=int, default=10)
    a = ap.parse_args()
    L, NH, C, Vp, T, B = PRESETS[a.preset]
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    dev = "cuda:%d" % int(os.environ.get("LOCAL_RANK", "0")) if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(dev)
    torch.manual_seed(1337)
    model = GPT(L, NH, C, Vp, T).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    start = 0
    if os.path.exists(a.ckpt):
        t0 = time.time()
        st = torch.load(a.ckpt, map_location=dev)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start = st["step"]
        if rank == 0:
            print("resumed from step %d (read in %.0f ms)"
                  % (start, (time.time() - t0) * 1e3), flush=True)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    g = torch.Generator().manual_seed(rank)
    for step in range(start + 1, a.steps + 1):
        x = torch.randint(0, Vp, (B, T), generator=g).to(dev)
        loss = ddp(x, x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        if rank == 0:
            print("step %d loss %.4f" % (step, loss.item()), flush=True)
            if step % a.ckpt_every == 0:
                tmp = a.ckpt + ".tmp"
                torch.save({"model": model.state_dict(),
                            "opt": opt.state_dict(), "step": step}, tmp)
                os.replace(tmp, a.ckpt)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
