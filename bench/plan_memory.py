#!/usr/bin/env python3
"""bench/plan_memory.py — issue 60's memory check: `tandem train --model gpt --predict` on many
layouts (1, 2 and 4 ranks under `tandem launch`), each rank's peak as `tandem plan` predicts it
(rehearsed on the meta device) beside the peak the run measured on its cpu device, as a markdown
table for bench/RESULTS.md. Usage: python3 bench/plan_memory.py [path/to/tandem] > table.md"""
import os
import re
import subprocess
import sys
import tempfile

TANDEM = sys.argv[1] if len(sys.argv) > 1 else "build/tools/tandem"
SMALL = "--n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch-size 8"
WIDER = "--n-layer 2 --n-head 4 --n-embd 64 --block-size 32 --batch-size 16"
LAYOUTS = [  # (ranks, flags)
    (1, SMALL), (1, SMALL + " --activation-checkpointing"), (1, SMALL + " --dropout 0.1"),
    (1, WIDER), (1, WIDER + " --activation-checkpointing"),
    (2, SMALL + " --ddp"), (2, SMALL + " --ddp --activation-checkpointing"),
    (2, SMALL + " --ddp --zero 1"), (2, SMALL + " --ddp --zero 2"), (2, SMALL + " --ddp --zero 3"),
    (2, WIDER + " --ddp --zero 3 --activation-checkpointing"), (2, WIDER + " --ddp --zero 2"),
    (2, SMALL + " --tp 2"), (2, SMALL + " --tp 2 --sequence-parallel"),
    (2, WIDER + " --tp 2 --sequence-parallel --activation-checkpointing"),
    (2, SMALL + " --pp 2 --chunks 4 --pipeline-schedule gpipe"),
    (2, SMALL + " --pp 2 --chunks 4 --pipeline-schedule 1f1b"),
    (2, SMALL + " --pp 2 --chunks 4 --pipeline-schedule interleaved"),
    (2, SMALL + " --pp 2 --chunks 4 --pipeline-schedule zb-h1"),
    (2, SMALL + " --pp 2 --chunks 4 --pipeline-schedule zb-v"),
    (2, SMALL + " --pp 2 --chunks 4 --pipeline-schedule dualpipev"),
    (2, WIDER + " --pp 2 --chunks 8 --pipeline-schedule 1f1b --activation-checkpointing"),
    (2, SMALL + " --cp 2"), (2, SMALL + " --cp 2 --cp-algorithm ulysses"),
    (2, SMALL + " --cp 2 --zero 1"), (2, WIDER + " --cp 2 --zero 3"),
    (4, SMALL + " --ddp"), (4, SMALL + " --ddp --zero 1"), (4, SMALL + " --ddp --zero 3"),
    (4, SMALL + " --tp 2 --zero 1"), (4, SMALL + " --tp 2 --sequence-parallel --zero 2"),
    (4, SMALL + " --tp 2 --zero 3"), (4, SMALL + " --pp 2 --chunks 2 --zero 1"),
    (4, SMALL + " --pp 2 --chunks 2 --zero 3"), (4, SMALL + " --pp 2 --tp 2 --chunks 4"),
    (4, SMALL + " --cp 2 --tp 2"), (4, SMALL + " --cp 2 --zero 3"),
    (4, SMALL + " --cp 2 --pp 2 --chunks 2"), (4, SMALL.replace("--n-head 2", "--n-head 4") + " --tp 4"),
    (4, WIDER + " --pp 4 --chunks 8 --pipeline-schedule 1f1b"),
    (4, WIDER + " --pp 2 --chunks 4 --pipeline-schedule zb-v --zero 1"),
]
ROW = re.compile(r"^(?:\[rank0\]: )?  (\d+)[^\n]*?  [\d.]+ / [\d.]+  [\d.]+ / [\d.]+  [\d.]+ / [\d.]+"
                 r"  ([\d.]+) / ([\d.]+)  ([\d.]+)$", re.M)


def main():
    tmp = tempfile.mkdtemp()
    text = os.path.join(tmp, "text.txt")
    words = "the cat sat on a mat and dog ran to red big sun hid in box".split()
    with open(text, "w") as f:
        for i in range(400):
            f.write("The " + " ".join(words[(i * 7 + k * 3) % 16] for k in range(6)) + ". ")
    print("| # | ranks | layout (beside the model's sizes) | each rank's peak, predicted / measured (MiB) | worst ratio |")
    print("|---|---|---|---|---|")
    worst_all = 0.0
    for n, (ranks, flags) in enumerate(LAYOUTS, 1):
        cmd = [TANDEM] if ranks == 1 else [TANDEM, "launch", "--standalone", "--nproc-per-node",
                                           str(ranks), "--", TANDEM]
        cmd += (f"train --model gpt --text {text} --max-iters 2 --warmup-iters 1 --eval-interval 100 "
                f"--eval-iters 1 --log-dir {tmp}/log --predict {flags}").split()
        out = subprocess.run(cmd, capture_output=True, text=True).stdout
        rows = ROW.findall(out)
        if len(rows) != ranks:
            print(f"| {n} | {ranks} | `{flags}` | failed | |")
            continue
        ratios = [float(r[3]) for r in rows]
        worst = max(ratios, key=lambda r: abs(r - 1))
        worst_all = max(worst_all, abs(worst - 1))
        cells = ", ".join(f"{float(r[1]):.3f} / {float(r[2]):.3f}" for r in rows)
        layout = flags.replace(SMALL, "small").replace(WIDER, "wider")
        print(f"| {n} | {ranks} | `{layout}` | {cells} | {worst:.3f} |")
    print(f"\nworst |predicted / measured - 1| over every rank of every layout: {worst_all:.3f}")


if __name__ == "__main__":
    main()
