#!/usr/bin/env python3
"""tests/scripts/test_ab_ratios.py - scripts/ab_ratios.py reads the JSON files of an
ab_kernel.sh archive and prints every variant's ms a step over variant a's in the same
round; the same from the summary ab_kernel.sh prints when its archive did not come back;
an archive without them is refused with one line and a non-zero exit.

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

with tempfile.TemporaryDirectory() as work:
    path = Path(work) / "ab.tar.gz"
    times = {("a", 1): 0.4, ("a", 2): 0.5, ("b", 1): 0.3, ("b", 2): 0.55}
    with tarfile.open(path, "w:gz") as archive:
        for (variant, round_), ms in times.items():
            for batch, scale in ((1, 1.0), (32, 2.0)):
                add(archive, f"ab/{variant}.r{round_}.10.b{batch}.json",
                    json.dumps({"configurations": [{"ms_per_step": ms * scale}]}))
        add(archive, "ab/a.r1.10.b1.txt", "not a result")
    result = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True,
                            text=True)
    expect(result.returncode == 0, f"exit {result.returncode}: {result.stderr}")
    rows = result.stdout.splitlines()
    expect(rows[0].startswith("| chapter, B | a (ms a step, rounds 1 / 2) | b / a"),
           f"header {rows[0]!r}")
    expect(rows[2] == "| 10, B = 1 | 0.4000 / 0.5000 | 0.750 / 1.100 |", f"row {rows[2]!r}")
    expect(rows[3] == "| 10, B = 32 | 0.8000 / 1.0000 | 0.750 / 1.100 |", f"row {rows[3]!r}")
    expect(len(rows) == 4, f"{len(rows)} rows")

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
    result = subprocess.run([sys.executable, str(SCRIPT), str(console)], capture_output=True,
                            text=True)
    expect(result.returncode == 0, f"console: exit {result.returncode}: {result.stderr}")
    expect(result.stdout.splitlines() == rows, f"console: {result.stdout!r}")

    empty = Path(work) / "empty.tar.gz"
    with tarfile.open(empty, "w:gz") as archive:
        add(archive, "ab/a.r1.decode_matmul.txt", "no JSON here")
    result = subprocess.run([sys.executable, str(SCRIPT), str(empty)], capture_output=True,
                            text=True)
    expect(result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1,
           f"an archive without results: exit {result.returncode}, {result.stderr!r}")
print("test_ab_ratios: ratios per round read from the archive and from the console; "
      "an empty archive refused")
