# bench/gpu_bench_torch.py — PyTorch's side of bench/gpu_bench.sh: the same models, batches,
# optimizers and timing as bench/gpu_bench.cpp, on the same GPU, TF32 off on both sides (Tandem
# computes float32 in full precision). Prints "name value unit" lines: eager as a user writes it,
# then PyTorch at its best on the same steps: "_tuned" (fused optimizer kernels, cudnn.benchmark),
# "_compile" (torch.compile of the model) and "_ro" (torch.compile mode="reduce-overhead", which
# replays forward and backward as CUDA graphs). The compiled rows are timed after their warm-up,
# so compilation is not in them.
import time
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda:0")


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.fc1, self.fc2 = nn.Linear(1600, 128), nn.Linear(128, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        return self.fc2(F.relu(self.fc1(h.flatten(1))))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 256), nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


def median_ms(f, reps, rounds=7):
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    ms = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3 / reps)
    return sorted(ms)[len(ms) // 2]


def step_ms(model, opt, batch, amp=None):
    """One step; amp torch.bfloat16/torch.float16 runs forward and loss under autocast (float16
    with a GradScaler), as bench/gpu_bench.cpp does."""
    torch.manual_seed(0)
    x = torch.randn(batch, 1, 28, 28, device=dev)
    y = torch.zeros(batch, dtype=torch.long, device=dev)
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):  # torch >= 2.3
        scaler = torch.amp.GradScaler("cuda", enabled=amp == torch.float16)
    else:
        scaler = torch.cuda.amp.GradScaler(enabled=amp == torch.float16)

    def step():
        opt.zero_grad()
        with torch.autocast("cuda", dtype=amp or torch.bfloat16, enabled=amp is not None):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return median_ms(step, 50)


print(f"device {torch.cuda.get_device_name(0)}")
for batch in (64, 256):
    torch.manual_seed(0)
    cnn = Cnn().to(dev)
    print(f"cnn_b{batch}_ms {step_ms(cnn, torch.optim.Adam(cnn.parameters(), lr=1e-3), batch):.4f} ms")
class BnCnn(nn.Sequential):
    def __init__(self):
        super().__init__(nn.Conv2d(1, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))


torch.manual_seed(0)
bn_cnn = BnCnn().to(dev)
print(f"cnn_bn_b256_ms {step_ms(bn_cnn, torch.optim.Adam(bn_cnn.parameters(), lr=1e-3), 256):.4f} ms")
for amp, tag in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
    torch.manual_seed(0)
    cnn = Cnn().to(dev)
    ms = step_ms(cnn, torch.optim.Adam(cnn.parameters(), lr=1e-3), 256, amp)
    print(f"cnn_b256_{tag}_ms {ms:.4f} ms")
torch.manual_seed(0)
mlp = Mlp().to(dev)
print(f"mlp_b256_ms {step_ms(mlp, torch.optim.SGD(mlp.parameters(), lr=0.05, momentum=0.9), 256):.4f} ms")


def fused(cls, params, **kw):
    """The optimizer with its fused CUDA kernel, or its multi-tensor (foreach) one where this
    PyTorch has no fused version of it."""
    try:
        return cls(params, fused=True, **kw)
    except (TypeError, RuntimeError, ValueError):
        return cls(params, foreach=True, **kw)


torch.backends.cudnn.benchmark = True  # the tuned and compiled rows only: eager's ran above
adam = lambda m: fused(torch.optim.Adam, m.parameters(), lr=1e-3)
sgd = lambda m: fused(torch.optim.SGD, m.parameters(), lr=0.05, momentum=0.9)
for name, make, opt, batches in (("cnn", Cnn, adam, (64, 256)), ("cnn_bn", BnCnn, adam, (256,)),
                                 ("mlp", Mlp, sgd, (256,))):
    for batch in batches:
        torch.manual_seed(0)
        m = make().to(dev)
        print(f"{name}_b{batch}_ms_tuned {step_ms(m, opt(m), batch):.4f} ms")
    for mode, tag in ((None, "compile"), ("reduce-overhead", "ro")):
        torch.manual_seed(0)
        m = make().to(dev)
        c = torch.compile(m, mode=mode) if mode else torch.compile(m)
        print(f"{name}_b256_ms_{tag} {step_ms(c, opt(m), 256):.4f} ms", flush=True)

n = 4096
a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
ms = median_ms(lambda: torch.mm(a, b), 20)
print(f"gemm4096_tflops {2 * n ** 3 / (ms * 1e-3) / 1e12:.3f} TFLOP/s")
a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
ms = median_ms(lambda: torch.mm(a16, b16), 20)
print(f"gemm4096_bf16_tflops {2 * n ** 3 / (ms * 1e-3) / 1e12:.3f} TFLOP/s")
