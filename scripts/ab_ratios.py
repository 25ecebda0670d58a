#!/usr/bin/env python3
"""scripts/ab_ratios.py - each chapter's ms a step over variant a's in the same round,
from the JSON files of one scripts/ab_kernel.sh call; and each decode product's time.

    python3 scripts/ab_ratios.py RESULTS/ab.tar.gz > RESULTS/ratios.md
    python3 scripts/ab_ratios.py RESULTS/ab_console.txt > RESULTS/ratios.md

Reads ab/V.rR.CH.bB.json from the archive (or from a folder holding ab/): every variant,
round, chapter (or chapter and flag: CH "09-tf32", "09 --tf32" in the table) and batch it
finds. Where the archive did not come back, the summary that
ab_kernel.sh prints last (its "variant round | ..." table, 4 decimals a step) serves.
Prints a Markdown table: per chapter and B, variant a's ms a step in each round, then
every other variant's ratio to a in the same round. Where the archive holds the bench's
outputs (ab/V.rR.decode_matmul.txt, bench/decode_matmul), a second table follows: per
product and B, each variant's GPU µs in fp32 and TF32 in each round, and its splits x
column tiles where a variant's plan differs from a's. Where it holds step timelines
(ab/V.rR.CH.bB.timeline.txt, LADDER_AB_TIMELINE), a section per chapter and B follows:
each variant's step span in each round, then what each kernel's end adds to the step
(µs, the mean over the rounds) summed per kernel name; and where the variants ran the
same kernels in the same order, per position in the step, its layers folded: the kernels
that repeat with one period (a transformer's layers) are summed over the layers per
position in the layer (`layer_period`), the few before and after listed each alone.
Without such a period, the positions whose adds moved most.
"""
import json
import re
import sys
import tarfile
from pathlib import Path

# ab/V.rR.CH.bB.json, CH a chapter's number or, for a run with a flag, "09-tf32" (its label
# in the tables: "09 --tf32").
NAME = re.compile(r"(?:^|/)ab/([a-z])\.r(\d+)\.(\d\d(?:-[a-z0-9]+)?)\.b(\d+)\.json$")
BENCH_NAME = re.compile(r"(?:^|/)ab/([a-z])\.r(\d+)\.decode_matmul\.txt$")
# bench/decode_matmul's per-product tables: a heading per B, then a row per product whose
# cells are: product (its name, then its shape), splits x tiles, copy floor, decode fp32
# "µs (GB/s)", decode tf32, and more.
BENCH_SECTION = re.compile(r"^## B = (\d+) rows: GPU us per product")
PRODUCT_NAME = re.compile(r"^([A-Za-z_ ]+?)\s+\d")

# ab/V.rR.CH.bB.timeline.txt: a chapter's output with --step-timeline; a kernel's row:
# start, end, took and adds (µs), two spaces, its name.
TIMELINE_NAME = re.compile(r"(?:^|/)ab/([a-z])\.r(\d+)\.(\d\d(?:-[a-z0-9]+)?)\.b(\d+)\.timeline\.txt$")
TIMELINE_ROW = re.compile(r"^ +(-?[\d.]+) +(-?[\d.]+) +(-?[\d.]+) +(-?[\d.]+)  (\S.*)$")
TIMELINE_SHOWN = 12  # positions listed per chapter and B: those whose adds moved most

# ab_kernel.sh's summary: a header cell "09 B = 32 ms/step (hash)" (or "09 --tf32 B = 32
# ..."), a row "b 2 | ...".
CONSOLE_COLUMN = re.compile(r"^(\d\d(?: --[a-z0-9]+)?) B = (\d+) ms/step")
CONSOLE_ROW = re.compile(r"^([a-z]) (\d+) \|")


def read_console(text):
    """{(variant, round, chapter, batch): ms a step} from ab_kernel.sh's printed summary."""
    runs = {}
    columns = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if cells[0] == "variant round":
            columns = [CONSOLE_COLUMN.match(cell) for cell in cells]
            continue
        row = CONSOLE_ROW.match(line)
        if not row:
            continue
        for column, cell in zip(columns, cells):
            words = cell.split()
            if column and words:
                try:
                    value = float(words[0])
                except ValueError:
                    continue
                runs[(row.group(1), int(row.group(2)), column.group(1), int(column.group(2)))] = value
    return runs


def read_bench(text):
    """{(B, product): (plan, fp32 µs, tf32 µs)} from one bench/decode_matmul output."""
    products = {}
    batch = None
    for line in text.splitlines():
        section = BENCH_SECTION.match(line)
        if section:
            batch = int(section.group(1))
            continue
        if line.startswith("## "):
            batch = None
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        name = PRODUCT_NAME.match(cells[0]) if batch is not None and len(cells) >= 5 else None
        if not name:
            continue
        try:
            fp32, tf32 = (float(cell.split()[0]) for cell in cells[3:5])
        except (ValueError, IndexError):
            continue
        products[(batch, name.group(1))] = (cells[1], fp32, tf32)
    return products


