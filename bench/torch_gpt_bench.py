"""train_gpt's model in PyTorch, for bench/run_gpt_bench.sh: the same GPT-2
decoder (pre-LayerNorm blocks, causal attention, tanh GELU, tied head), the
same sizes, batch, optimiser (AdamW, weight decay on matrices only, clip at
1.0, warmup + cosine) and byte-level data from the same corpus, on the CPU
with the same number of threads. Prints one line:

  torch_gpt: steps N tokens/step K ms/step X tok/s Y

    /usr/bin/python3 bench/torch_gpt_bench.py --threads 2 --steps 50
"""
import argparse
import glob
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.nh = NH
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        k = k.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        v = v.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.nh))
        att = F.softmax(att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, V, maxT):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.lnf = nn.LayerNorm(C)
        self.register_buffer("mask", torch.tril(torch.ones(maxT, maxT)).view(1, 1, maxT, maxT))
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def corpus():
    data = b""
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(p) and not os.path.islink(p):
            data += open(p, "rb").read()
    return torch.tensor(list(data), dtype=torch.long)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup-steps", type=int, default=5, help="untimed steps")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    model = GPT(a.layers, a.heads, a.channels, a.vocab, a.seq_len)
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    data = corpus()
    windows = (len(data) - 1) // a.seq_len
    g = torch.Generator().manual_seed(1)
    T = a.seq_len
    total = a.warmup_steps + a.steps
    t0 = None
    for step in range(1, total + 1):
        if step == a.warmup_steps + 1:
            t0 = time.perf_counter()
        lr = a.lr * min(1.0, step / 20) * 0.5 * (1 + math.cos(math.pi * step / total))
        for grp in opt.param_groups:
            grp["lr"] = lr
        w = torch.randint(0, windows, (a.batch,), generator=g) * T
        x = torch.stack([data[i:i + T] for i in w])
        y = torch.stack([data[i + 1:i + T + 1] for i in w])
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
    dt = time.perf_counter() - t0
    tokens = a.batch * T
    print("torch_gpt: torch %s threads %d steps %d tokens/step %d ms/step %.3f tok/s %.0f "
          "loss %.4f" % (torch.__version__, a.threads, a.steps, tokens, dt / a.steps * 1e3,
                         tokens * a.steps / dt, loss.item()))


if __name__ == "__main__":
    main()
