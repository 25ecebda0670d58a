#!/usr/bin/env python3
"""scripts/ncu_step_table.py - the kernels of one profiled step, grouped by kernel and grid,
from Nsight Compute's raw CSV (ncu ... --csv --page raw --print-units base > FILE.csv,
with the metrics gpu__time_duration.sum and dram__bytes_read.sum).

    python3 scripts/ncu_step_table.py FILE.csv [FILE.csv ...] > kernels.md

Per file a Markdown table: kernel (template arguments kept, namespaces dropped), grid,
launches, µs in all, µs a launch, DRAM MB read; slowest group first, the step's total
last. Lines ncu or the program printed around the CSV are skipped. Exits 1 with one line
when a file holds no CSV or lacks one of those columns.
"""
import csv
import io
import re
import sys


def number(text):
    return float(text.replace(",", ""))


def table(path):
    lines = [line for line in open(path, encoding="utf-8", errors="replace").read().splitlines()
             if line.startswith('"')]
    if not lines:
        sys.exit(f"ncu_step_table.py: {path} holds no ncu CSV")
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header = rows[0]
    try:
        name_at, grid_at = header.index("Kernel Name"), header.index("Grid Size")
        time_at = header.index("gpu__time_duration.sum")
        read_at = header.index("dram__bytes_read.sum")
    except ValueError as error:
        sys.exit(f"ncu_step_table.py: {path}: {error}")
    groups = {}
    for row in rows[1:]:
        try:
            nanoseconds, read = number(row[time_at]), number(row[read_at])
        except (ValueError, IndexError):
            continue  # the units row
        name = re.sub(r"^void |<?unnamed>::|\(anonymous namespace\)::|ladder::|decode_common::", "",
                      row[name_at]).split("(")[0]
        group = groups.setdefault((name, row[grid_at]), [0, 0.0, 0.0])
        group[0] += 1
        group[1] += nanoseconds / 1e3
        group[2] += read / 1e6
    print(f"`{path}`\n")
    print("| kernel | grid | launches | µs | µs a launch | DRAM MB read |")
    print("|---|---|--:|--:|--:|--:|")
    for (name, grid), (count, micros, megabytes) in sorted(groups.items(), key=lambda g: -g[1][1]):
        print(f"| `{name}` | {grid} | {count} | {micros:.1f} | {micros / count:.2f} | {megabytes:.2f} |")
    launches = sum(g[0] for g in groups.values())
    print(f"| all | | {launches} | {sum(g[1] for g in groups.values()):.1f} | | "
          f"{sum(g[2] for g in groups.values()):.2f} |\n")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python3 scripts/ncu_step_table.py FILE.csv [FILE.csv ...]")
    for argument in sys.argv[1:]:
        table(argument)
