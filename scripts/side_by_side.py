#!/usr/bin/env python3
"""scripts/side_by_side.py - two chapters' --json outputs of one run as one markdown table.

    python3 scripts/side_by_side.py DIR BEFORE AFTER > DIR/side_by_side.md

DIR holds BEFORE.*.json and AFTER.*.json (e.g. 10_mixed_precision.sweep.json and
11_persistent_kernel.sweep.json, as `scripts/gpu_check.sh persistent` writes them), all
from one run on one GPU. One row per configuration both ran (B, N): each chapter's ms per
step, AFTER's time over BEFORE's, and each one's multiple of the HBM floor. The first line
names the GPU and the copy bandwidth measured in the run; a page shows the table through a
<!-- measured:PATH:begin --> block (scripts/render_results.py).
"""

import glob
import json
import os
import sys


def rows_of(directory, chapter):
    """{(B, N): configuration} over every DIR/CHAPTER.*.json, and the files' device line."""
    rows, device, bandwidth = {}, None, None
    for path in sorted(glob.glob(os.path.join(directory, f"{chapter}.*.json"))):
        with open(path, encoding="utf-8") as file:
            report = json.load(file)
        device = report.get("device", device)
        bandwidth = report.get("copy_bandwidth_bytes_per_s", bandwidth)
        for configuration in report["configurations"]:
            rows[(configuration["batch"], configuration["new_tokens"])] = configuration
    if not rows:
        sys.exit(f"side_by_side.py: no {chapter}.*.json in {directory}")
    return rows, device, bandwidth


def times_floor(configuration):
    """ms per step over the HBM floor's ms per step (the chapter's own, from its run)."""
    floor_ms = 1e3 * configuration["floor_s"] / configuration["steps"]
    return configuration["ms_per_step"] / floor_ms


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: side_by_side.py DIR BEFORE AFTER")
    directory, before, after = sys.argv[1:]
    before_rows, device, bandwidth = rows_of(directory, before)
    after_rows, after_device, _ = rows_of(directory, after)
    if device != after_device:
        sys.exit(f"side_by_side.py: {before} ran on {device}, {after} on {after_device}: "
                 "two runs, not one")
    print(f"{device.split(' | ')[0]}, copy bandwidth {bandwidth / 1e12:.2f} TB/s in the run")
    print()
    print(f"| B | N | {before} ms/step | {after} ms/step | {after} / {before} "
          f"| {before} x floor | {after} x floor |")
    print("|--:|--:|--:|--:|--:|--:|--:|")
    for key in sorted(set(before_rows) & set(after_rows), key=lambda k: (k[1], k[0])):
        b, a = before_rows[key], after_rows[key]
        print(f"| {key[0]} | {key[1]} | {b['ms_per_step']:.3f} | {a['ms_per_step']:.3f} "
              f"| {a['ms_per_step'] / b['ms_per_step']:.2f} | {times_floor(b):.2f} "
              f"| {times_floor(a):.2f} |")


if __name__ == "__main__":
    main()
