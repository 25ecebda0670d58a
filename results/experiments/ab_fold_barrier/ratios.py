#!/usr/bin/env python3
"""Each chapter's ms a step over variant a's in the same round, from ab/V.rR.CH.bB.json.
python3 ratios.py > ratios.md"""
import json
import sys
from pathlib import Path

here = Path(sys.argv[0]).resolve().parent


def ms_per_step(variant, rounds, chapter, batch):
    path = here / "ab" / f"{variant}.r{rounds}.{chapter}.b{batch}.json"
    return json.loads(path.read_text())["configurations"][0]["ms_per_step"]


print("| chapter, B | a (ms a step, rounds 1 / 2) | b / a (rounds 1 / 2) | c / a (rounds 1 / 2) |")
print("|---|--:|--:|--:|")
for chapter in ("09", "10"):
    for batch in (1, 2, 8, 32):
        a = [ms_per_step("a", r, chapter, batch) for r in (1, 2)]
        ratio = {v: [ms_per_step(v, r, chapter, batch) / a[r - 1] for r in (1, 2)] for v in "bc"}
        print(f"| {chapter}, B = {batch} | {a[0]:.4f} / {a[1]:.4f} | "
              f"{ratio['b'][0]:.3f} / {ratio['b'][1]:.3f} | {ratio['c'][0]:.3f} / {ratio['c'][1]:.3f} |")