def files_in(path, suffix):
    """[(name, text)] of the files ending in `suffix` in the folder or tar archive `path`."""
    if path.is_dir():
        return [(str(p.relative_to(path)), p.read_text()) for p in path.rglob("*" + suffix)]
    with tarfile.open(path) as archive:
        return [(m.name, archive.extractfile(m).read().decode()) for m in archive.getmembers()
                if m.isfile() and m.name.endswith(suffix)]


def is_console(path):
    """Whether `path` is ab_kernel.sh's printed summary, not an archive or a folder."""
    return path.is_file() and not tarfile.is_tarfile(path)


def matching_files(source, suffix, pattern):
    """[(match, text)] of the files in the archive or folder `source` ending in `suffix`
    whose names `pattern` matches; none from a console."""
    path = Path(source)
    if is_console(path):
        return []
    return [(match, text) for name, text in files_in(path, suffix)
            if (match := pattern.search(name))]


def read_benches(source):
    """{(variant, round): read_bench(...)} from an archive or folder (none from a console)."""
    return {(match.group(1), int(match.group(2))): read_bench(text)
            for match, text in matching_files(source, ".txt", BENCH_NAME)}


def print_products(benches):
    """The products' table (module docstring) from read_benches' result."""
    variants = sorted({key[0] for key in benches})
    rounds = sorted({key[1] for key in benches})
    cases = []
    for bench in benches.values():
        cases += [case for case in bench if case not in cases]
    cases.sort(key=lambda case: case[0])  # by B, each B's products in the bench's order
    slash = " / ".join(f"{r}" for r in rounds)
    print(f"\n| product, B | plan (splits x tiles) | "
          + " | ".join(f"{v} fp32 µs (rounds {slash})" for v in variants) + " | "
          + " | ".join(f"{v} tf32 µs (rounds {slash})" for v in variants) + " |")
    print("|---|---|" + "--:|" * (2 * len(variants)))
    for case in cases:
        plans = {v: benches.get((v, rounds[0]), {}).get(case, ("-",))[0] for v in variants}
        plan = plans.get("a", "-")
        plan += "".join(f", {v}: {p}" for v, p in plans.items() if v != "a" and p != plans.get("a"))
        cells = []
        for column in (1, 2):
            for v in variants:
                values = [benches.get((v, r), {}).get(case) for r in rounds]
                cells.append(" / ".join(f"{value[column]:.1f}" if value else "-" for value in values))
        print(f"| {case[1]}, B = {case[0]} | {plan} | " + " | ".join(cells) + " |")


def read_timeline(text):
    """[(kernel, adds µs)] of the first step that --step-timeline printed in `text`."""
    kernels = []
    rows = iter(text.splitlines())
    for line in rows:
        if "start us" in line and "adds us" in line:
            for row in rows:
                match = TIMELINE_ROW.match(row)
                if not match:
                    break
                kernels.append((match.group(5), float(match.group(4))))
            break
    return kernels


def read_timelines(source):
    """{(variant, round, chapter, batch): read_timeline(...)}, none from a console."""
    timelines = {}
    for match, text in matching_files(source, ".timeline.txt", TIMELINE_NAME):
        variant, round_, chapter, batch = match.groups()
        timelines[(variant, int(round_), chapter.replace("-", " --", 1), int(batch))] = \
            read_timeline(text)
    return timelines


def mean_adds(steps):
    """[(kernel, mean adds)] over rounds whose steps ran the same kernels as the first."""
    same = [step for step in steps if [k for k, _ in step] == [k for k, _ in steps[0]]]
    return [(kernel, sum(step[i][1] for step in same) / len(same))
            for i, (kernel, _) in enumerate(steps[0])]


