#!/usr/bin/env python3
"""tests/scripts/test_run_tables.py - the two tables made of a GPU run's raw files:
scripts/compare_runs.py sets two runs' chapters side by side (ratios, token hashes, the
configurations only one run holds counted), and scripts/ncu_step_table.py groups an ncu
raw CSV's kernels by name and grid (thousands separators, the units row and the lines
around the CSV handled). Each refuses a folder or file with nothing to read, with one
line and exit 1.

    python3 tests/scripts/test_run_tables.py

Runs on any machine: the inputs are made here."""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from script_checks import SCRIPTS, expect


def run(script, *arguments):
    return subprocess.run([sys.executable, str(SCRIPTS / script), *map(str, arguments)],
                          capture_output=True, text=True)


def chapter(folder, name, rows, sweep=()):
    """NN_name.json (and its sweep) with rows (batch, new_tokens, ms_per_step, hash)."""
    folder.mkdir(parents=True, exist_ok=True)
    for suffix, entries in ((".json", rows), (".sweep.json", sweep)):
        document = {"configurations": [
            {"batch": b, "new_tokens": n, "ms_per_step": ms, "token_hash": h}
            for b, n, ms, h in entries]}
        (folder / (name + suffix)).write_text(json.dumps(document))


with tempfile.TemporaryDirectory() as scratch:
    scratch = Path(scratch)
    old, new, empty = scratch / "old", scratch / "new", scratch / "empty"
    empty.mkdir()
    chapter(old, "09_decode_matmuls", [(32, 100, 0.800, "aa"), (32, 400, 1.000, "bb")],
            sweep=[(1, 100, 0.400, "cc")])
    chapter(new, "09_decode_matmuls", [(32, 100, 0.600, "aa"), (32, 200, 0.700, "dd")],
            sweep=[(1, 100, 0.500, "ee")])
    result = run("compare_runs.py", old, new, "--old-label", "before", "--new-label", "after")
    expect(result.returncode == 0, f"compare_runs.py failed: {result.stderr!r}")
    lines = result.stdout.splitlines()
    expect(lines[0].startswith("| chapter | B | N | before ms/step | after ms/step"),
           f"header {lines[0]!r}")
    expect("| 09_decode_matmuls | 1 | 100 | 0.4000 | 0.5000 | 1.250 | NO |" in lines,
           f"the B = 1 row: {lines}")
    expect("| 09_decode_matmuls | 32 | 100 | 0.8000 | 0.6000 | 0.750 | yes |" in lines,
           f"the B = 32 row: {lines}")
    expect(not any("| 200 |" in line or "| 400 |" in line for line in lines),
           "a configuration only one run holds was compared")
    expect(lines[-1].startswith("2 configurations held by only one"), f"last line {lines[-1]!r}")
    result = run("compare_runs.py", empty, new)
    expect(result.returncode == 1 and "no chapter results" in result.stderr,
           f"an empty folder: exit {result.returncode}, {result.stderr!r}")
    (old / "10_mixed_precision.json").write_text("{not json")
    chapter(new, "10_mixed_precision", [(1, 100, 0.3, "ff")])
    result = run("compare_runs.py", old, new)
    expect(result.returncode == 1 and "is not a chapter's results file" in result.stderr,
           f"a broken file: exit {result.returncode}, {result.stderr!r}")

    header = ['"ID"', '"Kernel Name"', '"Grid Size"', '"dram__bytes_read.sum"',
              '"gpu__time_duration.sum"']
    csv_file = scratch / "step.csv"
    csv_file.write_text("\n".join([
        "==PROF== Connected to process 1",
        "the program's own table",
        ",".join(header),
        '"","","","byte","nsecond"',
        '"0","void (anonymous namespace)::product<16>(const float *)","(4, 48, 1)","2,000,000","3,000"',
        '"1","void (anonymous namespace)::norm(int)","(1, 1, 1)","1,000","1,500"',
        '"2","void (anonymous namespace)::product<16>(const float *)","(4, 48, 1)","2,000,000","5,000"',
        "==PROF== Disconnected from process 1"]) + "\n")
    result = run("ncu_step_table.py", csv_file)
    expect(result.returncode == 0, f"ncu_step_table.py failed: {result.stderr!r}")
    lines = result.stdout.splitlines()
    expect("| `product<16>` | (4, 48, 1) | 2 | 8.0 | 4.00 | 4.00 |" in lines,
           f"the grouped product: {lines}")
    expect("| `norm` | (1, 1, 1) | 1 | 1.5 | 1.50 | 0.00 |" in lines, f"the norm: {lines}")
    expect(lines.index("| `product<16>` | (4, 48, 1) | 2 | 8.0 | 4.00 | 4.00 |") <
           lines.index("| `norm` | (1, 1, 1) | 1 | 1.5 | 1.50 | 0.00 |"), "not slowest first")
    expect("| all | | 3 | 9.5 | | 4.00 |" in lines, f"the total: {lines}")
    plain = scratch / "plain.txt"
    plain.write_text("no csv here\n")
    result = run("ncu_step_table.py", plain)
    expect(result.returncode == 1 and "holds no ncu CSV" in result.stderr,
           f"a file without CSV: exit {result.returncode}, {result.stderr!r}")

print("test_run_tables: two runs compared (a ratio, a changed hash, two unmatched rows), "
      "an ncu step grouped; three refusals")
