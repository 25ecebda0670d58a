#!/usr/bin/env python3
"""scripts/sass_loop_mix.py - the instruction mix of a kernel's hot loop, from its SASS:
the opcodes between the loop's head and its backward branch, counted statically.

    python3 scripts/sass_loop_mix.py OBJECT --kernel "decode_matmul_fp32_kernel<32, true>"
    python3 scripts/sass_loop_mix.py OBJECT --kernel decode_matmul_ --contains LDGSTS --summary
    python3 scripts/sass_loop_mix.py OBJECT --kernel decode_matmul_ --contains LDGSTS \
        --base OLD_OBJECT --summary

OBJECT is anything `cuobjdump -sass` reads (an object file, a cubin, an executable), or a
text file it wrote earlier (*.sass, *.txt). --kernel picks the kernels whose short name
(no namespace, no parameter list) contains the text. The loop shown is the one that holds
the most multiply-adds (FFMA, HMMA, ...; of equals, the innermost), among those holding
the opcode --contains names if given: for the decode matmuls `--contains LDGSTS` is the
loop over the chunks of K (an epilogue's GELU has FFMA too). A loop is a backward branch
and its target; loops nested inside the one shown are listed with their size, since they
run a number of times the static count cannot know. `@!PT` instructions (predicated
never-true, inserted by the compiler beside LDGSTS) are counted apart: they issue but do
nothing.

With --base the same kernels of a second object are shown beside (before -> after), to
measure a change of the loop's code without a GPU. Static counts are not the dynamic mix
(branches inside the loop may skip a part, nested loops repeat); the report says where.
"""

import argparse
import re
import subprocess
import sys
from collections import Counter

from kernel_report import demangle, fail, find_tool, short_name

ARCH = re.compile(r"\s*arch = sm_(\d+)")
FUNCTION = re.compile(r"\s*Function : (\S+)")
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
BRANCH_TARGET = re.compile(r"(0x[0-9a-f]+)")
MATH = ("FFMA", "HFMA2", "DFMA", "HMMA", "HGMMA", "IMMA", "DMMA")  # multiply-adds


def sass_text(path):
    if path.endswith((".sass", ".txt")):
        return open(path, encoding="utf-8").read()
    result = subprocess.run([find_tool("cuobjdump"), "-sass", path], capture_output=True,
                            text=True)
    if result.returncode != 0:
        fail(f"cuobjdump -sass {path} failed: {result.stderr.strip()[:300]}")
    return result.stdout


def functions(text):
    """{(arch, short name): [(address, predicate, opcode, operands)]}."""
    raw = {}
    arch = None
    current = None
    for line in text.splitlines():
        match = ARCH.match(line)
        if match:
            arch = int(match.group(1))
            continue
        match = FUNCTION.match(line)
        if match:
            current = raw.setdefault((arch, match.group(1)), [])
            continue
        match = INSTRUCTION.search(line)
        if match and current is not None:
            current.append((int(match.group(1), 16), (match.group(2) or "").strip(),
                            match.group(3), match.group(4).strip()))
    names = demangle(sorted({mangled for _, mangled in raw}))
    return {(arch, short_name(names[mangled])): body for (arch, mangled), body in raw.items()}


def loops(body):
    """[(head, branch)] address ranges closed by a backward branch, outermost first."""
    found = []
    for address, _, opcode, operands in body:
        if opcode.split(".")[0] != "BRA":
            continue
        target = BRANCH_TARGET.search(operands)
        if target and int(target.group(1), 16) <= address:
            found.append((int(target.group(1), 16), address))
    return sorted(set(found), key=lambda loop: (loop[0], -loop[1]))


def mnemonic(predicate, opcode, full):
    name = opcode if full else opcode.split(".")[0]
    return f"{name} (@!PT)" if predicate == "@!PT" else name


def is_math(name):
    return name.split(".")[0] in MATH


def loop_mix(body, head, branch, full):
    return Counter(mnemonic(predicate, opcode, full)
                   for address, predicate, opcode, _ in body if head <= address <= branch)


def hottest_loop(body, full, contains):
    """(head, branch) of the loop with the most math instructions (of those holding the
    opcode `contains`, if given); of equals, the smallest."""
    best = None
    for head, branch in loops(body):
        mix = loop_mix(body, head, branch, full)
        if contains and not any(name.split(" ")[0].startswith(contains) for name in mix):
            continue
        math = sum(count for name, count in mix.items() if is_math(name))
        key = (math, -(branch - head))
        if math > 0 and (best is None or key > best[0]):
            best = (key, (head, branch))
    return best[1] if best else None


