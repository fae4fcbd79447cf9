#!/usr/bin/env python3
"""PyTorch GPT-2 training step, the peer of bench/gpt_bench (the CUDA backend
of train_gpt): the same model (pre-LayerNorm blocks, tanh GELU, tied head,
vocabulary padded to 50304), the same shapes, the same step (zero_grad,
forward with the loss, backward, gradient clipping at 1.0, fused AdamW with
weight decay on 2-D tensors), bf16 autocast, SDPA causal attention (flash),
TF32 matmuls allowed for what stays in fp32. --compile wraps the model in
torch.compile. Random tokens. The last line is machine-readable (RESULT ...)
for bench/run_gpt_bench.sh.

usage: torch_gpt2.py [--compile] [--layers 12] [--heads 12] [--channels 768]
                     [--batch 16] [--seq-len 1024] [--steps 20] [--warmup 5]
                     [--peak-tflops 989]
(GPT-2 350M: --layers 24 --heads 16 --channels 1024; 774M: --layers 36
--heads 20 --channels 1280, as gpt_bench takes them)
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.nh = NH
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        k = k.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        v = v.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, L, NH, C, Vp, maxT):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(maxT, C)
        self.h = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, Vp, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        std = 0.02
        for n, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * L) if n.endswith("proj.weight") else std
                nn.init.normal_(p, 0.0, s)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--channels", type=int, default=768)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--accum", type=int, default=1,
                    help="micro-batches of --batch a step (gradient accumulation)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    a = ap.parse_args()
    L, NH, C, V, Vp, maxT = a.layers, a.heads, a.channels, 50257, 50304, 1024
    B, T, K = a.batch, a.seq_len, a.accum
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    model = GPT(L, NH, C, Vp, maxT).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if a.compile else model
    x = torch.randint(0, V, (B, T), device=dev)
    y = torch.randint(0, V, (B, T), device=dev)
    nparams = sum(p.numel() for p in model.parameters())  # tied wte counted once
    flops_per_token = 6 * nparams + 6 * L * C * T

    def step():
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(K):
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = step_model(x, y) / K
            loss.backward()
            total = total + loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(total), norm.item()

    t0 = time.time()
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    print(f"warm-up ({a.warmup} steps{', compiling' if a.compile else ''}): "
          f"{time.time() - t0:.1f} s", flush=True)
    times = []
    for i in range(a.steps):
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        loss, norm = step()  # .item() waits for the step
        times.append((time.perf_counter() - t1) * 1e3)
        if i in (0, a.steps - 1):
            print(f"step {a.warmup + i + 1}: loss {loss:.4f}, grad norm {norm:.3f}, "
                  f"{times[-1]:.2f} ms", flush=True)
    med = statistics.median(times)
    tok_s = B * T * K / (med / 1e3)
    mfu = flops_per_token * tok_s / (a.peak_tflops * 1e12)
    mem = torch.cuda.max_memory_allocated() / 2**30
    res = torch.cuda.max_memory_reserved() / 2**30
    impl = "torch-compile" if a.compile else "torch-eager"
    print(f"torch {torch.__version__} ({impl}): L{L} H{NH} C{C}, {nparams} parameters, B{B} T{T}, accum {K}")
    print(f"ms/step: median {med:.2f}, mean {statistics.mean(times):.2f}, "
          f"min {min(times):.2f}, max {max(times):.2f} over {a.steps} steps")
    print(f"tokens/s: {tok_s:.0f}   MFU: {100 * mfu:.1f}%   peak memory: {mem:.2f} GiB "
          f"allocated, {res:.2f} GiB reserved")
    print(f"RESULT impl={impl} tok_s={tok_s:.0f} ms={med:.3f} mfu={mfu:.4f} "
          f"mem_gib={mem:.3f} used_gib={res:.3f}")


if __name__ == "__main__":
    main()
