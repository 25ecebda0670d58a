#!/usr/bin/env python3
"""tests/scripts/test_kernel_report_promises.py - scripts/kernel_report.py reads a
`// Promises:` line into opcodes and ordered pairs, and broken_promises holds a kernel's
SASS to them: an opcode missing, a pair in the wrong order, a pair with a side missing.

    python3 tests/scripts/test_kernel_report_promises.py

Runs on any machine (no build, no cuobjdump): the SASS is a made-up listing."""
import sys
from collections import Counter

from script_checks import SCRIPTS, expect

sys.path.insert(0, str(SCRIPTS))
import kernel_report  # noqa: E402


def info_of(listing):
    """The kernel record collect() makes, for opcodes in program order."""
    first_at = {}
    for index, opcode in enumerate(listing):
        first_at.setdefault(opcode, index)
    return {"opcodes": Counter(listing), "first_at": first_at}


line = " LDG.E.128<ACQBULK HMMA.16816.F32.BF16 PREEXIT UCGABAR_ARV UCGABAR_WAIT"
promises = kernel_report.PROMISE.findall(line)
expect(promises == ["LDG.E.128<ACQBULK", "HMMA.16816.F32.BF16", "PREEXIT", "UCGABAR_ARV",
                    "UCGABAR_WAIT"], f"the promise line read as {promises}")

loads_first = info_of(["S2R", "LDG.E.128.CONSTANT", "LDG.E.128.CONSTANT", "ACQBULK",
                       "HMMA.16816.F32.BF16", "PREEXIT", "UCGABAR_ARV", "UCGABAR_WAIT"])
expect(kernel_report.broken_promises("k", loads_first, promises) == [],
       "a SASS that keeps every promise was faulted")

wait_first = info_of(["S2R", "ACQBULK", "LDG.E.128.CONSTANT", "HMMA.16816.F32.BF16",
                      "PREEXIT", "UCGABAR_ARV", "UCGABAR_WAIT"])
problems = kernel_report.broken_promises("k", wait_first, promises)
expect(problems == ["k promises LDG.E.128 before ACQBULK, its SASS has ACQBULK first"],
       f"the wait before the loads gave {problems}")

no_wait = info_of(["LDG.E.128", "HMMA.16816.F32.BF16", "PREEXIT", "UCGABAR_ARV"])
problems = kernel_report.broken_promises("k", no_wait, promises)
expect(problems == ["k promises ACQBULK, its SASS has none",
                    "k promises UCGABAR_WAIT, its SASS has none"],
       f"a missing side of a pair and a missing opcode gave {problems}")
print("test_kernel_report_promises: promise lines read, order and presence checked")
