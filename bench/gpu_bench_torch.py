# bench/gpu_bench_torch.py — PyTorch's side of bench/gpu_bench.sh: the same models, batches,
# optimizers and timing as bench/gpu_bench.cpp, on the same GPU, TF32 off on both sides (Tandem
# computes float32 in full precision). Prints "name value unit" lines: for each training step the
# wall time (_ms), the GPU time between CUDA events around the same steps (_ms_gpu) and the peak of
# allocated memory (_ms_peak, MiB). Eager as a user writes it, then PyTorch at its best on the same
# steps: "_tuned" (fused optimizer kernels, cudnn.benchmark), and with TORCH_COMPILE=1 "_compile"
# (torch.compile of the model) and "_ro" (torch.compile mode="reduce-overhead", which replays
# forward and backward as CUDA graphs), timed after their warm-up so that compilation is not in them.
# TORCH_COMPILE=only prints the compiled columns alone (gpu_bench.sh runs them last: compiling
# takes minutes, and the interleaved eager runs come first within a GPU lease).
# With --loss-match DIR [--device D] it is PyTorch's side of bench/loss_match.cpp instead: the same
# initial weights and batches (DIR/<model>.safetensors, by the same names), the same steps, and the
# losses printed ("loss_<model>_step<k>").
import importlib.metadata
import json
import os
import struct
import sys
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


class BasicBlock(nn.Module):
    """torchvision's BasicBlock, as nn::BasicBlock."""
    def __init__(self, inp, out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or inp != out:
            self.downsample = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False),
                                            nn.BatchNorm2d(out))

    def forward(self, x):
        h = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(h + (self.downsample(x) if self.downsample is not None else x))


class ResNet18(nn.Module):
    """torchvision's resnet18 with the CIFAR stem (3×3 stride 1, no max-pool) and its init:
    nn::resnet18({.num_classes = 10, .small_images = true}), by the same names. `width` (64 in
    torchvision) narrows it for tests/fixtures/resnet-pytorch, which imports it from here."""
    def __init__(self, classes=10, width=64):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width)
        inp = width
        for stage in range(4):
            out = width << stage
            setattr(self, f"layer{stage + 1}",
                    nn.Sequential(BasicBlock(inp, out, 2 if stage else 1), BasicBlock(out, out, 1)))
            inp = out
        self.fc = nn.Linear(inp, classes)
        for m in self.modules():  # torchvision's init
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        for stage in range(4):
            h = getattr(self, f"layer{stage + 1}")(h)
        return self.fc(h.mean((2, 3)))


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


def step(model, opt, batch, amp=None, image=(1, 28, 28), channels_last=False):
    """One step; amp torch.bfloat16/torch.float16 runs forward and loss under autocast (float16
    with a GradScaler), as bench/gpu_bench.cpp does. channels_last: the input in NHWC (the model
    must be converted too), cuDNN's preferred layout for tensor-core convolutions."""
    torch.manual_seed(0)
    x = torch.randn(batch, *image, device=dev)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
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


def load_safetensors(path):
    """safetensors.torch.load_file, emulated (Debian has no safetensors package)."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    dt = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
    return {k: torch.frombuffer(bytearray(data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]),
                                dtype=dt[v["dtype"]]).reshape(v["shape"])
            for k, v in header.items() if k != "__metadata__"}


def loss_match(folder, device):
    """bench/loss_match.cpp's steps from its files: the CNN with Adam, ResNet-18 with SGD."""
    models = (("cnn", Cnn, lambda p: torch.optim.Adam(p, lr=1e-3)),
              ("resnet18", ResNet18, lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, weight_decay=5e-4)))
    for name, make, opt_for in models:
        f = load_safetensors(f"{folder}/{name}.safetensors")
        model = make().to(f["x"].dtype)  # float64 when loss_match wrote float64
        model.load_state_dict({k[7:]: v for k, v in f.items() if k.startswith("weight.")}, strict=True)
        model.to(device).train()
        opt = opt_for(model.parameters())
        for s in range(f["x"].shape[0]):
            opt.zero_grad()
            loss = F.cross_entropy(model(f["x"][s].to(device)), f["y"][s].to(device))
            loss.backward()
            opt.step()
            print(f"loss_{name}_step{s + 1} {loss.item():.9g}", flush=True)


