#!/usr/bin/env python3
"""tests/scripts/test_kernel_report_stalls.py - scripts/kernel_report.py --import-ncu keeps
the warp-state metrics where ncu's raw CSV holds them (the persistent kernel's profile):
per kernel and reason, the launches' time-weighted mean, into results/ncu/CHAPTER.stalls.csv;
the page's table lists the largest reasons first. Without those columns no stalls file.

    python3 tests/scripts/test_kernel_report_stalls.py

Runs on any machine: the raw CSV is made up, and the files go to a temporary folder."""
import csv
import os
import sys
import tempfile

from script_checks import SCRIPTS, expect

sys.path.insert(0, str(SCRIPTS))
import kernel_report  # noqa: E402

BASE = ["ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum",
        "dram__bytes_write.sum", "sm__warps_active.avg.pct_of_peak_sustained_active"]
STALLS = [f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"
          for reason in ("barrier", "long_scoreboard", "sleeping")]


def write_raw(path, header, units, rows):
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerow(units)
        writer.writerows(rows)


with tempfile.TemporaryDirectory() as root:
    kernel_report.ROOT = root
    raw = os.path.join(root, "raw.csv")
    units = ["", "", "ns", "byte", "byte", "%"] + ["", "", ""]
    # Two launches of one kernel, 1 and 3 us long: the means weigh the second three times.
    write_raw(raw, BASE + STALLS, units, [
        ["0", "void ladder::persistent_decode_kernel<32>(KernelArguments)", "1000", "10", "0",
         "12.5", "4.0", "1.0", "0.0"],
        ["1", "void ladder::persistent_decode_kernel<32>(KernelArguments)", "3000", "30", "0",
         "12.5", "0.0", "5.0", "2.0"]])
    kernel_report.import_ncu(raw, "11_persistent_kernel")
    stalls_path = os.path.join(root, "results", "ncu", "11_persistent_kernel.stalls.csv")
    expect(os.path.exists(stalls_path), "no stalls file from a raw CSV with warp-state columns")
    stalls = kernel_report.stalls_by_ncu("11_persistent_kernel")
    expect(list(stalls) == ["persistent_decode_kernel<32>"], f"kernels read back: {list(stalls)}")
    expected = [("long_scoreboard", 4.0), ("sleeping", 1.5), ("barrier", 1.0)]
    expect(stalls["persistent_decode_kernel<32>"] == expected,
           f"time-weighted means, largest first: {stalls['persistent_decode_kernel<32>']}")
    table = kernel_report.stall_lines(stalls, largest=2)
    expect("| `persistent_decode_kernel<32>` | long_scoreboard 4.00 | sleeping 1.50 |" in table,
           f"the page's row: {table}")

    # A chapter's profile without those columns: its ncu file, no stalls file.
    write_raw(raw, BASE, units[:6], [["0", "void decode_matmul_bf16_kernel<32, true>(Args)",
                                      "2000", "5", "1", "40.0"]])
    kernel_report.import_ncu(raw, "10_mixed_precision")
    expect(os.path.exists(os.path.join(root, "results", "ncu", "10_mixed_precision.csv")),
           "no ncu file for a profile without warp states")
    expect(kernel_report.stalls_by_ncu("10_mixed_precision") is None,
           "a stalls file from a profile without warp states")
print("test_kernel_report_stalls: warp states kept, weighted by time, largest first")
