#!/usr/bin/env python3
"""scripts/render_roofline.py - the ladder on its GPU's roofline, from committed results.

    python3 scripts/render_roofline.py          # docs/roofline.md, docs/images/roofline_b*.svg
    python3 scripts/render_roofline.py --check  # fails if they do not match results/latest

One plot per batch size of the sweep (N = 100): each chapter's decode step as a point,
x = the step's arithmetic intensity (FLOP per step over the bytes a step must move, the
floor's bytes: common/benchmark.cpp's floor_bytes), y = the FLOP rate it achieved (FLOP
per step over the committed median time per step). Under the roofs: the copy bandwidth
measured in the same run (memory roof) and the GPU's peak rates (compute roofs: the
H100 SXM's and the H200's, which are the same; run.json names the GPU).

The FLOP count is this script's model of the useful work of a cached decode step, the
same for every chapter (a chapter that computes more, like chapter 01's whole-sequence
forward, shows as a lower achieved rate, not as more FLOP):
  2 B (12 n_layer C^2 + C V)          the 49 products (weights once per row) and LM head
  + 4 B C n_layer T                   attention scores and weighted values over T positions
for the step that feeds the token at position T - 1, summed over the run's steps.
The SVGs are written by hand (no plotting library), so they are the same byte for byte
on every machine.
"""

import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results", "latest")
PAGE = os.path.join(ROOT, "docs", "roofline.md")
IMAGES = os.path.join(ROOT, "docs", "images")
NEW_TOKENS = 100

# GPT-2 small (the chapters' default model).
N_LAYER, C, V = 12, 768, 50257

# Peak rates of the H100 SXM and the H200, dense (no sparsity): NVIDIA's H100 and H200
# Tensor Core GPU datasheets give both the same (FP32 67 TFLOPS; TF32 Tensor Core 989 and
# BF16 1,979 TFLOPS are quoted with sparsity, half of that dense). Not measured here.
PEAK_GPUS = ("H100", "H200")
# The roof a chapter is held to is the peak of the arithmetic it runs on (its JSON's
# "precision"): fp32 on the CUDA cores; bf16 on the tensor cores (chapter 10's products).
PEAK_OF_PRECISION = {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989e12}
PEAKS = [("fp32 (CUDA cores) 67 TFLOP/s", 67e12),
         ("TF32 tensor cores 495 TFLOP/s", 494.5e12),
         ("bf16 tensor cores 989 TFLOP/s", 989e12)]


def fail(message):
    print(f"render_roofline.py: error: {message}", file=sys.stderr)
    sys.exit(1)


def step_flop(batch, prompt_length, steps):
    """FLOP per step, mean over the run (the model in the module docstring)."""
    products = 2.0 * batch * (12.0 * N_LAYER * C * C + C * V)
    total = 0.0
    for step in range(steps):
        positions = prompt_length + step
        total += products + 4.0 * batch * C * N_LAYER * positions
    return total / steps


def points():
    """{batch: [(chapter, title, intensity, flop_per_s, ms_per_step, idle us, precision)]},
    bandwidth."""
    by_batch = {}
    bandwidths = []
    names = sorted(name for name in os.listdir(RESULTS)
                   if name[:2].isdigit() and name.endswith(".json"))
    if not names:
        fail(f"no chapter results in {RESULTS}")
    for name in names:
        report = json.load(open(os.path.join(RESULTS, name), encoding="utf-8"))
        bandwidth = report["copy_bandwidth_bytes_per_s"]
        bandwidths.append(bandwidth)
        for row in report["configurations"]:
            if row["new_tokens"] != NEW_TOKENS:
                continue
            steps = row["steps"]
            seconds_per_step = row["median_s"] / steps
            flop = step_flop(row["batch"], row["prompt_length"], steps)
            floor_bytes = row["floor_s"] * bandwidth / steps
            idle = row.get("gpu_idle_s_per_step", -1)
            by_batch.setdefault(row["batch"], []).append(
                (report["chapter"], report["title"], flop / floor_bytes, flop / seconds_per_step,
                 seconds_per_step * 1e3, idle * 1e6 if idle >= 0 else None,
                 report.get("precision", "fp32")))
    for rows in by_batch.values():
        rows.sort()
    return by_batch, min(bandwidths)


# ---------------------------------------------------------------- the SVG

