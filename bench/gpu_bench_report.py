# bench/gpu_bench_report.py — the tables of bench/gpu_bench.sh from its runs' outputs: each value
# the median over the interleaved runs, with the range (min–max) where there are several, and
# ratios Tandem / PyTorch of those medians (times: lower is better; TFLOP/s: higher).
#   python3 bench/gpu_bench_report.py tandem-1.txt torch-1.txt tandem-2.txt torch-2.txt ...
import statistics
import sys


def parse(path):
    out, lines = {}, open(path).read().splitlines()
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] not in ("device", "versions"):
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                pass
    heads = [l for l in lines if l.startswith(("device", "versions"))]
    return out, heads


runs = [parse(p) for p in sys.argv[1:]]
tandem, torch = runs[0::2], runs[1::2]


def values(side, key):
    return [r[0][key] for r in side if key in r[0]]


def med(side, key):
    v = values(side, key)
    return statistics.median(v) if v else None


def cell(side, key, fmt="{:.3f}"):
    v = values(side, key)
    if not v:
        return "–"
    m = fmt.format(statistics.median(v))
    return m if len(v) == 1 else f"{m} ({fmt.format(min(v))}–{fmt.format(max(v))})"


def ratio(a, b):
    return f"{a / b:.3f}" if a is not None and b else "–"


def table(title, header, rows):
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")


for heads in (tandem[0][1], torch[0][1]):
    for h in heads:
        print(h)
print(f"\n{len(tandem)} interleaved run(s) of each side; medians, with the range over the runs")
main = ["cnn_b64_ms", "cnn_b256_ms", "cnn_bn_b256_ms", "cnn_b256_bf16_ms", "cnn_b256_fp16_ms",
        "mlp_b256_ms", "resnet18_b256_ms", "resnet18_b256_bf16_ms", "gemm4096_tflops",
        "gemm4096_bf16_tflops"]
table("Tandem against PyTorch eager (wall ms per step; GEMM TFLOP/s from GPU time)",
      ["benchmark", "Tandem", "PyTorch eager", "Tandem / PyTorch"],
      [[k, cell(tandem, k), cell(torch, k), ratio(med(tandem, k), med(torch, k))] for k in main])
rows = []
for k in ["cnn_b64_ms", "cnn_b256_ms", "cnn_bn_b256_ms", "mlp_b256_ms", "resnet18_b256_ms",
          "resnet18_b256_bf16_ms"]:
    cols = [med(torch, k + s) for s in ("", "_tuned", "_compile", "_ro")]
    if all(c is None for c in cols):
        continue
    best = min(c for c in cols if c is not None)
    ours = [c for c in (med(tandem, k + s) for s in ("", "_graph", "_timed")) if c is not None]
    rows.append([k, cell(tandem, k), cell(tandem, k + "_graph"), cell(tandem, k + "_timed")]
                + [cell(torch, k + s) for s in ("", "_tuned", "_compile", "_ro")]
                + [ratio(min(ours) if ours else None, best)])
table("Against PyTorch at its best (wall ms per step): Tandem graph = the step as one CUDA graph; "
      "Tandem timed = each convolution's algorithm timed (cuda::set_cudnn_benchmark); "
      "tuned = fused optimizer and cudnn.benchmark (and channels_last for ResNet-18); "
      "compile = torch.compile; reduce-overhead = torch.compile(mode=\"reduce-overhead\")",
      ["step", "Tandem", "Tandem graph", "Tandem timed", "eager", "tuned", "compile",
       "reduce-overhead", "Tandem's best / PyTorch's best"], rows)
for model in ("cnn", "mlp"):
    rows = []
    for b in (64, 128, 256, 512, 1024, 2048, 4096):
        k = f"{model}_b{b}_ms"
        found = [c for c in (med(torch, k), med(torch, k + "_tuned")) if c is not None]
        if not found:
            continue
        best = min(found)
        rows.append([str(b), cell(tandem, k), cell(torch, k), cell(torch, k + "_tuned"),
                     ratio(med(tandem, k), best), cell(tandem, k + "_gpu"), cell(torch, k + "_gpu"),
                     cell(tandem, k + "_peak", "{:.0f}"), cell(torch, k + "_peak", "{:.0f}")])
    table(f"{model.upper()} batch sweep: wall ms per step, GPU ms between CUDA events, peak MiB "
          "allocated", ["batch", "Tandem", "eager", "tuned", "Tandem / best", "Tandem GPU",
                        "eager GPU", "Tandem peak", "eager peak"], rows)
rows = [[str(b), cell(tandem, f"cnn_b{b}_ms"), cell(tandem, f"cnn_b{b}_ms_nondet"),
         cell(torch, f"cnn_b{b}_ms"), ratio(med(tandem, f"cnn_b{b}_ms_nondet"), med(torch, f"cnn_b{b}_ms"))]
        for b in (256, 1024, 4096) if values(tandem, f"cnn_b{b}_ms_nondet")]
if rows:
    table("CNN with cuDNN's first heuristic pick (cuda::set_deterministic_convolutions(false), "
          "PyTorch's default) against the deterministic choice", ["batch", "Tandem deterministic",
          "Tandem first pick", "eager", "first pick / eager"], rows)

rows = [[k, cell(tandem, k), cell(tandem, k + "_nondet"), cell(tandem, k + "_timed"),
         cell(torch, k + "_tuned"), ratio(med(tandem, k + "_timed"), med(torch, k + "_tuned"))]
        for k in ("cnn_b256_ms", "cnn_b1024_ms", "cnn_b4096_ms", "resnet18_b256_ms",
                  "resnet18_b256_bf16_ms") if values(tandem, k + "_timed")]
if rows:
    table("Each convolution's algorithm timed on its first call (cuda::set_cudnn_benchmark, "
          "determinism off) against PyTorch tuned (cudnn.benchmark)",
          ["step", "Tandem deterministic", "Tandem first pick", "Tandem timed", "tuned",
           "timed / tuned"], rows)

# The same initial weights and batches on both sides (bench/loss_match.cpp and gpu_bench_torch.py
# --loss-match, appended to the first runs): the losses step by step.
steps = sorted({int(k.rsplit("step", 1)[1]) for k in tandem[0][0] if k.startswith("loss_")})
rows = []
for model in ("cnn", "resnet18"):
    for s in steps:
        k = f"loss_{model}_step{s}"
        a, b = med(tandem, k), med(torch, k)
        if a is not None and b is not None:
            rows.append([model, str(s), f"{a:.7f}", f"{b:.7f}", f"{abs(a - b) / abs(b):.1e}"])
if rows:
    table("The same initial weights and batches on both sides: training loss at each step",
          ["model", "step", "Tandem", "PyTorch", "|difference| / PyTorch"], rows)
