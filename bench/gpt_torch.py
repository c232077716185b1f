#!/usr/bin/env python3
"""bench/gpt_torch.py — the peer of `tandem train --model gpt`: nanoGPT's model.py and train.py,
cut to what the CPU recipe runs, on a character corpus. Same model (pre-LayerNorm GPT, GELU (erf),
no biases, lm_head tied to wte, nanoGPT's initialisation), same loop (random windows, AdamW with
decay on 2-D tensors only, warm-up + cosine, clipping at 1.0, loss estimated every eval_interval
iterations over eval_iters batches of each split). Attention is nanoGPT's: PyTorch's fused
scaled_dot_product_attention where the installed PyTorch has it (2.0 on), else the masked
softmax of matmuls it falls back to (Debian's 1.13).

    /usr/bin/python3 bench/gpt_torch.py --text ../shared/data/tinyshakespeare.txt --threads 1
    python3 bench/gpt_torch.py --text input.txt --device cuda --compile --n-layer 6 --n-head 6 \
        --n-embd 384 --block-size 256 --batch-size 64 --dropout 0.2 --max-iters 5000 --eval-iters 200

Prints one line per evaluation and ends with `result: ...` (wall seconds, final losses,
tokens/s, ms per training iteration) for bench/gpt_bench.sh. With --attention instead: causal
attention alone, 8 heads of 64, T = 64 … 2048, forward + backward in ms, as nanoGPT computes it.
With --mfu: GPT-2 124M's training step at context 1,024 (--batch-size sequences; --compile,
--amp bf16 as nanoGPT on a GPU), tokens/s and MFU against --peak-tflops, beside
`gpt_bench mfu`.
"""
import argparse
import contextlib
import math
import time

