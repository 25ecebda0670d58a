#!/usr/bin/env python3
"""Per-kernel GPU time (ncu's gpu__time_duration, kernels serialized) of chapter 09's first
decode step, launched plainly before the generation graph is captured: the tree without
the fold (a.b1.csv) against the fold (c.b1.csv).  python3 summarize.py > summary.txt"""
import collections
import csv
import statistics
import sys
from pathlib import Path


def kernels(path):
    rows = [row for row in csv.reader(open(path)) if len(row) > 10]
    header, rows = rows[0], rows[1:]
    name, unit, value = (header.index(k) for k in ("Kernel Name", "Metric Unit", "Metric Value"))
    scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "nsecond": 1e-3, "ms": 1e3}
    return [(row[name].split("(")[0].replace("void ", "").replace("unnamed>::", ""),
             float(row[value].replace(",", "")) * scale[row[unit]]) for row in rows]


def decode_step(launches):
    """The launches after the prefill's argmax up to and including the decode step's."""
    ends = [i for i, (n, _) in enumerate(launches) if n.startswith("argmax_step_kernel")]
    return launches[ends[0] + 1:ends[1] + 1]


here = Path(sys.argv[0]).resolve().parent
for label, file in (("without the fold", "a.b1.csv"), ("with the fold", "c.b1.csv")):
    step = decode_step(kernels(here / file))
    print(f"## {label} ({file}): {len(step)} launches, {sum(t for _, t in step):.1f} us summed")
    totals, counts = collections.defaultdict(float), collections.Counter()
    for n, t in step:
        totals[n] += t
        counts[n] += 1
    for n in totals:
        print(f"  {n:45s} {counts[n]:3d} launches {totals[n]:7.1f} us")
    products = [t for n, t in step if n.startswith("decode_matmul")]
    for index, product in enumerate(("c_attn", "c_proj", "c_fc", "mlp_proj")):
        times = products[index:48:4]
        print(f"  {product:9s} median of 12 layers {statistics.median(times):5.2f} us")
    norms = [t for n, t in step if n.startswith("layernorm")]
    print(f"  LayerNorm median of {len(norms)} {statistics.median(norms):5.2f} us\n")