class LoopReport:
    """One kernel's hot loop: its range, its histogram, the loops nested in it."""

    def __init__(self, body, full, contains):
        self.loop = hottest_loop(body, full, contains)
        self.mix = Counter()
        self.nested = []
        if self.loop is None:
            return
        head, branch = self.loop
        self.mix = loop_mix(body, head, branch, full)
        for inner_head, inner_branch in loops(body):
            if head <= inner_head and inner_branch < branch and (inner_head, inner_branch) != \
                    self.loop:
                size = sum(loop_mix(body, inner_head, inner_branch, full).values())
                self.nested.append((inner_head, inner_branch, size))

    def total(self):
        return sum(self.mix.values())

    def math(self):
        return sum(count for name, count in self.mix.items() if is_math(name))

    def never(self):
        return sum(count for name, count in self.mix.items() if name.endswith("(@!PT)"))

    def other(self):
        return self.total() - self.math() - self.never()

    def describe(self):
        if self.loop is None:
            return "no loop with math instructions"
        head, branch = self.loop
        text = (f"loop {head:#06x} .. {branch:#06x}: {self.total()} instructions, "
                f"{self.math()} math, {self.other()} other, {self.never()} @!PT")
        for inner_head, inner_branch, size in self.nested:
            text += (f"\n    nested loop {inner_head:#06x} .. {inner_branch:#06x}: "
                     f"{size} instructions")
        return text


def histogram(after, before=None):
    names = sorted(set(after.mix) | set(before.mix if before else ()),
                   key=lambda name: (-after.mix.get(name, 0), name))
    rows = []
    for name in names:
        if before is None:
            rows.append(f"    {after.mix[name]:5d}  {name}")
        else:
            old, new = before.mix.get(name, 0), after.mix.get(name, 0)
            rows.append(f"    {old:5d} -> {new:5d}  {new - old:+5d}  {name}")
    return "\n".join(rows)


def summary_line(name, after, before=None):
    if before is None:
        return (f"{name:45s} {after.math():5d} math  {after.other():5d} other  "
                f"{after.never():3d} @!PT  {len(after.nested)} nested")
    return (f"{name:45s} {after.math():5d} math ({after.math() - before.math():+d})  "
            f"other {before.other():4d} -> {after.other():4d} "
            f"({after.other() - before.other():+d})  "
            f"@!PT {before.never():3d} -> {after.never():3d}  "
            f"nested {len(before.nested)} -> {len(after.nested)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("object", help="object, cubin or executable; or a saved cuobjdump -sass")
    parser.add_argument("--kernel", required=True, help="text the kernels' short names contain")
    parser.add_argument("--base", help="a second object to compare with (before -> after)")
    parser.add_argument("--arch", type=int, help="only this sm_ architecture (default: all)")
    parser.add_argument("--contains", help="only loops holding this opcode (LDGSTS: a pipeline)")
    parser.add_argument("--summary", action="store_true", help="one line per kernel")
    parser.add_argument("--modifiers", action="store_true",
                        help="keep opcode modifiers (IMAD.WIDE, not IMAD)")
    arguments = parser.parse_args()

    after = functions(sass_text(arguments.object))
    before = functions(sass_text(arguments.base)) if arguments.base else None
    chosen = sorted(key for key in after if arguments.kernel in key[1] and
                    (arguments.arch is None or key[0] == arguments.arch))
    if not chosen:
        fail(f"no kernel whose name contains '{arguments.kernel}' in {arguments.object}")
    for key in chosen:
        arch, name = key
        report = LoopReport(after[key], arguments.modifiers, arguments.contains)
        old = None
        if before is not None:
            if key not in before:
                fail(f"{name} (sm_{arch}) is not in {arguments.base}")
            old = LoopReport(before[key], arguments.modifiers, arguments.contains)
        if arguments.summary:
            print(summary_line(f"sm_{arch} {name}", report, old))
            continue
        print(f"sm_{arch} {name}")
        if old is not None:
            print("  before: " + old.describe())
            print("  after:  " + report.describe())
        else:
            print("  " + report.describe())
        print(histogram(report, old))
    return 0


if __name__ == "__main__":
    sys.exit(main())
