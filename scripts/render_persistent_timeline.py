#!/usr/bin/env python3
"""scripts/render_persistent_timeline.py - one step of chapter 11's persistent kernel, drawn.

    LADDER_PERSISTENT_TIMELINE=/tmp/step.csv build/current/chapters/11_persistent_kernel \\
        --batch 1 --new-tokens 100 --runs 1 --warmup 1
    python3 scripts/render_persistent_timeline.py /tmp/step.csv OUT.svg OUT.md [--layer L]

The CSV (chapters/11_persistent_kernel/persistent_kernel.cpp, write_timeline) holds, for
every instruction of the generation's middle step, its block and when it was taken up,
when its waits were over and when it had signalled (ns from the step's first stamp).
OUT.svg: blocks (rows) against time, one bar per instruction, pale while it waits for its
counters and coloured by op while it works and signals. OUT.md: per op, how many
instructions, and the mean and the largest microseconds spent waiting and working; and the
step's span. With --layer L the picture holds layer L's instructions only, over the time
they span (the table still sums the whole step). Needs no GPU and nothing beyond Python's standard library.
"""

import csv
import statistics
import sys

OPS = {0: "embedding", 1: "LayerNorm", 2: "product", 3: "attention", 4: "argmax", 5: "stop"}
COLOURS = {0: "#8c564b", 1: "#2ca02c", 2: "#1f77b4", 3: "#ff7f0e", 4: "#9467bd", 5: "#d62728"}


def read(path):
    with open(path, newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    if not rows:
        sys.exit(f"render_persistent_timeline.py: {path} holds no instruction")
    for row in rows:
        for key in ("instruction", "block", "op", "layer", "taken_up_ns", "ready_ns", "done_ns"):
            row[key] = int(row[key])
        if not row["taken_up_ns"] <= row["ready_ns"] <= row["done_ns"]:
            sys.exit(f"render_persistent_timeline.py: instruction {row['instruction']}: its "
                     "stamps are out of order")
    return rows


def svg(rows, width=960, row_height=3, layer=None):
    blocks = max(row["block"] for row in rows) + 1
    title = "one decode step"
    if layer is not None:
        rows = [row for row in rows if row["layer"] == layer]
        if not rows:
            sys.exit(f"render_persistent_timeline.py: no instruction of layer {layer}")
        title = f"layer {layer} of one decode step"
    start = min(row["taken_up_ns"] for row in rows) if layer is not None else 0
    span = (max(row["done_ns"] for row in rows) - start) or 1
    left, top = 50, 20
    height = top + blocks * row_height + 30
    scale = (width - left - 10) / span
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="14">{title}, {blocks} blocks (rows), '
             f'{span / 1e3:.1f} µs; pale: waiting for counters</text>']
    for row in rows:
        y = top + row["block"] * row_height
        x0 = left + (row["taken_up_ns"] - start) * scale
        x1 = left + (row["ready_ns"] - start) * scale
        x2 = left + (row["done_ns"] - start) * scale
        colour = COLOURS.get(row["op"], "#7f7f7f")
        parts.append(f'<rect x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 0.2):.1f}" '
                     f'height="{row_height}" fill="{colour}" fill-opacity="0.25"/>')
        parts.append(f'<rect x="{x1:.1f}" y="{y}" width="{max(x2 - x1, 0.2):.1f}" '
                     f'height="{row_height}" fill="{colour}"/>')
    axis = top + blocks * row_height + 14
    for tick in range(0, 11):
        x = left + span * tick / 10 * scale
        parts.append(f'<text x="{x:.0f}" y="{axis}" text-anchor="middle">'
                     f'{span * tick / 10 / 1e3:.0f}</text>')
    parts.append(f'<text x="{width - 10}" y="{axis + 12}" text-anchor="end">µs</text>')
    legend = left
    for op, name in OPS.items():
        parts.append(f'<rect x="{legend}" y="{axis + 4}" width="10" height="8" '
                     f'fill="{COLOURS[op]}"/><text x="{legend + 13}" y="{axis + 12}">{name}</text>')
        legend += 90
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def summary(rows):
    span = max(row["done_ns"] for row in rows) - min(row["taken_up_ns"] for row in rows)
    lines = [f"One decode step: {len(rows)} instructions on "
             f"{max(row['block'] for row in rows) + 1} blocks, {span / 1e3:.1f} µs from the "
             "first taken up to the last signalled", "",
             "| op | instructions | waiting µs, mean | waiting µs, most | working µs, mean "
             "| working µs, most |", "|---|--:|--:|--:|--:|--:|"]
    for op, name in OPS.items():
        mine = [row for row in rows if row["op"] == op]
        if not mine:
            continue
        waits = [(row["ready_ns"] - row["taken_up_ns"]) / 1e3 for row in mine]
        works = [(row["done_ns"] - row["ready_ns"]) / 1e3 for row in mine]
        lines.append(f"| {name} | {len(mine)} | {statistics.mean(waits):.2f} | {max(waits):.2f} "
                     f"| {statistics.mean(works):.2f} | {max(works):.2f} |")
    return "\n".join(lines) + "\n"


def main():
    arguments = sys.argv[1:]
    layer = None
    if len(arguments) == 5 and arguments[3] == "--layer":
        try:
            layer = int(arguments[4])
        except ValueError:
            sys.exit(f"render_persistent_timeline.py: --layer takes a layer number, not "
                     f"'{arguments[4]}'")
        arguments = arguments[:3]
    if len(arguments) != 3:
        sys.exit("usage: render_persistent_timeline.py TIMELINE.csv OUT.svg OUT.md [--layer L]")
    rows = read(arguments[0])
    with open(arguments[1], "w", encoding="utf-8") as file:
        file.write(svg(rows, layer=layer))
    with open(arguments[2], "w", encoding="utf-8") as file:
        file.write(summary(rows))


if __name__ == "__main__":
    main()