WIDTH, HEIGHT = 640, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 200, 30, 50
X_RANGE = (0.1, 1000.0)   # FLOP per byte
Y_RANGE = (1e10, 2e15)    # FLOP per second


def to_x(value):
    low, high = (math.log10(v) for v in X_RANGE)
    return LEFT + (math.log10(value) - low) / (high - low) * (WIDTH - LEFT - RIGHT)


def to_y(value):
    low, high = (math.log10(v) for v in Y_RANGE)
    return HEIGHT - BOTTOM - (math.log10(value) - low) / (high - low) * (HEIGHT - TOP - BOTTOM)


def gpu_name():
    """The run's GPU in short ("H100"), from results/latest/run.json: the roofs are its."""
    path = os.path.join(RESULTS, "run.json")
    try:
        with open(path, encoding="utf-8") as handle:
            gpu = json.load(handle).get("gpu", "")
    except (OSError, ValueError) as error:
        fail(f"{os.path.relpath(path, ROOT)}: {error}")
    words = set(gpu.split())
    if "PCIe" not in words and "NVL" not in words:  # their rates are lower than the SXM's
        for name in PEAK_GPUS:
            if name in words:
                return name
    fail(f"run.json names GPU '{gpu}': this script knows the peak rates of the H100 SXM and "
         "the H200 only (add its datasheet's dense rates)")