import torch
import torch.nn as nn
from torch.nn import functional as F


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.n_head, self.n_embd, self.dropout = c.n_head, c.n_embd, c.dropout
        self.attn_dropout, self.resid_dropout = nn.Dropout(c.dropout), nn.Dropout(c.dropout)
        self.flash = hasattr(F, "scaled_dot_product_attention")
        if not self.flash:
            self.register_buffer(
                "mask", torch.tril(torch.ones(c.block_size, c.block_size)).view(1, 1, c.block_size, c.block_size)
            )

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True
            )
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c.n_embd, c.bias)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c.n_embd, c.bias)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(c.vocab_size, c.n_embd),
                wpe=nn.Embedding(c.block_size, c.n_embd),
                drop=nn.Dropout(c.dropout),
                h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]),
                ln_f=LayerNorm(c.n_embd, c.bias),
            )
        )
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    def _init_weights(self, m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                torch.nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def attention_times(rounds):
    """nanoGPT's attention, forward + backward, per T: median ms over `rounds` samples."""
    heads, d = 8, 64
    print(f"torch {torch.__version__}, sdpa={hasattr(F, 'scaled_dot_product_attention')}")
    t = 64
    while t <= 2048:
        q, k, v = (torch.randn(1, heads, t, d, requires_grad=True) for _ in range(3))
        dy = torch.randn(1, heads, t, d)
        mask = torch.tril(torch.ones(t, t)).view(1, 1, t, t)

        def step():
            if hasattr(F, "scaled_dot_product_attention"):
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
                att = F.softmax(att.masked_fill(mask == 0, float("-inf")), dim=-1)
                y = att @ v
            y.backward(dy)

        step()
        reps = max(1, int(0.3 / max(timeit(step, 1), 1e-9)))
        samples = sorted(timeit(step, reps) for _ in range(rounds))
        print(f"attention T={t} torch_ms={1e3 * samples[len(samples) // 2]:.3f}", flush=True)
        t *= 2


def mfu_times(a):
    """GPT-2 124M's shape (or --shape test), random tokens: the step (forward and loss under
    autocast, backward, clipping, fused AdamW) timed after warm-up, tokens/s, and the MFU as
    nanoGPT's estimate_mfu computes it; the keys of bench/gpt_bench.cpp's mfu part."""
    class Config:
        pass

    c = Config()
    test = a.shape == "test"
    c.n_layer, c.n_head, c.n_embd = (2, 2, 64) if test else (12, 12, 768)
    c.block_size, c.vocab_size = (64, 512) if test else (1024, 50304)
    c.bias, c.dropout = True, 0.0
    model = GPT(c).to(a.device)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    fused = {"fused": True} if a.device.startswith("cuda") else {}
    opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), **fused)
    run = torch.compile(model) if a.compile else model
    g = torch.Generator().manual_seed(0)
    tok = torch.randint(0, c.vocab_size, (a.batch_size, c.block_size + 1), generator=g).to(a.device)
    x, y = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
    cuda = a.device.startswith("cuda")

    def step():
        with torch.autocast(device_type=a.device.split(":")[0], dtype=torch.bfloat16,
                            enabled=a.amp == "bf16"):
            loss = run(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if cuda:
            torch.cuda.synchronize()

    for _ in range(3 if not a.compile else 10):  # warm-up (and compilation)
        step()
    reps = max(1, int(0.3 / max(timeit(step, 1), 1e-9)))
    ms = 1e3 * sorted(timeit(step, reps) for _ in range(a.rounds))[a.rounds // 2]
    n = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    per_token = 6 * n + 12 * c.n_layer * c.n_head * (c.n_embd // c.n_head) * c.block_size
    tokens_per_s = a.batch_size * c.block_size / (ms * 1e-3)
    print(f"torch {torch.__version__}, compile={a.compile}, amp={a.amp}, device={a.device}")
    print(f"mfu_step_ms {ms:.3f}\nmfu_tokens_per_s {tokens_per_s:.0f}\n"
          f"mfu_model_tflops {per_token * tokens_per_s / 1e12:.2f}")
    if a.peak_tflops > 0:
        print(f"mfu_percent {100 * per_token * tokens_per_s / 1e12 / a.peak_tflops:.1f} "
              f"(peak {a.peak_tflops:.0f} TFLOP/s)")


def timeit(fn, reps):
    t0 = time.time()
    for _ in range(reps):
        fn()
    return (time.time() - t0) / reps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--text")
    p.add_argument("--attention", action="store_true")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2)")
    p.add_argument("--amp", default="none", choices=["none", "bf16"], help="bf16: autocast, as nanoGPT on GPUs")
    p.add_argument("--max-iters", type=int, default=2000)
    p.add_argument("--eval-interval", type=int, default=250)
    p.add_argument("--eval-iters", type=int, default=20)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--mfu", action="store_true", help="GPT-2 124M's step, tokens/s and MFU")
    p.add_argument("--shape", default="gpt2", choices=["gpt2", "test"], help="--mfu's model")
    p.add_argument("--peak-tflops", type=float, default=0.0, help="--mfu: the GPU's dense peak")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.attention:
        return attention_times(a.rounds)
    if a.mfu:
        return mfu_times(a)

    text = open(a.text, encoding="utf-8").read()
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
    n = int(0.9 * len(data))
    splits = {"train": data[:n], "val": data[n:]}

    def get_batch(split):
        d = splits[split]
        ix = torch.randint(len(d) - a.block_size, (a.batch_size,))
        x = torch.stack([d[i : i + a.block_size] for i in ix])
        y = torch.stack([d[i + 1 : i + 1 + a.block_size] for i in ix])
        return x.to(a.device), y.to(a.device)

    class Config:
        pass

    c = Config()
    c.n_layer, c.n_head, c.n_embd, c.block_size = a.n_layer, a.n_head, a.n_embd, a.block_size
    c.vocab_size, c.bias, c.dropout = len(chars), False, a.dropout
    model = GPT(c).to(a.device)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    lr, min_lr, warmup = 1e-3, 1e-4, min(100, a.max_iters // 2)
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99))
    if a.compile:
        model = torch.compile(model)

    def get_lr(it):
        if it < warmup:
            return lr * (it + 1) / (warmup + 1)
        if it > a.max_iters:
            return min_lr
        ratio = (it - warmup) / (a.max_iters - warmup)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

    def autocast():  # as nanoGPT's train.py: the forward (and loss) under autocast, backward outside
        if a.amp == "none":
            return contextlib.nullcontext()
        return torch.autocast(device_type=a.device.split(":")[0], dtype=torch.bfloat16)

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        out = {}
        for split in ("train", "val"):
            with autocast():
                out[split] = sum(model(*get_batch(split)).item() for _ in range(a.eval_iters)) / a.eval_iters
        model.train()
        return out

    tokens = a.batch_size * a.block_size
    start = time.time()
    train_seconds = steady_seconds = 0.0
    steady_from = min(20, a.max_iters // 2)
    losses = {}
    def sync():
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()

    for it in range(a.max_iters + 1):
        for g in opt.param_groups:
            g["lr"] = get_lr(it)
        if it % a.eval_interval == 0 or it == a.max_iters:
            losses = estimate_loss()
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
        if it == a.max_iters:
            break
        sync()
        t0 = time.time()
        x, y = get_batch("train")
        with autocast():
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        train_seconds += time.time() - t0
        if it >= steady_from:  # past torch.compile's first compilations (and eager's warm-up)
            steady_seconds += time.time() - t0
    wall = time.time() - start
    print(
        f"result: wall_s={wall:.1f} train_loss={losses['train']:.4f} val_loss={losses['val']:.4f} "
        f"tokens_per_s={a.max_iters * tokens / train_seconds:.0f} "
        f"ms_per_iter={1e3 * train_seconds / a.max_iters:.2f} "
        f"steady_ms_per_iter={1e3 * steady_seconds / (a.max_iters - steady_from):.2f} "
        f"torch={torch.__version__} "
        f"threads={a.threads} sdpa={hasattr(F, 'scaled_dot_product_attention')} "
        f"device={a.device} compile={a.compile} amp={a.amp}"
    )


if __name__ == "__main__":
    main()
