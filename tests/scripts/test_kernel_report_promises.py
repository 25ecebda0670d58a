#!/usr/bin/env python3
"""tests/scripts/test_kernel_report_promises.py - scripts/kernel_report.py reads a
`// Promises:` line into opcodes and ordered pairs, and broken_promises holds a kernel's
SASS to them: an opcode missing, a pair in the wrong order, a pair with a side missing;
and a `// Spills: at most N bytes` line allows that much local memory and no more.

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

# A `// Spills: at most N bytes` line above a kernel: that much local memory is allowed,
# more is not, and a kernel without the line may have none.
source = """
// Spills: at most 1400 bytes (two blocks a multiprocessor measured faster than one)
template <int kRows>
__global__ void __launch_bounds__(256, 2) persistent_kernel(const Arguments a) {}

__global__ void plain_kernel(float* out) {}
"""
leaves = kernel_report.spill_leaves(source)
expect(leaves == {"persistent_kernel": 1400}, f"the spill lines read as {leaves}")
within = {"spills": True, "local": 1372}
over = {"spills": True, "local": 1500}
expect(kernel_report.spill_problem("persistent_kernel<64>", within, leaves) is None,
       "spills within the declared leave were faulted")
problem = kernel_report.spill_problem("persistent_kernel<64>", over, leaves)
expect(problem == "persistent_kernel<64> uses 1500 bytes of local memory (spills, over the 1400 "
       "its `// Spills:` line allows)", f"spills over the leave gave {problem}")
problem = kernel_report.spill_problem("plain_kernel", {"spills": True, "local": 8}, leaves)
expect(problem == "plain_kernel uses 8 bytes of local memory (spills)",
       f"spills without a leave gave {problem}")
expect(kernel_report.spill_problem("plain_kernel", {"spills": False, "local": 0}, leaves) is None,
       "a kernel without spills was faulted")
print("test_kernel_report_promises: spill leaves read and held")