def svg(batch, rows, bandwidth, gpu):
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
             f'<text x="{LEFT}" y="18" font-size="13">GPT-2 small decode step on the {gpu}, '
             f'B = {batch}, N = {NEW_TOKENS} (fp32; log-log)</text>']
    for exponent in range(-1, 4):  # x grid: 0.1 .. 1000 FLOP/byte
        x = to_x(10.0 ** exponent)
        parts.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" '
                     'stroke="#ddd"/>')
        parts.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 15}" text-anchor="middle">'
                     f'{10.0 ** exponent:g}</text>')
    for exponent in range(10, 16):  # y grid: 10 GFLOP/s .. 1 PFLOP/s
        y = to_y(10.0 ** exponent)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" '
                     'stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 5}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{10.0 ** (exponent - 12):g} T</text>')
    parts.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 12}" '
                 'text-anchor="middle">FLOP per byte the step must move</text>')
    parts.append(f'<text x="16" y="{(TOP + HEIGHT - BOTTOM) / 2:.0f}" text-anchor="middle" '
                 f'transform="rotate(-90 16 {(TOP + HEIGHT - BOTTOM) / 2:.0f})">'
                 'FLOP/s achieved</text>')
    # Roofs: min(bandwidth * intensity, peak), one line per peak rate.
    colors = ["#333", "#888", "#bbb"]
    for (label, peak), color in zip(PEAKS, colors):
        ridge = peak / bandwidth
        x0, x1 = X_RANGE
        path = [(x0, bandwidth * x0), (ridge, peak), (x1, peak)]
        if ridge > x1:
            path = [(x0, bandwidth * x0), (x1, bandwidth * x1)]
        coords = " ".join(f"{to_x(x):.1f},{to_y(min(y, Y_RANGE[1])):.1f}" for x, y in path)
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" '
                     'stroke-width="1.5"/>')
        parts.append(f'<text x="{WIDTH - RIGHT + 4}" y="{to_y(peak) + 4:.1f}" fill="{color}">'
                     f'{label}</text>')
    slope = math.degrees(math.atan2(to_y(1.0) - to_y(10.0), to_x(10.0) - to_x(1.0)))
    label_x, label_y = to_x(0.15), to_y(bandwidth * 0.15) - 6
    parts.append(f'<text x="{label_x:.1f}" y="{label_y:.1f}" '
                 f'transform="rotate({-slope:.1f} {label_x:.1f} {label_y:.1f})">'
                 f'copy bandwidth {bandwidth / 1e12:.2f} TB/s (measured)</text>')
    # Labels to the right of the points, at least 12 px apart, with a leader line.
    placed = []
    for chapter, _, intensity, rate, _, _, _ in sorted(rows, key=lambda row: -row[3]):
        x, y = to_x(intensity), to_y(rate)
        text_y = max(y + 4, placed[-1] + 12) if placed else y + 4
        placed.append(text_y)
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="#c33"/>')
        parts.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x + 22:.1f}" y2="{text_y - 4:.1f}" '
                     'stroke="#c33" stroke-width="0.6"/>')
        parts.append(f'<text x="{x + 25:.1f}" y="{text_y:.1f}" fill="#c33">{chapter}</text>')
    parts.append(f'<text x="{WIDTH - RIGHT + 4}" y="{HEIGHT - BOTTOM}" fill="#c33">'
                 'chapters (committed medians)</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------- the page

def page(by_batch, bandwidth, gpu):
    lines = ["# The ladder on a roofline {#roofline}", "",
             "<!-- Generated by scripts/render_roofline.py from results/latest; do not edit by",
             "     hand (CTest runs it with --check). -->", "",
             f"Each chapter's decode step as a point under the {gpu}'s roofs, one picture per batch",
             f"size (N = {NEW_TOKENS} new tokens, fp32). **x**: FLOP per step over the bytes a",
             "step must move (the floor's bytes: every weight once, the token embedding again as",
             "the LM head, the KV cache so far, the logits); **y**: FLOP per step over the",
             "committed median time per step. **FLOP** is the script's model of a cached decode",
             "step's useful work, the same for every chapter: 2B(12 n_layer C^2 + C V) for the",
             "products and the LM head, plus 4 B C n_layer T for attention over T positions",
             "(chapter 01 computes more than",
             "that; it shows as a lower rate). **Roofs**: the copy bandwidth measured in the run",
             "(the lowest of the chapters' runs), and the peak rates of NVIDIA's datasheets",
             "(the same for the H100 SXM and the H200), dense: fp32 67, TF32 495, bf16 989",
             "TFLOP/s (not measured here).",
             "**roof** below is the lower of the bandwidth roof and the compute roof of the",
             "chapter's arithmetic (fp32 for chapters 01-09, bf16 tensor cores for 10 and 11) at",
             "the step's intensity; **GPU idle** the GPU's idle time per step in the traced run (CUPTI; the",
             "tracing slows the host, so the timed runs likely idle less).", ""]
    for batch in sorted(by_batch):
        rows = by_batch[batch]
        lines += [f"## B = {batch}", "",
                  f"![roofline, B = {batch}](images/roofline_b{batch}.svg)", "",
                  "| chapter | prec | ms/step | FLOP/byte | achieved TFLOP/s | roof TFLOP/s | "
                  "share of roof | GPU idle us/step |",
                  "|---|---|--:|--:|--:|--:|--:|--:|"]
        for chapter, title, intensity, rate, ms, idle, precision in rows:
            if precision not in PEAK_OF_PRECISION:
                fail(f"{chapter}: precision '{precision}' has no compute roof")
            roof = min(bandwidth * intensity, PEAK_OF_PRECISION[precision])
            idle_text = f"{idle:.0f}" if idle is not None else "-"
            lines.append(f"| {chapter} ({title}) | {precision} | {ms:.3f} | {intensity:.2f} | "
                         f"{rate / 1e12:.2f} | {roof / 1e12:.1f} | {100 * rate / roof:.1f}% | "
                         f"{idle_text} |")
        lines.append("")
    lines += ["Reading it: below the fp32 ridge (67 TFLOP/s over the copy bandwidth, about "
              f"{PEAK_OF_PRECISION['fp32'] / bandwidth:.0f}",
              "FLOP per byte) a step is bound by the bytes it moves; a point far under its roof",
              "whose GPU idles for a large part of the step waits on launches (the host), one far",
              "under with the GPU busy waits on its kernels (for these chapters: cuBLASLt's fp32",
              "products at M = B rows). The next rungs move points up toward the roof: fewer",
              "launches (CUDA graphs), then decode matmuls that stream each weight byte once.", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="fail if docs/roofline.md or its SVGs do not match results/latest")
    arguments = parser.parse_args()
    by_batch, bandwidth = points()
    gpu = gpu_name()
    files = {PAGE: page(by_batch, bandwidth, gpu)}
    for batch, rows in by_batch.items():
        files[os.path.join(IMAGES, f"roofline_b{batch}.svg")] = svg(batch, rows, bandwidth, gpu)
    stale = []
    for path, text in sorted(files.items()):
        if arguments.check:
            current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
            if current != text:
                stale.append(os.path.relpath(path, ROOT))
        else:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
            print(f"wrote {os.path.relpath(path, ROOT)}")
    if stale:
        print("render_roofline.py: stale, run python3 scripts/render_roofline.py: " +
              ", ".join(stale), file=sys.stderr)
        return 1
    if arguments.check:
        print(f"roofline: {len(files)} files current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
