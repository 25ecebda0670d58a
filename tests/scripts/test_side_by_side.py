#!/usr/bin/env python3
"""tests/scripts/test_side_by_side.py - scripts/side_by_side.py on made-up --json files: one
row per configuration both chapters ran, the ratio and the multiples of the floor right,
two runs on two GPUs refused."""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "side_by_side.py")


def report(device, rows):
    return {"device": device, "copy_bandwidth_bytes_per_s": 3.0e12,
            "configurations": [{"batch": b, "new_tokens": n, "ms_per_step": ms, "steps": n,
                                "floor_s": floor_ms * n / 1e3} for b, n, ms, floor_ms in rows]}


def write(directory, name, content):
    with open(os.path.join(directory, name), "w", encoding="utf-8") as file:
        json.dump(content, file)


def run(directory):
    return subprocess.run([sys.executable, SCRIPT, directory, "before", "after"],
                          capture_output=True, text=True, check=False)


def main():
    with tempfile.TemporaryDirectory() as directory:
        write(directory, "before.sweep.json", report("GPU X | sm_90", [(1, 100, 0.5, 0.1),
                                                                       (8, 100, 0.6, 0.1)]))
        write(directory, "after.sweep.json", report("GPU X | sm_90", [(1, 100, 0.25, 0.1),
                                                                      (64, 100, 0.9, 0.2)]))
        result = run(directory)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[0] == "GPU X, copy bandwidth 3.00 TB/s in the run", lines[0]
        rows = [line for line in lines if line.startswith("| 1 ")]
        assert rows == ["| 1 | 100 | 0.500 | 0.250 | 0.50 | 5.00 | 2.50 |"], rows
        assert not any(line.startswith(("| 8 ", "| 64 ")) for line in lines), lines
        write(directory, "after.sweep.json", report("GPU Y | sm_90", [(1, 100, 0.25, 0.1)]))
        result = run(directory)
        assert result.returncode != 0 and "two runs" in result.stderr, result
    print("test_side_by_side.py: ok")


if __name__ == "__main__":
    main()