def layer_period(names):
    """(start, period, layers) of the longest stretch of `names` that repeats one sequence
    of `period` >= 2 names at least twice, `layers` whole times from `start`; the smallest
    period among equally long stretches; None without one."""
    best = None
    for period in range(2, len(names) // 2 + 1):
        i = 0
        while i + period < len(names):
            j = i
            while j + period < len(names) and names[j] == names[j + period]:
                j += 1
            layers = (j - i + period) // period  # names[i : j + period] has this period
            if layers >= 2 and (best is None or layers * period > best[1] * best[2]):
                best = (i, period, layers)
            i = j + 1
    return best


def cell(text):
    """`text` (a kernel's name) fit for a Markdown table cell."""
    return text.replace("|", "\\|")


def print_timelines(timelines):
    """The step timelines' sections (module docstring) from read_timelines' result."""
    variants = sorted({key[0] for key in timelines})
    rounds = sorted({key[1] for key in timelines})
    others = [v for v in variants if v != "a"]
    for chapter, batch in sorted({(key[2], key[3]) for key in timelines}):
        steps = {v: [timelines[(v, r, chapter, batch)] for r in rounds
                     if timelines.get((v, r, chapter, batch))] for v in variants}
        print(f"\n## {chapter}, B = {batch}: one step's kernels (--step-timeline)\n")
        if not steps.get("a") or not all(steps.values()):
            print("No timeline for " + ", ".join(v for v in variants if not steps.get(v))
                  + ": the run failed or printed none (its .timeline.txt says why).")
            continue
        for v in variants:
            spans = " / ".join(f"{sum(a for _, a in step):.1f}" for step in steps[v])
            print(f"- {v}: {len(steps[v][0])} kernels, the step's span {spans} µs "
                  f"(rounds {' / '.join(str(r) for r in rounds)})")
        means = {v: mean_adds(steps[v]) for v in variants}
        names = []
        for v in variants:
            names += [kernel for kernel, _ in means[v] if kernel not in names]
        print("\n| kernel | a: adds µs a step | " + " | ".join(f"{v} - a" for v in others) + " |")
        print("|---|--:|" + "--:|" * len(others))
        totals = {v: {} for v in variants}
        for v in variants:
            for kernel, adds in means[v]:
                totals[v][kernel] = totals[v].get(kernel, 0.0) + adds
        for kernel in names:
            base = totals["a"].get(kernel, 0.0)
            print(f"| `{cell(kernel)}` | {base:.1f} | "
                  + " | ".join(f"{totals[v].get(kernel, 0.0) - base:+.1f}" for v in others) + " |")
        sequence = [kernel for kernel, _ in means["a"]]
        if any([kernel for kernel, _ in means[v]] != sequence for v in others):
            print("\nThe variants ran different kernels or in another order: no positions.")
            continue
        layers = layer_period(sequence)
        if layers:
            start, period, count = layers
            print(f"\nPer position, kernels {start + 1}-{start + period * count} folded: "
                  f"{count} layers of {period} kernels, each position summed over them:\n")
            groups = [(f"{i + 1}", [i]) for i in range(start)]
            groups += [(f"layer + {k + 1}", [start + k + period * n for n in range(count)])
                       for k in range(period)]
            groups += [(f"{i + 1}", [i]) for i in range(start + period * count, len(sequence))]
        else:
            moved = sorted(range(len(sequence)), key=lambda i: -max(
                (abs(means[v][i][1] - means["a"][i][1]) for v in others), default=0.0))
            groups = [(f"{i + 1}", [i]) for i in sorted(moved[:TIMELINE_SHOWN])]
            print(f"\nThe {len(groups)} positions whose adds moved most:\n")
        print("| position | kernel | a µs | " + " | ".join(f"{v} - a" for v in others) + " |")
        print("|---|---|--:|" + "--:|" * len(others))
        for label, positions in groups:
            base = sum(means["a"][i][1] for i in positions)
            print(f"| {label} | `{cell(sequence[positions[0]])}` | {base:.1f} | "
                  + " | ".join(f"{sum(means[v][i][1] for i in positions) - base:+.1f}"
                               for v in others) + " |")


def read_runs(source):
    """{(variant, round, chapter, batch): ms a step}."""
    runs = {}
    path = Path(source)
    if is_console(path):
        return read_console(path.read_text())
    for name, text in files_in(path, ".json"):
        match = NAME.search(name)
        if match:
            variant, round_, chapter, batch = match.groups()
            chapter = chapter.replace("-", " --", 1)  # the summary's label of a flagged run
            runs[(variant, int(round_), chapter, int(batch))] = \
                json.loads(text)["configurations"][0]["ms_per_step"]
    return runs


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python3 scripts/ab_ratios.py AB_TAR_GZ_OR_FOLDER_OR_CONSOLE")
    runs = read_runs(sys.argv[1])
    if not runs:
        sys.exit(f"ab_ratios.py: no ab/V.rR.CH.bB.json and no ab_kernel.sh summary in {sys.argv[1]}")
    variants = sorted({key[0] for key in runs})
    rounds = sorted({key[1] for key in runs})
    cases = sorted({(key[2], key[3]) for key in runs})
    others = [v for v in variants if v != "a"]
    slash = " / ".join(f"{r}" for r in rounds)
    print(f"| chapter, B | a (ms a step, rounds {slash}) | "
          + " | ".join(f"{v} / a (rounds {slash})" for v in others) + " |")
    print("|---|--:|" + "--:|" * len(others))
    for chapter, batch in cases:
        base = [runs.get(("a", r, chapter, batch)) for r in rounds]
        cells = [" / ".join(f"{b:.4f}" if b else "-" for b in base)]
        for v in others:
            ratios = []
            for r, b in zip(rounds, base):
                value = runs.get((v, r, chapter, batch))
                ratios.append(f"{value / b:.3f}" if value and b else "-")
            cells.append(" / ".join(ratios))
        print(f"| {chapter}, B = {batch} | " + " | ".join(cells) + " |")
    benches = read_benches(sys.argv[1])
    if benches:
        print_products(benches)
    timelines = read_timelines(sys.argv[1])
    if timelines:
        print_timelines(timelines)


if __name__ == "__main__":
    main()
