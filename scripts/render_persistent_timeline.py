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
step's span. Then the chain of a layer, phase by phase (ln_1, the qkv product, attention,
its projection, ln_2, c_fc, the MLP projection), each averaged over the layers: from its
first instruction's inputs being ready to its last signal (the phase's span), the median
instruction's work, the work of the instruction that signals last (the one the next phase
waits for), and the time from the phase before's last signal to this phase's first ready
instruction (the handover; below zero where a phase starts on part of its inputs); and a
layer's time, ln_1 to ln_1. With --layer L the picture holds layer L's instructions only,
over the time they span (the tables still cover the whole step). Needs no GPU and nothing
beyond Python's standard library.
"""

import csv
import statistics
import sys

OPS = {0: "embedding", 1: "LayerNorm", 2: "product", 3: "attention", 4: "argmax", 5: "stop"}
# A layer's phases in the order of its chain: (name, op, words its description holds: the
# CSV's `what`, written by describe() in common/persistent_schedule.cpp).
PHASES = [("ln_1", 1, "ln_1 "), ("qkv product", 2, "qkv product"), ("attention", 3, "attention"),
          ("attention projection", 2, "attention projection"), ("ln_2", 1, "ln_2 "),
          ("c_fc", 2, "c_fc"), ("MLP projection", 2, "MLP projection,")]
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


def phase_of(row):
    """The index into PHASES of a layer's instruction, or None (outside the layers)."""
    if row["layer"] < 0:
        return None
    for index, (_, op, words) in enumerate(PHASES):
        if row["op"] == op and words in row["what"]:
            return index
    return None


def phases(rows):
    """The chain of a layer, phase by phase, averaged over the layers of the step."""
    by_phase = {}
    for row in rows:
        index = phase_of(row)
        if index is not None:
            by_phase.setdefault((row["layer"], index), []).append(row)
    layers = sorted({layer for layer, _ in by_phase})
    complete = [layer for layer in layers
                if all((layer, index) in by_phase for index in range(len(PHASES)))]
    if not complete:
        return ""
    columns = {index: {"count": [], "span": [], "median": [], "last": [], "handover": []}
               for index in range(len(PHASES))}
    for layer in complete:
        previous_end = None
        if layer - 1 in complete:
            previous_end = max(row["done_ns"] for row in by_phase[(layer - 1, len(PHASES) - 1)])
        for index in range(len(PHASES)):
            mine = by_phase[(layer, index)]
            start = min(row["ready_ns"] for row in mine)
            last = max(mine, key=lambda row: row["done_ns"])
            column = columns[index]
            column["count"].append(len(mine))
            column["span"].append((last["done_ns"] - start) / 1e3)
            column["median"].append(statistics.median(
                (row["done_ns"] - row["ready_ns"]) / 1e3 for row in mine))
            column["last"].append((last["done_ns"] - last["ready_ns"]) / 1e3)
            if previous_end is not None:
                column["handover"].append((start - previous_end) / 1e3)
            previous_end = last["done_ns"]
    first_ln = {layer: min(row["ready_ns"] for row in by_phase[(layer, 0)]) for layer in complete}
    layer_times = [(first_ln[layer + 1] - first_ln[layer]) / 1e3
                   for layer in complete if layer + 1 in first_ln]
    lines = ["", f"The chain of a layer, phase by phase: means over layers {complete[0]} to "
             f"{complete[-1]} (µs)", "",
             "| phase | instructions | span | work, median | work of the last to signal | "
             "handover from the phase before |", "|---|--:|--:|--:|--:|--:|"]
    for index, (name, _, _) in enumerate(PHASES):
        column = columns[index]
        handover = (f"{statistics.mean(column['handover']):.2f}" if column["handover"]
                    else "-")
        lines.append(f"| {name} | {round(statistics.mean(column['count']))} | "
                     f"{statistics.mean(column['span']):.2f} | "
                     f"{statistics.mean(column['median']):.2f} | "
                     f"{statistics.mean(column['last']):.2f} | {handover} |")
    if layer_times:
        lines += ["", f"A layer, from its ln_1's first ready row to the next layer's: "
                  f"{statistics.mean(layer_times):.2f} µs on average "
                  f"({min(layer_times):.2f} to {max(layer_times):.2f})."]
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
        file.write(summary(rows) + phases(rows))


if __name__ == "__main__":
    main()
