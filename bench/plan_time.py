#!/usr/bin/env python3
"""tandem plan's step times beside the measured ones, layout by layout, on this host.

  python3 bench/plan_time.py build/tools/tandem [--quick] [--sweep N]

Calibrates once per rank count (`tandem plan ... --search --calibrate`, which times the kernels
of every layout of the ranks and the host's links), then for each layout predicts the step
(`tandem plan ... --profile`) and measures it (`tandem train`, under `tandem launch` for more
than one rank: the median ms/iter of the last intervals). Prints one row per layout and the
worst ratio; the table goes to bench/RESULTS.md by hand, with the CPU it names.

--sweep N: instead, every layout `tandem plan --search` finds for N ranks, ranked by predicted
step, each measured: where the first-ranked one measures against the fastest.
"""
import os, re, statistics, subprocess, sys, tempfile

TANDEM = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/tools/tandem")
MODEL = "--model gpt --n-layer 4 --n-embd 128 --n-head 4 --block-size 64 --batch-size 16"
LAYOUTS = {
    1: ["", "--activation-checkpointing"],
    2: ["--ddp", "--ddp --zero 1", "--ddp --zero 2", "--ddp --zero 3", "--tp 2",
        "--tp 2 --sequence-parallel", "--cp 2", "--pp 2 --chunks 2 --pipeline-schedule gpipe",
        "--pp 2 --chunks 4 --pipeline-schedule 1f1b",
        "--pp 2 --chunks 4 --pipeline-schedule zb-h1", "--ddp --activation-checkpointing"],
    4: ["--ddp", "--ddp --zero 1", "--tp 2", "--tp 4", "--tp 2 --pp 2 --chunks 4",
        "--pp 2 --chunks 4 --pipeline-schedule 1f1b", "--pp 4 --chunks 8 --pipeline-schedule 1f1b",
        "--cp 2 --tp 2", "--ddp --zero 3"],
}
ITERS, INTERVAL = 60, 10


def run(cmd, cwd):
    p = subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {cmd}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout + p.stderr


def measured_ms(n, layout, cwd):
    train = (f"{TANDEM} train {MODEL} {layout} --max-iters {ITERS} --log-interval {INTERVAL} "
             f"--eval-interval 100000 --log-dir {cwd}/runs")
    cmd = train if n == 1 else (
        f"{TANDEM} launch --standalone --nproc-per-node {n} -- {train}"
        + ("" if "--ddp" in layout else " --ddp"))
    ms = [float(m) for m in re.findall(r"([0-9.]+) ms/iter", run(cmd, cwd))]
    return statistics.median(ms[2:])  # the first intervals warm up


def sweep(n, cwd):
    out = run(f"{TANDEM} plan {MODEL} --nproc {n} --search --calibrate {cwd}/sweep.profile", cwd)
    row = re.compile(r"^ +([\d.]+) ms +([\d.]+)% comm +[\d.]+ MiB +[\d.]+ MB on the wire +(.*)$")
    layouts = [(float(m.group(1)), m.group(3)) for m in map(row.match, out.splitlines()) if m]
    measured = []
    for predicted, flags in layouts:  # fastest predicted first
        layout = "" if flags == "(one device)" else flags
        ms = measured_ms(n, layout, cwd)
        measured.append((ms, predicted, flags))
        print(f"predicted {predicted:7.2f} ms  measured {ms:7.2f} ms  {flags}", flush=True)
    fastest = min(measured)
    first = measured[0]
    print(f"{len(measured)} layouts on {n} ranks: the first ranked ({first[2]}) measures "
          f"{first[0]:.2f} ms, {100 * (first[0] / fastest[0] - 1):.1f} % above the fastest "
          f"measured ({fastest[2]}, {fastest[0]:.2f} ms)")


def main():
    quick = "--quick" in sys.argv
    if "--sweep" in sys.argv:
        with tempfile.TemporaryDirectory() as cwd:
            return sweep(int(sys.argv[sys.argv.index("--sweep") + 1]), cwd)
    cpu = run(f"{TANDEM} devices", ".").splitlines()
    print("\n".join(l for l in cpu if "cpu" in l.lower())[:300])
    rows = []
    with tempfile.TemporaryDirectory() as cwd:
        for n, layouts in LAYOUTS.items():
            if quick:
                layouts = layouts[:2]
            profile = f"{cwd}/host-{n}.profile"
            # One profile per rank count, as a user makes it: every layout's kernels in it.
            run(f"{TANDEM} plan {MODEL} --nproc {n} --search --calibrate {profile}", cwd)
            for layout in layouts:
                out = run(f"{TANDEM} plan {MODEL} {layout} --nproc {n} --profile {profile}", cwd)
                predicted = float(re.search(r"predicted step: ([0-9.]+) ms", out).group(1))
                comm = float(re.search(r"communication ([0-9.]+)%", out).group(1))
                measured = measured_ms(n, layout, cwd)
                rows.append((n, layout or "(one device)", predicted, measured, comm))
                print(f"{n} ranks  {layout or '(one device)':50s} predicted {predicted:7.2f} ms  "
                      f"measured {measured:7.2f} ms  ratio {predicted / measured:.3f}  "
                      f"comm {comm:.1f}%", flush=True)
    ratios = [p / m for _, _, p, m, _ in rows]
    within = sum(abs(r - 1) <= 0.15 for r in ratios)
    print(f"{len(rows)} layouts: {within} within 15 %, ratios {min(ratios):.3f} .. "
          f"{max(ratios):.3f}, median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
