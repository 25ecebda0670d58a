#!/usr/bin/env python3
"""tests/scripts/test_ab_ratios.py - scripts/ab_ratios.py reads the JSON files of an
ab_kernel.sh archive and prints every variant's ms a step over variant a's in the same
round, then from the bench outputs in it each product's µs per variant and round, with
the plans that differ from a's; the same chapters' table from the summary ab_kernel.sh
prints when its archive did not come back; a chapter run with a flag ("09 --tf32") from
either; an archive without them is refused with one line and a non-zero exit.

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

    empty = Path(work) / "empty.tar.gz"
    with tarfile.open(empty, "w:gz") as archive:
        add(archive, "ab/a.r1.decode_matmul.txt", "no JSON here")
    result = ab_ratios(empty)
    expect(result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1,
           f"an archive without results: exit {result.returncode}, {result.stderr!r}")
print("test_ab_ratios: ratios per round read from the archive and from the console, the "
      "products' times from the bench outputs; an empty archive refused")
