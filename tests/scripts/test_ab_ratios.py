#!/usr/bin/env python3
"""tests/scripts/test_ab_ratios.py - scripts/ab_ratios.py reads the JSON files of an
ab_kernel.sh archive and prints every variant's ms a step over variant a's in the same
round, then from the bench outputs in it each product's µs per variant and round, with
the plans that differ from a's; the same chapters' table from the summary ab_kernel.sh
prints when its archive did not come back; a chapter run with a flag ("09 --tf32") from
either; the step timelines (LADDER_AB_TIMELINE) per kernel name and position, a step's
layers folded, and per name alone where the variants ran other kernels; an archive without them is refused with
one line and a non-zero exit.

    python3 tests/scripts/test_ab_ratios.py

Runs on any machine: the archive is made here."""
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from script_checks import SCRIPTS, add_to_archive as add, expect

SCRIPT = SCRIPTS / "ab_ratios.py"


def ab_ratios(source):
    """scripts/ab_ratios.py run on `source`: its exit status, stdout and stderr."""
    return subprocess.run([sys.executable, str(SCRIPT), str(source)], capture_output=True,
                          text=True)


with tempfile.TemporaryDirectory() as work:
    path = Path(work) / "ab.tar.gz"
    times = {("a", 1): 0.4, ("a", 2): 0.5, ("b", 1): 0.3, ("b", 2): 0.55}
    with tarfile.open(path, "w:gz") as archive:
        for (variant, round_), ms in times.items():
            for batch, scale in ((1, 1.0), (32, 2.0)):
                add(archive, f"ab/{variant}.r{round_}.10.b{batch}.json",
                    json.dumps({"configurations": [{"ms_per_step": ms * scale}]}))
        add(archive, "ab/a.r1.10.b1.txt", "not a result")
        # bench/decode_matmul's outputs, cut to what the script reads: a section per B.
        for (variant, round_), plan, us in ((("a", 1), "20 x 12", 9.5), (("a", 2), "20 x 12", 9.7),
                                            (("b", 1), "16 x 12", 8.5), (("b", 2), "16 x 12", 8.7)):
            add(archive, f"ab/{variant}.r{round_}.decode_matmul.txt",
                "NVIDIA H100 80GB HBM3 | sm_90\n\n"
                "## B = 1 rows: GPU us per product (GB/s of weight), median of 20 repeats\n\n"
                "| product | splits x tiles | copy floor | decode fp32 | decode tf32 | cuBLASLt fp32 |\n"
                "|---|--:|--:|--:|--:|--:|\n"
                "| c_proj    768 x 768 + bias + residual | 12 x 12 | 0.8 | 5.8 (408) | 6.9 (342) "
                "| 9.4 (252) |\n"
                f"| mlp proj 3072 x 768 + bias + residual | {plan} | 3.2 | {us} (991) | 11.9 (793) "
                "| 10.6 (892) |\n"
                "| step: sum over the 49 products | | 165.4 | 411.9 | 480.0 | 517.7 |\n\n"
                "## B = 1 rows: programmatic dependent launch, GPU us per graph (median of 20)\n\n"
                "| one layer's 4 products (4 launches) | fp32 | 28.1 | 24.7 | 0.86 |\n")
    result = ab_ratios(path)
    expect(result.returncode == 0, f"exit {result.returncode}: {result.stderr}")
    lines = result.stdout.splitlines()
    rows = lines[:lines.index("")]
    expect(rows[0].startswith("| chapter, B | a (ms a step, rounds 1 / 2) | b / a"),
           f"header {rows[0]!r}")
    expect(rows[2] == "| 10, B = 1 | 0.4000 / 0.5000 | 0.750 / 1.100 |", f"row {rows[2]!r}")
    expect(rows[3] == "| 10, B = 32 | 0.8000 / 1.0000 | 0.750 / 1.100 |", f"row {rows[3]!r}")
    expect(len(rows) == 4, f"{len(rows)} rows")
    products = lines[len(rows) + 1:]
    expect(products[0].startswith("| product, B | plan (splits x tiles) | a fp32 µs (rounds 1 / 2)"),
           f"products' header {products[0]!r}")
    expect(products[2] == "| c_proj, B = 1 | 12 x 12 | 5.8 / 5.8 | 5.8 / 5.8 | 6.9 / 6.9 | 6.9 / 6.9 |",
           f"products' row {products[2]!r}")
    expect(products[3] == "| mlp proj, B = 1 | 20 x 12, b: 16 x 12 | 9.5 / 9.7 | 8.5 / 8.7 "
           "| 11.9 / 11.9 | 11.9 / 11.9 |", f"products' row {products[3]!r}")
    expect(len(products) == 4, f"{len(products)} product rows: the sum and other tables read")

    console = Path(work) / "ab_console.txt"
    console.write_text(
        "== variant a: built in 29 s\n"
        "variant round | products summed (fp32 us) at B = 1, 32 | LM head B = 1 | "
        "10 B = 1 ms/step (hash) | 10 B = 32 ms/step (hash)\n"
        "a 1 | 400.0 700.0 | 54.4 | 0.4000 (27aa9af60aad315c) | 0.8000 (e378e1ee4baca7e5)\n"
        "b 1 | 410.0 690.0 | 54.4 | 0.3000 (27aa9af60aad315c) | 0.6000 (e378e1ee4baca7e5)\n"
        "a 2 | 400.0 700.0 | 54.4 | 0.5000 (27aa9af60aad315c) | 1.0000 (e378e1ee4baca7e5)\n"
        "b 2 | 410.0 690.0 | 54.4 | 0.5500 (27aa9af60aad315c) | 1.1000 (e378e1ee4baca7e5)\n"
        "\nchain variant round | the step's chain, fp32 us per graph\n"
        "chain a 1 | 459.4 / 440.5 | 835.6 / 801.4\n")
    result = ab_ratios(console)
    expect(result.returncode == 0, f"console: exit {result.returncode}: {result.stderr}")
    expect(result.stdout.splitlines() == rows, f"console: {result.stdout!r}")  # no products

    # A chapter run with a flag (LADDER_AB_CHAPTERS="09_decode_matmuls:tf32"): files
    # ab/V.rR.09-tf32.bB.json, summary columns "09 --tf32 B = ...": rows "09 --tf32, B = ...".
    flagged = Path(work) / "flagged.tar.gz"
    with tarfile.open(flagged, "w:gz") as archive:
        for variant, ms in (("a", 0.4), ("b", 0.3)):
            add(archive, f"ab/{variant}.r1.09.b1.json",
                json.dumps({"configurations": [{"ms_per_step": ms}]}))
            add(archive, f"ab/{variant}.r1.09-tf32.b1.json",
                json.dumps({"configurations": [{"ms_per_step": ms / 2}]}))
    flagged_rows = ["| chapter, B | a (ms a step, rounds 1) | b / a (rounds 1) |", "|---|--:|--:|",
                    "| 09, B = 1 | 0.4000 | 0.750 |", "| 09 --tf32, B = 1 | 0.2000 | 0.750 |"]
    result = ab_ratios(flagged)
    expect(result.stdout.splitlines() == flagged_rows, f"flagged archive: {result.stdout!r}")
    flagged_console = Path(work) / "flagged_console.txt"
    flagged_console.write_text(
        "variant round | products summed (fp32 us) at B = 1 | LM head B = 1 | "
        "09 B = 1 ms/step (hash) | 09 --tf32 B = 1 ms/step (hash)\n"
        "a 1 | 400.0 | 54.4 | 0.4000 (27aa9af60aad315c) | 0.2000 (27aa9af60aad315c)\n"
        "b 1 | 410.0 | 54.4 | 0.3000 (27aa9af60aad315c) | 0.1500 (27aa9af60aad315c)\n")
    result = ab_ratios(flagged_console)
    expect(result.stdout.splitlines() == flagged_rows, f"flagged console: {result.stdout!r}")

    # Step timelines (LADDER_AB_TIMELINE="64"): ab/V.rR.09-tf32.b64.timeline.txt as the
    # chapter prints them; b's first product ends 4 µs later and its second 1 µs later.
    def timeline(first, second, kernels=("embedding_kernel", "decode_matmul<64>", "layernorm",
                                         "decode_matmul<64>"), adds=None):
        adds = adds or dict(zip(range(4), (3.0, first, 2.0, second)))
        lines = ["batch 64, 20 new tokens: step 11 of the 21 traced (the prefill first), "
                 f"{len(kernels)} kernels, ...:", "  start us   end us  took us  adds us  kernel"]
        end = 0.0
        for i, kernel in enumerate(kernels):
            lines.append(f"  {end:8.1f} {end + adds[i]:8.1f} {adds[i]:8.1f} {adds[i]:8.1f}  {kernel}")
            end += adds[i]
        return "\n".join(lines + ["", "  batch  new tokens  ... (the table)"]) + "\n"

    timelines = Path(work) / "timelines.tar.gz"
    with tarfile.open(timelines, "w:gz") as archive:
        for (variant, round_), first, second in ((("a", 1), 10.0, 8.0), (("a", 2), 10.0, 8.0),
                                                 (("b", 1), 14.0, 9.0), (("b", 2), 14.0, 9.0)):
            add(archive, f"ab/{variant}.r{round_}.09-tf32.b64.json",
                json.dumps({"configurations": [{"ms_per_step": (first + second) / 1000}]}))
            add(archive, f"ab/{variant}.r{round_}.09-tf32.b64.timeline.txt", timeline(first, second))
    result = ab_ratios(timelines)
    expect(result.returncode == 0, f"timelines: exit {result.returncode}: {result.stderr}")
    section = result.stdout.split("## 09 --tf32, B = 64: one step's kernels (--step-timeline)\n")
    expect(len(section) == 2, f"timelines: no section for 09 --tf32 at B = 64: {result.stdout!r}")
    section = section[1]
    for line in ("- a: 4 kernels, the step's span 23.0 / 23.0 µs (rounds 1 / 2)",
                 "- b: 4 kernels, the step's span 28.0 / 28.0 µs (rounds 1 / 2)",
                 "| `embedding_kernel` | 3.0 | +0.0 |", "| `decode_matmul<64>` | 18.0 | +5.0 |",
                 "| `layernorm` | 2.0 | +0.0 |", "| 2 | `decode_matmul<64>` | 10.0 | +4.0 |",
                 "| 4 | `decode_matmul<64>` | 8.0 | +1.0 |"):
        expect(line in section.splitlines(), f"timelines: no line {line!r} in {section!r}")
    # Other kernels in b (one missing): totals per name, no positions.
    with tarfile.open(timelines, "w:gz") as archive:
        for variant, kernels in (("a", ("embedding_kernel", "decode_matmul<64>", "layernorm",
                                        "decode_matmul<64>")),
                                 ("b", ("embedding_kernel", "decode_matmul<64>", "decode_matmul<64>"))):
            add(archive, f"ab/{variant}.r1.09.b64.json",
                json.dumps({"configurations": [{"ms_per_step": 0.02}]}))
            add(archive, f"ab/{variant}.r1.09.b64.timeline.txt", timeline(10.0, 8.0, kernels))
    result = ab_ratios(timelines)
    expect("| `layernorm` | 2.0 | -2.0 |" in result.stdout.splitlines()
           and "The variants ran different kernels or in another order: no positions."
           in result.stdout and "| position |" not in result.stdout,
           f"timelines of other kernels: {result.stdout!r}")

    # A step of layers: an opening kernel, three layers of (layernorm, matmul), one kernel
    # after. b's matmuls each add 1 µs more: the fold sums them, 3 µs at "layer + 2".
    layered = ("embedding_kernel",) + ("layernorm", "decode_matmul<64>") * 3 + ("argmax",)
    with tarfile.open(timelines, "w:gz") as archive:
        for variant, extra in (("a", 0.0), ("b", 1.0)):
            adds = {i: (2.0 + extra if kernel == "decode_matmul<64>" else 1.0)
                    for i, kernel in enumerate(layered)}
            add(archive, f"ab/{variant}.r1.09.b8.json",
                json.dumps({"configurations": [{"ms_per_step": 0.01}]}))
            add(archive, f"ab/{variant}.r1.09.b8.timeline.txt", timeline(0, 0, layered, adds))
    result = ab_ratios(timelines)
    for line in ("Per position, kernels 2-7 folded: 3 layers of 2 kernels, each position summed "
                 "over them:", "| 1 | `embedding_kernel` | 1.0 | +0.0 |",
                 "| layer + 1 | `layernorm` | 3.0 | +0.0 |",
                 "| layer + 2 | `decode_matmul<64>` | 6.0 | +3.0 |", "| 8 | `argmax` | 1.0 | +0.0 |"):
        expect(line in result.stdout.splitlines(), f"layers folded: no line {line!r} in {result.stdout!r}")

    empty = Path(work) / "empty.tar.gz"
    with tarfile.open(empty, "w:gz") as archive:
        add(archive, "ab/a.r1.decode_matmul.txt", "no JSON here")
    result = ab_ratios(empty)
    expect(result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1,
           f"an archive without results: exit {result.returncode}, {result.stderr!r}")
print("test_ab_ratios: ratios per round read from the archive and from the console, the "
      "products' times from the bench outputs, the step timelines side by side; an empty "
      "archive refused")