def main():
    compile_mode = os.environ.get("TORCH_COMPILE", "0")
    if compile_mode != "only":
        print(f"device {torch.cuda.get_device_name(0)}")
        print(f"versions torch={torch.__version__} cuda={torch.version.cuda} "
              f"cudnn={torch.backends.cudnn.version()} cublas={wheel('nvidia-cublas')}")
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
    resnet_sgd = lambda m, **kw: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9,
                                                 weight_decay=5e-4, **kw)
    if compile_mode != "only":
        sweep("", adam, sgd)
        for amp, tag in ((None, ""), (torch.bfloat16, "_bf16")):
            torch.manual_seed(0)
            m = ResNet18().to(dev)
            show(f"resnet18_b256{tag}_ms", step(m, resnet_sgd(m), 256, amp, (3, 32, 32)))
        for amp, tag in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
            torch.manual_seed(0)
            m = Cnn().to(dev)
            show(f"cnn_b256_{tag}_ms", step(m, adam(m), 256, amp))

    torch.backends.cudnn.benchmark = True  # the tuned and compiled rows only: eager's ran above
    fused_adam = lambda m: fused(torch.optim.Adam, m.parameters(), lr=1e-3)
    fused_sgd = lambda m: fused(torch.optim.SGD, m.parameters(), lr=0.05, momentum=0.9)
    fused_resnet_sgd = lambda m: fused(torch.optim.SGD, m.parameters(), lr=0.01, momentum=0.9,
                                       weight_decay=5e-4)
    if compile_mode != "only":
        sweep("_tuned", fused_adam, fused_sgd)
        for amp, tag in ((None, ""), (torch.bfloat16, "_bf16")):  # tuned: channels_last too
            torch.manual_seed(0)
            m = ResNet18().to(dev).to(memory_format=torch.channels_last)
            show(f"resnet18_b256{tag}_ms_tuned",
                 step(m, fused_resnet_sgd(m), 256, amp, (3, 32, 32), channels_last=True))
    if compile_mode in ("1", "only"):
        for name, make, opt, image in (("cnn", Cnn, fused_adam, (1, 28, 28)),
                                       ("cnn_bn", BnCnn, fused_adam, (1, 28, 28)),
                                       ("mlp", Mlp, fused_sgd, (1, 28, 28)),
                                       ("resnet18", ResNet18, fused_resnet_sgd, (3, 32, 32))):
            for mode, tag in ((None, "compile"), ("reduce-overhead", "ro")):
                torch.manual_seed(0)
                m = make().to(dev)
                c = torch.compile(m, mode=mode) if mode else torch.compile(m)
                show(f"{name}_b256_ms_{tag}", step(c, opt(m), 256, image=image))

    if compile_mode == "only":
        return
    n = 4096
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    ms = measure(lambda: torch.mm(a, b), 20)[1]
    print(f"gemm4096_tflops {2 * n ** 3 / (ms * 1e-3) / 1e12:.3f} TFLOP/s")
    a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
    ms = measure(lambda: torch.mm(a16, b16), 20)[1]
    print(f"gemm4096_bf16_tflops {2 * n ** 3 / (ms * 1e-3) / 1e12:.3f} TFLOP/s")


if __name__ == "__main__":
    if "--loss-match" in sys.argv:
        args = sys.argv[1:]
        device = args[args.index("--device") + 1] if "--device" in args else "cuda:0"
        loss_match(args[args.index("--loss-match") + 1], torch.device(device))
    else:
        main()
