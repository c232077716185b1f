# bench/gpu_bench_torch.py — PyTorch's side of bench/gpu_bench.sh: the same models, batches,
# optimizers and timing as bench/gpu_bench.cpp, on the same GPU, TF32 off on both sides (Tandem
# computes float32 in full precision). Prints "name value unit" lines: for each training step the
# wall time (_ms), the GPU time between CUDA events around the same steps (_ms_gpu) and the peak of
# allocated memory (_ms_peak, MiB). Eager as a user writes it, then PyTorch at its best on the same
# steps: "_tuned" (fused optimizer kernels, cudnn.benchmark), and with TORCH_COMPILE=1 "_compile"
# (torch.compile of the model) and "_ro" (torch.compile mode="reduce-overhead", which replays
# forward and backward as CUDA graphs), timed after their warm-up so that compilation is not in them.
import importlib.metadata
import os
import time
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda:0")
BATCHES = (64, 128, 256, 512, 1024, 2048, 4096)


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


class BnCnn(nn.Sequential):
    def __init__(self):
        super().__init__(nn.Conv2d(1, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))


def measure(f, reps, rounds=7):
    """Medians per call over rounds (wall ms, GPU ms between events) and the peak MiB."""
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    wall, gpu = [], []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        end.record()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3 / reps)
        gpu.append(start.elapsed_time(end) / reps)
    med = lambda v: sorted(v)[len(v) // 2]
    return med(wall), med(gpu), torch.cuda.max_memory_allocated() / 2**20


def reps_for(batch):
    return max(5, min(50, 50 * 256 // batch))


def step(model, opt, batch, amp=None):
    """One step; amp torch.bfloat16/torch.float16 runs forward and loss under autocast (float16
    with a GradScaler), as bench/gpu_bench.cpp does."""
    torch.manual_seed(0)
    x = torch.randn(batch, 1, 28, 28, device=dev)
    y = torch.zeros(batch, dtype=torch.long, device=dev)
    scaler = torch.amp.GradScaler("cuda", enabled=amp == torch.float16)

    def f():
        opt.zero_grad()
        with torch.autocast("cuda", dtype=amp or torch.bfloat16, enabled=amp is not None):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return measure(f, reps_for(batch))


def show(key, t):
    print(f"{key} {t[0]:.4f} ms\n{key}_gpu {t[1]:.4f} ms\n{key}_peak {t[2]:.1f} MiB", flush=True)


def fused(cls, params, **kw):
    """The optimizer with its fused CUDA kernel, or its multi-tensor (foreach) one where this
    PyTorch has no fused version of it."""
    try:
        return cls(params, fused=True, **kw)
    except (TypeError, RuntimeError, ValueError):
        return cls(params, foreach=True, **kw)


def wheel(prefix):
    for d in importlib.metadata.distributions():
        if d.metadata["Name"] and d.metadata["Name"].startswith(prefix):
            return d.version
    return "?"


print(f"device {torch.cuda.get_device_name(0)}")
print(f"versions torch={torch.__version__} cuda={torch.version.cuda} cudnn={torch.backends.cudnn.version()} "
      f"cublas={wheel('nvidia-cublas')}")
def sweep(suffix, adam, sgd):
    """The CNN (Adam) and the MLP (SGD-momentum) at every batch, and the BatchNorm CNN at 256."""
    for batch in BATCHES:
        for name, make, opt in (("cnn", Cnn, adam), ("mlp", Mlp, sgd)):
            torch.manual_seed(0)
            m = make().to(dev)
            show(f"{name}_b{batch}_ms{suffix}", step(m, opt(m), batch))
    torch.manual_seed(0)
    m = BnCnn().to(dev)
    show(f"cnn_bn_b256_ms{suffix}", step(m, adam(m), 256))


adam = lambda m: torch.optim.Adam(m.parameters(), lr=1e-3)
sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
sweep("", adam, sgd)
for amp, tag in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
    torch.manual_seed(0)
    m = Cnn().to(dev)
    show(f"cnn_b256_{tag}_ms", step(m, adam(m), 256, amp))

torch.backends.cudnn.benchmark = True  # the tuned and compiled rows only: eager's ran above
fused_adam = lambda m: fused(torch.optim.Adam, m.parameters(), lr=1e-3)
fused_sgd = lambda m: fused(torch.optim.SGD, m.parameters(), lr=0.05, momentum=0.9)
sweep("_tuned", fused_adam, fused_sgd)
if os.environ.get("TORCH_COMPILE") == "1":
    for name, make, opt in (("cnn", Cnn, fused_adam), ("cnn_bn", BnCnn, fused_adam),
                            ("mlp", Mlp, fused_sgd)):
        for mode, tag in ((None, "compile"), ("reduce-overhead", "ro")):
            torch.manual_seed(0)
            m = make().to(dev)
            c = torch.compile(m, mode=mode) if mode else torch.compile(m)
            show(f"{name}_b256_ms_{tag}", step(c, opt(m), 256))

n = 4096
a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
ms = measure(lambda: torch.mm(a, b), 20)[1]
print(f"gemm4096_tflops {2 * n ** 3 / (ms * 1e-3) / 1e12:.3f} TFLOP/s")
a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
ms = measure(lambda: torch.mm(a16, b16), 20)[1]
print(f"gemm4096_bf16_tflops {2 * n ** 3 / (ms * 1e-3) / 1e12:.3f} TFLOP/s")
