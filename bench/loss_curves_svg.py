#!/usr/bin/env python3
"""bench/loss_curves_svg.py — the validation loss of several `tandem train --model gpt` runs on one
chart, as a self-contained SVG (no dependency beyond Python's standard library).

    python3 bench/loss_curves_svg.py OUT.svg "dense GPT=runs/a/metrics.jsonl" "MoE=runs/b/metrics.jsonl"

Each run's "eval" records (its evaluations: step, validation loss) make one polyline, labelled.
"""
import json
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def curve(path):
    points = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("split") == "eval":
                points.append((r["step"], r["loss"]))
    return points


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, runs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
    curves = [(label, curve(path)) for label, path in runs]
    xs = [x for _, c in curves for x, _ in c]
    ys = [y for _, c in curves for _, y in c[1:]]  # from the first evaluation after step 0
    x0, x1, y0, y1 = min(xs), max(xs), min(ys) - 0.05, max(ys) + 0.05
    w, h, left, bottom = 640, 360, 60, 40
    sx = lambda x: left + (x - x0) / (x1 - x0) * (w - left - 20)
    sy = lambda y: h - bottom - (min(y, y1) - y0) / (y1 - y0) * (h - bottom - 20)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - 20}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="20" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 8}" text-anchor="middle">iteration</text>',
           f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" '
           'text-anchor="middle">validation loss</text>']
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        svg.append(f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
        x = x0 + (x1 - x0) * i / 4
        svg.append(f'<text x="{sx(x):.1f}" y="{h - bottom + 16}" text-anchor="middle">'
                   f'{int(x)}</text>')
    for k, (label, c) in enumerate(curves):
        color = COLORS[k % len(COLORS)]
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in c[1:])
        svg.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>')
        last = c[-1]
        # Bottom left: early losses are high, so the curves leave that corner empty.
        svg.append(f'<text x="{left + 16}" y="{h - bottom - 16 - 16 * (len(curves) - 1 - k)}" '
                   f'fill="{color}">{label}: {last[1]:.4f} at {last[0]}</text>')
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
