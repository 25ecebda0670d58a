#!/usr/bin/env python3
"""scripts/render_results.py - the results tables, plots and README blocks, from one run's JSON.

Reads a results directory written by scripts/run_ladder.sh:
  NN_name.json, NN_name.sweep.json       the chapters' --json output (common/benchmark.cpp)
  pytorch_<variant>.<precision>.json     scripts/pytorch_baseline.py's, same schema
  run.json                               the run: gpu, driver, cuda, date, git commit, copy bandwidth
  sizes/MODEL/*.json                     the same at GPT-2 medium, large and xl (--model MODEL):
                                         chapters 07 on and the compiled anchors, B = 1 and 32
and writes, always generated and never edited by hand:
  <results>/summary.md                   every table, in ladder order (never sorted by speed)
  docs/images/results_time_per_chapter.png, results_time_vs_n.png, results_batch_sweep.png
  README.md, docs/results.md             the text between <!-- results:begin --> and
                                         <!-- results:end -->
  chapters/NN_name/README.md             the text between <!-- chapter-results:begin --> and
                                         <!-- chapter-results:end -->, where a chapter has them:
                                         that chapter's rows only
  chapters/NN_name/README.md             between <!-- beside-previous:begin COLUMNS --> and
                                         <!-- beside-previous:end -->: the previous chapter's rows
                                         beside this one's at the main batch, in the columns
                                         named (separated by |, as in the tables' headers)
  chapters/NN_name/README.md             between <!-- step-time:begin --> and
  docs/images/step_time_NN.svg           <!-- step-time:end -->: where a traced step's time goes
                                         (matmul kernels, other kernels, GPU idle) for this
                                         chapter and the one before, on one linear scale, from
                                         results/profile/NN_name.kernel_profile.txt
  docs/results.md                        between <!-- model-sizes:begin --> and
  docs/images/results_model_sizes.png    <!-- model-sizes:end -->: × floor against the model's
                                         size (small from the run itself, the others from
                                         sizes/), one line per rung and compiled anchor, at
                                         B = 1 and 32, N = 100; "not measured" where the run
                                         has no such row
  docs/workshop.md                       between <!-- card:NN:begin --> and
                                         <!-- card:NN:end -->: chapter NN's card's *Compare*
                                         (its ratios to the rung before, and the columns its
                                         card asks about, from this run)
  docs/workshop.md                       between <!-- peak-reserved:begin --> and
                                         <!-- peak-reserved:end -->: every chapter's peak
                                         reserved bytes at the main batch (smallest and
                                         largest N) and at the largest batch (smallest N)
  any README.md or docs/*.md             the text between <!-- measured:PATH:begin --> and
                                         <!-- measured:PATH:end -->: the markdown table of the
                                         file PATH (relative to the checkout), e.g. the output
                                         of a bench/ program kept in results/micro/

The tables: per chapter and size, the median time, ms per step, tokens/s, speedup over
chapter 01 and over the chapter before (same batch, new tokens and precision; a bf16
chapter continues the fp32 ladder, so its "before" is the fp32 chapter before it, and a
chapter run with --tf32 is compared with the same chapter in fp32), the time as
a multiple of the HBM floor (floor_s in the JSON: the bytes a step must move over the copy
bandwidth measured in the same run), peak allocated and reserved bytes, fragmentation,
allocations and host synchronisations per step, and whether the tokens equal chapter 01's
(same token hash at the same batch and new tokens; "no (bf16)" for a bf16 chapter, which
is held to the bf16 reference instead, "no (tf32)" likewise for a TF32 run). The main table holds the batch with
the most token counts (B = 32: N = 100, 200, 400), the second the batch sweep (N = 100:
B = 1, 8, 32, 64); the PyTorch rows follow as their own block, where the speedups and the
token check refer to the PyTorch naive variant of the same precision. Every block names
the run it came from (date, GPU, commit). The same input gives the same output, byte for
byte (the PNGs too, for one matplotlib version). Without matplotlib the plots are skipped
with one line and the rest is written.

    python3 scripts/render_results.py results/latest              # summary + README + docs
    python3 scripts/render_results.py results/latest --no-docs    # summary.md only
    python3 scripts/render_results.py /tmp/fake --root /tmp/tree  # into another checkout
    python3 scripts/render_results.py results/latest --check      # exit 1 if anything is stale
"""
import argparse
import json
import pathlib
import re
import statistics
import sys
from dataclasses import dataclass, field

from pytorch_baseline import VARIANTS, format_bytes

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
RESULTS_BEGIN, RESULTS_END = "<!-- results:begin -->", "<!-- results:end -->"
CHAPTER_BEGIN, CHAPTER_END = "<!-- chapter-results:begin -->", "<!-- chapter-results:end -->"
BESIDE_BEGIN = re.compile(r"^[ \t]*(<!-- beside-previous:begin (.+?) -->)[ \t]*$", re.MULTILINE)
BESIDE_END = "<!-- beside-previous:end -->"
STEP_TIME_BEGIN, STEP_TIME_END = "<!-- step-time:begin -->", "<!-- step-time:end -->"
PEAK_RESERVED_BEGIN, PEAK_RESERVED_END = "<!-- peak-reserved:begin -->", "<!-- peak-reserved:end -->"
PROFILES = "results/profile"  # the chapters' --kernel-profile output, NN_name.kernel_profile.txt
PLOTS = {
    "time_per_chapter": "results_time_per_chapter.png",
    "time_vs_n": "results_time_vs_n.png",
    "batch_sweep": "results_batch_sweep.png",
}
PYTORCH_ORDER = [variant.chapter for variant in VARIANTS]
PRECISION_ORDER = ["fp32", "tf32", "bf16"]
# A chapter's page shows its default run: no --tf32 (fp32), or bf16 for a chapter that
# stores its numbers in bf16 (its JSON says "precision": "bf16").
PAGE_PRECISIONS = ("fp32", "bf16")
# The bf16 chapters continue the fp32 ladder: their "× 01", "× prev" and the rows beside
# them are the fp32 chapters before them. A chapter run with --tf32 (09) follows the fp32
# rungs too: its "× prev" is the same chapter in fp32.
LADDER_OF_PRECISION = {"bf16": ("fp32", "bf16"), "tf32": ("fp32", "tf32")}
PREFERRED_BATCH = 32       # the default workload's batch, when the data leaves a choice
# GPT-2's sizes (common/config.cpp Gpt2Config::named): parameters, for the size plot's axis.
SIZES_BEGIN, SIZES_END = "<!-- model-sizes:begin -->", "<!-- model-sizes:end -->"
SIZES_PLOT = "results_model_sizes.png"
MODEL_PARAMETERS = {"small": 124439808, "medium": 354823168, "large": 774030080,
                    "xl": 1557611200}
SIZE_BATCHES = (1, 32)
SIZE_NEW_TOKENS = 100
SIZE_PRECISIONS = ("fp32", "bf16")
SIZE_FIRST_CHAPTER = 7  # the last rungs: scripts/run_ladder.sh runs 07 onward at every size
SIZE_ANCHORS = {"pytorch_hf_static_compiled": "PyTorch: HF static cache, compiled",
                "pytorch_static_step_compiled": "PyTorch: hand-written step, compiled"}
PREFERRED_NEW_TOKENS = 100  # the batch sweep's length, likewise


# ---------------------------------------------------------------- loading

@dataclass
class Report:
    """One chapter (or PyTorch variant) at one precision: every configuration it ran."""
    chapter: str
    title: str
    precision: str
    device: str
    copy_bandwidth: float
    framework: dict
    rows: dict = field(default_factory=dict)   # (batch, new_tokens) -> configuration
    failures: list = field(default_factory=list)  # (size or None, error)
    # Whether each configuration's memory was measured from an empty allocator cache
    # (the chapters' JSON says so since the runner empties it; PyTorch always did).
    memory_from_empty_cache: bool = True
    # False where a file of this report says the run stopped before its last configuration
    # (a time limit): its missing rows are not failures, they were never run.
    complete: bool = True

    @property
    def is_pytorch(self) -> bool:
        return self.chapter.startswith("pytorch_")

    @property
    def label(self) -> str:
        if self.is_pytorch:
            return self.title.split(": ", 1)[-1] if self.title.startswith("PyTorch") else self.title
        number = self.chapter.split("_", 1)[0]
        return f"{number} {self.title}"

    def main_sizes_at(self, layout):
        """This report's configurations at the main table's batch."""
        return [key for key in self.rows if key[0] == layout.batch]

    def order(self):
        precision = (PRECISION_ORDER.index(self.precision) if self.precision in PRECISION_ORDER
                     else len(PRECISION_ORDER), self.precision)
        if self.is_pytorch:
            position = (PYTORCH_ORDER.index(self.chapter) if self.chapter in PYTORCH_ORDER
                        else len(PYTORCH_ORDER))
            return (1, precision, position, self.chapter)
        return (0, precision, 0, self.chapter)


def ladder_group(reports, report):
    """The reports whose rows `report` is compared with, in ladder order: the same
    precision, or for a chapter the ladder its precision continues (LADDER_OF_PRECISION);
    a PyTorch variant keeps to its own precision."""
    precisions = (LADDER_OF_PRECISION.get(report.precision, (report.precision,))
                  if not report.is_pytorch else (report.precision,))
    return [other for other in reports
            if other.precision in precisions and other.is_pytorch == report.is_pytorch]


def fail(message: str):
    raise SystemExit(f"render_results.py: error: {message}")


def load_results(directory: pathlib.Path):
    """(run information, ladder reports in order, PyTorch reports in order)."""
    if not directory.is_dir():
        fail(f"'{directory}' is not a directory")
    run = {}
    run_file = directory / "run.json"
    if run_file.exists():
        try:
            run = json.loads(run_file.read_text())
        except ValueError as error:
            fail(f"{run_file}: not JSON ({error})")
    reports = {}
    for path in sorted(directory.glob("*.json")):
        if path.name == "run.json":
            continue
        try:
            document = json.loads(path.read_text())
        except ValueError as error:
            fail(f"{path}: not JSON ({error})")
        if not isinstance(document, dict) or "chapter" not in document or "configurations" not in document:
            print(f"render_results.py: {path.name}: no 'chapter' and 'configurations': ignored",
                  file=sys.stderr)
            continue
        key = (document["chapter"], document.get("precision", "fp32"))
        report = reports.get(key)
        if report is None:
            report = reports[key] = Report(
                chapter=document["chapter"], title=document.get("title", document["chapter"]),
                precision=key[1], device=document.get("device", ""),
                copy_bandwidth=document.get("copy_bandwidth_bytes_per_s") or 0.0,
                framework=document.get("framework") or {})
        if document.get("complete") is False:
            report.complete = False
        if not report.is_pytorch and not document.get("memory_from_empty_cache"):
            report.memory_from_empty_cache = False
        for configuration in document["configurations"]:
            # The main file sorts before its .sweep file: a size in both keeps the first.
            report.rows.setdefault((configuration["batch"], configuration["new_tokens"]), configuration)
        for failure in document.get("failed_configurations") or []:
            report.failures.append(((failure.get("batch"), failure.get("new_tokens")),
                                    str(failure.get("error", "failed"))))
        if document.get("error") and not document.get("failed_configurations"):
            report.failures.append((None, str(document["error"])))
    ordered = sorted(reports.values(), key=Report.order)
    ladder = [report for report in ordered if not report.is_pytorch]
    pytorch = [report for report in ordered if report.is_pytorch]
    if not ladder and not pytorch:
        fail(f"no results in '{directory}' (expected the chapters' JSON files)")
    return run, ladder, pytorch


# ---------------------------------------------------------------- choosing the tables

def main_batch(reports) -> int:
    """The batch run at the most token counts (B = 32 with N = 100, 200, 400 by default)."""
    counts = {}
    for report in reports:
        for batch, new_tokens in report.rows:
            counts.setdefault(batch, set()).add(new_tokens)
    return max(counts, key=lambda b: (len(counts[b]), b == PREFERRED_BATCH, b)) if counts else 0


def sweep_new_tokens(reports) -> int:
    """The token count run at the most batches (the batch sweep at N = 100 by default)."""
    counts = {}
    for report in reports:
        for batch, new_tokens in report.rows:
            counts.setdefault(new_tokens, set()).add(batch)
    if not counts:
        return 0
    best = max(counts, key=lambda n: (len(counts[n]), n == PREFERRED_NEW_TOKENS, -n))
    return best if len(counts[best]) > 1 else 0


@dataclass
class Layout:
    batch: int        # of the main table
    new_tokens: int   # of the batch sweep (0: no sweep)

    def main_sizes(self, report):
        return sorted(key for key in report.rows if key[0] == self.batch)

    def sweep_sizes(self, report):
        if not self.new_tokens:
            return []
        return sorted((key for key in report.rows if key[1] == self.new_tokens),
                      key=lambda key: key[0])

    def other_sizes(self, report):
        shown = set(self.main_sizes(report)) | set(self.sweep_sizes(report))
        return sorted(key for key in report.rows if key not in shown)


# ---------------------------------------------------------------- formatting

def milliseconds(seconds: float) -> str:
    value = seconds * 1e3
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def ratio(value) -> str:
    if value is None:
        return "—"
    return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"


def optional(value, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("`", "'").replace("\n", " ")


def bandwidth_text(bytes_per_second) -> str:
    return f"{bytes_per_second * 1e-12:.2f} TB/s" if bytes_per_second else "not recorded"


class Comparisons:
    """Speedups and token checks: against the group's first report (chapter 01, or PyTorch
    naive) and the report before, at the same size and precision."""

    def __init__(self, reports):
        self.reports = reports

    def _same_precision(self, report):
        return ladder_group(self.reports, report)

    def reference(self, report):
        group = self._same_precision(report)
        return group[0] if group else None

    def previous(self, report, size):
        group = self._same_precision(report)
        index = group.index(report)
        for other in reversed(group[:index]):
            if size in other.rows:
                return other
        return None

    def speedups(self, report, size):
        median = report.rows[size]["median_s"]
        reference = self.reference(report)
        over_reference = None
        if reference is not None and size in reference.rows and median > 0:
            over_reference = reference.rows[size]["median_s"] / median
        previous = self.previous(report, size)
        over_previous = previous.rows[size]["median_s"] / median if previous and median > 0 else None
        return over_reference, over_previous

    def tokens_match(self, report, size) -> str:
        reference = self.reference(report)
        if reference is report:
            return "ref"
        if reference is None or size not in reference.rows:
            return "—"
        mine, theirs = report.rows[size].get("token_hash"), reference.rows[size].get("token_hash")
        if not mine or not theirs:
            return "—"
        if mine == theirs:
            return "yes"
        # A bf16 chapter is held to the bf16 reference, not to fp32's tokens (its page); a
        # TF32 run rounds its products' inputs, so its tokens may part from fp32's too.
        return f"no ({report.precision})" if report.precision != reference.precision else "**no**"


def has_trace(reports) -> bool:
    """Whether the chapters traced a run (CUPTI): kernels and GPU idle time per step."""
    return any("kernels_per_step" in row for report in reports for row in report.rows.values())


def column_names(reference_name: str, trace: bool) -> list:
    return (["chapter", "prec", "B", "N", "steps", "median ms", "ms/step", "tokens/s",
             f"× {reference_name}", "× prev", "× floor", "peak alloc", "peak resv", "frag",
             "alloc/step", "syncs/step"]
            + (["kernels/step", "idle µs/step", "idle between steps µs", "matmuls ms/step",
                "rest on top"]
               if trace else [])
            + [f"tokens = {reference_name}"])


def row_cells(report, size, comparisons, reference_name: str) -> dict:
    """Every column's cell of one report's row at `size`, by column name."""
    row = report.rows[size]
    over_reference, over_previous = comparisons.speedups(report, size)
    floor = row.get("floor_s") or 0.0
    idle = row.get("gpu_idle_s_per_step")
    matmuls = row.get("matmul_s_per_step")
    step = row["median_s"] / row["steps"] if row.get("steps") else None
    gap = row.get("gpu_idle_between_steps_s")
    return {
        "chapter": escape(report.label), "prec": report.precision,
        "B": str(row["batch"]), "N": str(row["new_tokens"]), "steps": str(row["steps"]),
        "median ms": milliseconds(row["median_s"]), "ms/step": f"{row['ms_per_step']:.3f}",
        "tokens/s": f"{row['tokens_per_s']:,.0f}",
        f"× {reference_name}": ratio(over_reference), "× prev": ratio(over_previous),
        "× floor": ratio(row["median_s"] / floor if floor > 0 else None),
        "floor ms": milliseconds(floor) if floor > 0 else "—",
        "peak alloc": format_bytes(row["peak_allocated_bytes"]),
        "peak resv": format_bytes(row["peak_reserved_bytes"]),
        "frag": f"{100 * row['fragmentation']:.0f}%",
        "alloc/step": optional(row.get("allocations_per_step"), 1),
        "syncs/step": optional(row.get("host_syncs_per_step"), 2),
        "kernels/step": optional(row.get("kernels_per_step"), 1),
        "graphs/step": optional(row.get("graph_launches_per_step"), 2),
        "host µs/step": optional(None if row.get("host_api_s_per_step") is None
                                 else row["host_api_s_per_step"] * 1e6, 1),
        "idle µs/step": optional(None if idle is None else idle * 1e6, 1),
        "idle between steps µs": optional(None if gap is None else gap * 1e6, 1),
        "matmuls ms/step": optional(None if matmuls is None else matmuls * 1e3, 3),
        "rest on top": ("—" if matmuls is None or step is None
                        else f"{100 * (step / matmuls - 1):+.0f}%"),
        f"tokens = {reference_name}": comparisons.tokens_match(report, size),
    }


def table_head(header: list) -> list:
    return ["| " + " | ".join(header) + " |",
            "|" + "|".join("---" if index < 2 else "--:" for index in range(len(header))) + "|"]


def table(reports, sizes_of, comparisons, reference_name: str, trace: bool) -> list:
    header = column_names(reference_name, trace)
    lines = table_head(header)
    for report in reports:
        for index, size in enumerate(sizes_of(report)):
            cells = row_cells(report, size, comparisons, reference_name)
            if index > 0:
                cells["chapter"] = cells["prec"] = ""
            lines.append("| " + " | ".join(cells[name] for name in header) + " |")
    return lines


def beside_previous_table(report, ladder, layout, columns: list) -> list:
    """This chapter's rows at the main batch with the previous chapter's (same size and
    precision) above each, in the chosen columns only."""
    comparisons = Comparisons(ladder)
    # The traced columns of the graph chapters may be picked too (runs before them lack them: "—").
    known = column_names("01", True) + ["graphs/step", "host µs/step", "floor ms"]
    unknown = [name for name in columns if name not in known]
    if unknown:
        fail(f"beside-previous: unknown column(s) {', '.join(unknown)}; choose from "
             f"{', '.join(known[2:])}")
    header = ["chapter", "N"] + [name for name in columns if name != "N"]
    lines = table_head(header)
    for size in layout.main_sizes(report):
        previous = comparisons.previous(report, size)
        for shown in ([previous] if previous else []) + [report]:
            cells = row_cells(shown, size, comparisons, "01")
            lines.append("| " + " | ".join(cells[name] for name in header) + " |")
    return lines


def beside_previous_block(run, report, ladder, layout, results_name, columns) -> str:
    group = ladder_group(ladder, report)
    index = group.index(report)
    before = group[index - 1].label if index > 0 else None
    lines = [generated_note(results_name), "",
             (f"Chapter {before} and this chapter at B = {layout.batch}, in the columns that "
              f"matter here (every column: the table below):" if before else
              f"This chapter at B = {layout.batch}:"), ""]
    lines += beside_previous_table(report, ladder, layout, columns)
    return "\n".join(lines)


def failure_lines(reports) -> list:
    """One line per report and error: the sizes that failed with it, then the error."""
    lines = []
    for report in reports:
        sizes_by_error = {}
        for size, error in report.failures:
            sizes_by_error.setdefault(error, []).append(size)
        for error, sizes in sizes_by_error.items():
            where = ", ".join(f"({size[0]}, {size[1]})" for size in sizes if size)
            lines.append(f"- {escape(report.label)} ({report.precision})"
                         + (f" at (B, N) = {where}" if where else "") + f": {escape(error)}")
    return lines


def batches_at(reports, sizes_of) -> set:
    return {size[0] for report in reports for size in sizes_of(report)}


# ---------------------------------------------------------------- the run and the blocks

def timed_runs(reports) -> str:
    counts = sorted({len(row.get("seconds", [])) for report in reports for row in report.rows.values()})
    if not counts:
        return "?"
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def run_line(run: dict, reports, results_name: str) -> str:
    gpu = run.get("gpu") or (reports[0].device.split(" | ")[0] if reports else "unknown GPU")
    details = [f"driver {run['driver']}" if run.get("driver") else "",
               f"CUDA {run['cuda']}" if run.get("cuda") else ""]
    details = ", ".join(detail for detail in details if detail)
    commit = run.get("git_commit") or "unknown"
    dirty = " with uncommitted changes" if run.get("git_dirty") else ""
    bandwidth = run.get("copy_bandwidth_bytes_per_s")
    if not bandwidth:  # no run.json: the chapters' own measurements
        measured = [report.copy_bandwidth for report in reports if report.copy_bandwidth]
        bandwidth = statistics.median(measured) if measured else None
    text = (f"Run of {run.get('date', 'an unknown date')} on **{gpu}**"
            + (f" ({details})" if details else "")
            + f", commit `{commit}`{dirty}; device-to-device copy bandwidth measured in the run: "
            + f"{bandwidth_text(bandwidth)}. Results: `{results_name}`.")
    return text


def workload_line(ladder, pytorch) -> str:
    return ("Workload: GPT-2 small, fp32 weights (random, fixed seed), prompts holding only BOS, "
            "greedy decoding, stop once every row has produced EOS; "
            f"medians of {timed_runs(ladder + pytorch)} timed runs after a warm-up. "
            "× 01 and × prev: speedup over chapter 01 and over the chapter above, at the same "
            "size; × floor: time over the HBM floor; tokens = 01: same token hash as chapter 01.")


def pytorch_note(pytorch) -> str:
    versions = next((r.framework for r in pytorch if r.framework), {})
    made_with = ", ".join(f"{name} {versions[name]}" for name in ("torch", "transformers")
                          if versions.get(name))
    compile_mode = next((r.framework.get("compile_mode") for r in pytorch
                         if r.framework.get("compile_mode")), None)
    return ("Hugging Face `GPT2LMHeadModel` on the same GPU and workload, by "
            "`scripts/pytorch_baseline.py`" + (f" ({made_with})" if made_with else "") + ". "
            "fp32: TF32 off, as the chapters; tf32: PyTorch's TF32 matmuls "
            "(`set_float32_matmul_precision('high')`). Its weights are transformers' own random "
            "initialisation, not the chapters' numbers: compare time and memory with the chapters, "
            "tokens only between PyTorch rows (tokens = naive: same hash as PyTorch naive at the "
            "same precision; × naive: speedup over it). Memory includes the model's weights "
            "(about 0.5 GB), which the chapters' allocators do not hold; syncs/step counts the "
            "loop's own waits."
            + (f" torch.compile mode: `{compile_mode}`." if compile_mode else ""))


def memory_note(reports) -> list:
    """A warning for results whose chapters measured memory before each configuration
    started from an empty allocator cache; empty once a run has replaced them."""
    stale = [report.label for report in reports if not report.memory_from_empty_cache]
    if not stale:
        return []
    return ["**The memory columns (peak alloc, peak resv, frag) of "
            + ("this chapter" if len(reports) == 1
               else "these chapters" if len(stale) == len(reports) else ", ".join(stale))
            + " were measured before the chapter runner emptied the allocator's cache between "
            "configurations**: every configuration after a chapter's first in one process "
            "(N = 200 and 400 after N = 100; B = 8 and 64 of the batch sweep after B = 1) also "
            "counts memory cached by the ones before it, so reserved bytes and fragmentation read "
            "high there (replayed on the CPU: chapter 04 at N = 400 reserves 966 MiB alone, "
            "1446 MiB after N = 100 and 200). The next run of `scripts/run_ladder.sh` replaces "
            "them; the times are not affected.", ""]


def tables_markdown(run, ladder, pytorch, layout, level: int, results_name: str) -> list:
    heading = "#" * level
    trace = has_trace(ladder + pytorch)
    ladder_comparisons = Comparisons(ladder)
    pytorch_comparisons = Comparisons(pytorch)
    lines = [run_line(run, ladder + pytorch, results_name), "", workload_line(ladder, pytorch), ""]
    lines += memory_note(ladder)
    if ladder:
        lines += [f"{heading} The ladder at B = {layout.batch}", ""]
        lines += table(ladder, layout.main_sizes, ladder_comparisons, "01", trace) + [""]
        if len(batches_at(ladder, layout.sweep_sizes)) > 1:
            lines += [f"{heading} Batch sweep at N = {layout.new_tokens}", ""]
            lines += table(ladder, layout.sweep_sizes, ladder_comparisons, "01", trace) + [""]
        if any(layout.other_sizes(r) for r in ladder):
            lines += [f"{heading} Other sizes", ""]
            lines += table(ladder, layout.other_sizes, ladder_comparisons, "01", trace) + [""]
        failures = failure_lines(ladder)
        if failures:
            lines += ["Failed:", ""] + failures + [""]
    if pytorch:
        lines += [f"{heading} PyTorch side by side", "", pytorch_note(pytorch), ""]
        if any(layout.main_sizes(r) for r in pytorch):
            lines += table(pytorch, layout.main_sizes, pytorch_comparisons, "naive", trace) + [""]
        if len(batches_at(pytorch, layout.sweep_sizes)) > 1:
            lines += [f"PyTorch, batch sweep at N = {layout.new_tokens}:", ""]
            lines += table(pytorch, layout.sweep_sizes, pytorch_comparisons, "naive", trace) + [""]
        if any(layout.other_sizes(r) for r in pytorch):
            lines += ["PyTorch, other sizes:", ""]
            lines += table(pytorch, layout.other_sizes, pytorch_comparisons, "naive", trace) + [""]
        failures = failure_lines(pytorch)
        if failures:
            lines += ["Failed or skipped (the error each recorded):", ""] + failures + [""]
    return lines


def summary_markdown(run, ladder, pytorch, layout, results_name) -> str:
    lines = ["# decode-ladder results", "",
             "Generated by `scripts/render_results.py` from this directory's JSON: do not edit.", ""]
    lines += tables_markdown(run, ladder, pytorch, layout, 2, results_name)
    return "\n".join(lines).rstrip("\n") + "\n"


def generated_note(results_name: str) -> str:
    return (f"<!-- generated by scripts/render_results.py from {results_name}: "
            "edit the script, not this block -->")


def peak_reserved_block(ladder, layout, results_name) -> str:
    """Each chapter's peak reserved bytes (its first run in the ladder: a --tf32 run of a
    chapter reserves what its fp32 run does) at the main batch with the smallest and the
    largest token count, and at the largest batch of the sweep with the smallest."""
    chapters = {}
    for report in ladder:
        chapters.setdefault(report.chapter, report)
    sizes = sorted({size for report in chapters.values() for size in report.rows})
    counts = sorted({n for b, n in sizes if b == layout.batch})
    if not counts:
        return generated_note(results_name) + "\n\nNo configuration at the main batch."
    largest_batch = max(b for b, n in sizes if n == counts[0])
    columns = [(layout.batch, counts[0]), (layout.batch, counts[-1]), (largest_batch, counts[0])]
    columns = list(dict.fromkeys(columns))
    lines = [generated_note(results_name), ""]
    lines += ["| chapter | " + " | ".join(f"B = {b}, N = {n}" for b, n in columns) + " |",
              "|---|" + "--:|" * len(columns)]
    for chapter in sorted(chapters):
        report = chapters[chapter]
        label = report.label + (f" ({report.precision})" if report.precision != "fp32" else "")
        cells = [format_bytes(report.rows[size]["peak_reserved_bytes"]) if size in report.rows
                 else "—" for size in columns]
        lines.append("| " + " | ".join([escape(label)] + cells) + " |")
    return "\n".join(lines)


CARD_BEGIN = re.compile(r"^[ \t]*(<!-- card:(\d\d):begin -->)[ \t]*$", re.MULTILINE)
CPU_FILE = "results/cpu/00_cpu_reference.txt"


class CardFigures:
    """The figures the workshop's chapter cards compare, read from one run's reports."""

    def __init__(self, ladder, root):
        self.ladder, self.root = ladder, root
        self.comparisons = Comparisons(ladder)

    def report(self, number: str, precision: str = "fp32"):
        for report in self.ladder:
            if report.chapter.startswith(number + "_") and report.precision == precision:
                return report
        fail(f"workshop card: no chapter {number} ({precision}) in the run")

    def row(self, report, batch: int, new_tokens: int = 100) -> dict:
        if (batch, new_tokens) not in report.rows:
            fail(f"workshop card: {report.chapter} has no B = {batch}, N = {new_tokens}")
        return report.rows[(batch, new_tokens)]

    def previous(self, report, batch: int, new_tokens: int = 100) -> str:
        self.row(report, batch, new_tokens)
        return f"{self.comparisons.speedups(report, (batch, new_tokens))[1]:.2f}"

    def against(self, report, before: str, batches=(1, 32)) -> str:
        """This chapter's speed over the one before at each batch: "1.32 times chapter 04 at
        B = 1, 1.20 at B = 32"."""
        first, *rest = batches
        return ", ".join([f"{self.previous(report, first)} times chapter {before} at B = {first}"]
                         + [f"{self.previous(report, b)} at B = {b}" for b in rest])

    def previous_range(self, report) -> str:
        values = [self.comparisons.speedups(report, size)[1] for size in sorted(report.rows)
                  if size[1] == 100]
        low, high = min(values), max(values)
        return f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}"

    def ms(self, report, batch: int, new_tokens: int = 100) -> str:
        return f"{self.row(report, batch, new_tokens)['ms_per_step']:.3g} ms"

    def floor(self, report, batch: int, new_tokens: int = 100) -> str:
        row = self.row(report, batch, new_tokens)
        return f"{row['median_s'] / row['floor_s']:.1f}"

    def field(self, report, name: str, batch: int, new_tokens: int = 100, scale=1.0,
              digits=1) -> str:
        value = self.row(report, batch, new_tokens).get(name)
        if value is None:
            fail(f"workshop card: {report.chapter} B = {batch}, N = {new_tokens} has no {name}")
        return f"{value * scale:.{digits}f}"

    def change(self, before, report, name: str, batch: int, new_tokens: int = 100, scale=1.0,
               digits=0, unit="") -> str:
        """A column's value in the chapter before and in this one: "112 -> 0"."""
        return (f"{self.field(before, name, batch, new_tokens, scale, digits)}{unit} -> "
                f"{self.field(report, name, batch, new_tokens, scale, digits)}{unit}")

    def rest_on_top(self, report, batch: int, new_tokens: int) -> str:
        row = self.row(report, batch, new_tokens)
        return f"{100 * (row['median_s'] / row['steps'] / row['matmul_s_per_step'] - 1):+.0f}%"

    def cpu_ms(self) -> str:
        """Chapter 00's ms a step at B = 1 from its committed CPU run."""
        path = self.root / CPU_FILE
        for line in (path.read_text().splitlines() if path.exists() else []):
            fields = line.split()
            if len(fields) > 9 and fields[:2] == ["1", "8"] and fields[2] == "8":
                return fields[10]
        fail(f"workshop card: {CPU_FILE} has no B = 1, N = 8 row")


def card_compare(number: str, f: CardFigures) -> str:
    """The *Compare* sentence of chapter `number`'s workshop card."""
    if number == "00":
        cpu, gpu = float(f.cpu_ms()), f.row(f.report("01"), 1)["ms_per_step"]
        return (f"{cpu:.0f} ms a step at B = 1 on a 2-core CI machine (`{CPU_FILE}`) against "
                f"chapter 01's {gpu:.3g} ms: about {cpu / gpu:.0f} times.")
    if number == "01":
        r = f.report("01")
        one, many = f.row(r, 1)["ms_per_step"], f.row(r, 32)["ms_per_step"]
        return (f"{f.ms(r, 1)} at B = 1, {f.ms(r, 32)} at B = 32 ({many / one:.1f} times for 32 "
                f"times the rows), {f.floor(r, 1)} and {f.floor(r, 32)} times the floor; "
                f"`syncs/step` {f.field(r, 'host_syncs_per_step', 32, digits=2)}.")
    if number == "02":
        r = f.report("02")
        return (f"{f.against(r, '01', (1, 32, 64))}; "
                f"{f.field(r, 'allocations_per_step', 32, digits=0)} allocations a step; `frag` "
                f"{f.field(r, 'fragmentation', 32, 400, 100, 0)}% at N = 400 "
                f"({format_bytes(f.row(r, 32, 400)['peak_reserved_bytes'])} reserved).")
    if number == "03":
        r, before = f.report("03"), f.report("02")
        return (f"{f.previous_range(r)} times chapter 02 at N = 100; `peak resv` "
                f"{format_bytes(f.row(before, 32, 400)['peak_reserved_bytes'])} -> "
                f"{format_bytes(f.row(r, 32, 400)['peak_reserved_bytes'])} at N = 400, `frag` "
                f"{f.change(before, r, 'fragmentation', 32, 400, 100, unit='%')}.")
    if number == "04":
        r, before = f.report("04"), f.report("03")
        return (f"`alloc/step` {f.change(before, r, 'allocations_per_step', 32)}; "
                f"{f.against(r, '03')}; `rest on top` of the "
                f"matmuls {f.rest_on_top(r, 32, 100)} at N = 100, {f.rest_on_top(r, 32, 400)} "
                "at N = 400.")
    if number == "05":
        r, before = f.report("05"), f.report("04")
        return (f"`kernels/step` {f.change(before, r, 'kernels_per_step', 32)} at B = 32; "
                f"{f.against(r, '04')}; `rest on top` "
                f"{f.rest_on_top(before, 32, 100)} -> {f.rest_on_top(r, 32, 100)}.")
    if number == "06":
        r, before = f.report("06"), f.report("05")
        gap = "gpu_idle_between_steps_s"
        return (f"idle between steps {f.change(before, r, gap, 32, scale=1e6, digits=1)} µs "
                f"at B = 32; {f.against(r, '05')}.")
    if number == "07":
        r, before = f.report("07"), f.report("06")
        return (f"{f.against(r, '06')}: "
                f"a graph launch a step instead of "
                f"~{f.field(before, 'kernels_per_step', 32, digits=0)} launches.")
    if number == "08":
        return (f"{f.previous_range(f.report('08'))} times chapter 07 across B = 1-64; one "
                "launch and one wait a generation.")
    if number in ("09", "10", "11"):
        precision = "fp32" if number == "09" else "bf16"
        r = f.report(number, precision)
        before = {"09": "08", "10": "09", "11": "10"}[number]
        ratios = ", ".join(f.previous(r, b) for b in (1, 8, 32))
        text = (f"{ratios} and {f.previous(r, 64)} times chapter {before} at B = 1, 8, 32 and "
                "64")
        if number == "09":
            b = f.report("08")
            return text + f"; `kernels/step` {f.change(b, r, 'kernels_per_step', 8)} at B = 8."
        if number == "10":
            return text + f"; its `× floor` ({f.floor(r, 1)} at B = 1) is against the bf16 floor."
        ten = f.report("10", "bf16")
        differ = [str(b) for b in (1, 8, 32, 64)
                  if f.row(r, b).get("token_hash") != f.row(ten, b).get("token_hash")]
        tokens = ("chapter 10's tokens hash at every batch" if not differ else
                  f"**tokens unlike chapter 10's** at B = {', '.join(differ)}")
        return (text + f" (below 1: slower), `kernels/step` "
                f"{f.field(r, 'kernels_per_step', 32)} at B = 32, {tokens}.")
    fail(f"workshop card: no figures for chapter {number}")


def card_block(number: str, figures: CardFigures, run, results_name) -> str:
    gpu = run.get("gpu", "the run's GPU")
    return (generated_note(results_name) + "\n\n" + f"*Compare* (`{results_name}`, {gpu}): "
            + card_compare(number, figures))


def compact_table(reports, layout, token_counts, comparisons, reference_name) -> list:
    """One line per report: the median time at each token count, as a multiple of the floor."""
    header = (["chapter", "prec"] + [f"N = {n}" for n in token_counts]
              + [f"× {reference_name} (N = {token_counts[-1]})", f"tokens = {reference_name}"])
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if index < 2 else "--:" for index in range(len(header))) + "|"]
    for report in reports:
        cells = [escape(report.label), report.precision]
        for new_tokens in token_counts:
            row = report.rows.get((layout.batch, new_tokens))
            if row is None:
                failed = any(size in (None, (layout.batch, new_tokens)) for size, _ in report.failures)
                cells.append("failed" if failed else "—")
                continue
            floor = row.get("floor_s") or 0.0
            multiple = f" ({row['median_s'] / floor:.1f}× floor)" if floor > 0 else ""
            cells.append(f"{milliseconds(row['median_s'])} ms{multiple}")
        last = (layout.batch, token_counts[-1])
        cells.append(ratio(comparisons.speedups(report, last)[0]) if last in report.rows else "—")
        checks = {comparisons.tokens_match(report, size) for size in layout.main_sizes(report)}
        cells.append(checks.pop() if len(checks) == 1 else "**no**" if "**no**" in checks else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def headline(ladder, pytorch, layout) -> list:
    """The README's first sentences on speed: at B = layout.batch and the smallest N, for each
    precision the ladder ran, its fastest rung and its last (one sentence where they are the
    same) against the fastest PyTorch row of the same precision, batch and N in the same
    run, as faster or slower; said plainly where the run has no such row."""
    sentences = []
    for precision in [p for p in PRECISION_ORDER if any(r.precision == p for r in ladder)]:
        rungs = [r for r in ladder if r.precision == precision and r.chapter[:2].isdigit()
                 and r.main_sizes_at(layout)]
        if not rungs:
            continue
        last = max(rungs, key=lambda r: r.chapter)
        key = min(last.main_sizes_at(layout), key=lambda k: k[1])
        timed = [r for r in rungs if key in r.rows]
        fastest = min(timed, key=lambda r: r.rows[key]["ms_per_step"])
        rivals = [(r.rows[key]["ms_per_step"], r) for r in pytorch
                  if r.precision == precision and key in r.rows]
        where = f"{precision}, B = {key[0]}, N = {key[1]}"
        for rung in [fastest] + ([last] if last is not fastest else []):
            mine = rung.rows[key]["ms_per_step"]
            if not rivals:
                sentences.append(f"{rung.label} ({where}): {mine:.3f} ms a step; this run has "
                                 "no PyTorch row at that precision, batch and N to set beside it.")
                continue
            best, rival = min(rivals, key=lambda pair: pair[0])
            verdict = (f"{best / mine:.2f}x faster" if mine <= best else
                       f"{mine / best:.2f}x slower")
            sentences.append(f"{rung.label} ({where}): {mine:.3f} ms a step against {best:.3f} "
                             f"ms for the fastest PyTorch variant of the same run "
                             f"({rival.label}), {verdict}.")
    return sentences


def readme_block(run, ladder, pytorch, layout, results_name, plots) -> str:
    lines = [generated_note(results_name), "", run_line(run, ladder + pytorch, results_name), ""]
    lead = headline(ladder, pytorch, layout)
    if lead:
        lines += ["Each precision's fastest rung and its last against what a PyTorch user would "
                  "run, same run, same GPU:", ""]
        lines += [f"- {sentence}" for sentence in lead] + [""]
        compiled = {"pytorch_hf_static_compiled", "pytorch_static_step_compiled"}
        if not any(report.chapter in compiled for report in pytorch):
            lines += ["This run has none of the PyTorch variants compiled with CUDA graphs "
                      "(`scripts/pytorch_baseline.py`'s `hf_static_compiled` and "
                      "`static_step_compiled`): the fastest row above still pays Python and a "
                      "launch per kernel every step.", ""]
    token_counts = sorted({key[1] for report in ladder + pytorch for key in layout.main_sizes(report)})
    if token_counts:
        lines += [f"Median time of a whole generation at B = {layout.batch} (BOS prompts, GPT-2 "
                  "small, random weights), and its multiple of the HBM floor:", ""]
    if ladder and token_counts:
        lines += compact_table(ladder, layout, token_counts, Comparisons(ladder), "01") + [""]
    if pytorch and token_counts:
        lines += ["The PyTorch variants of `scripts/pytorch_baseline.py` (Hugging Face GPT-2) on the same GPU:", ""]
        lines += compact_table(pytorch, layout, token_counts, Comparisons(pytorch), "naive") + [""]
    unfinished = [f"{report.label} ({report.precision}, {len(report.rows)} configurations)"
                  for report in ladder + pytorch if not report.complete]
    if unfinished:
        lines += ["Stopped by the job's time limit before their last configuration, so some "
                  "cells above are empty: " + "; ".join(unfinished) + ".", ""]
    if "time_per_chapter" in plots:
        lines += [f"![Time per chapter](docs/images/{PLOTS['time_per_chapter']})", ""]
    lines.append("Every column, the batch sweep and the plots: [the results page](docs/results.md).")
    return "\n".join(lines)


def results_page_block(run, ladder, pytorch, layout, results_name, plots) -> str:
    lines = [generated_note(results_name), ""]
    lines += tables_markdown(run, ladder, pytorch, layout, 3, results_name)
    captions = {
        "time_per_chapter": "Median time per chapter at each N (log scale), with the HBM floor",
        "time_vs_n": "Median time against N, one line per chapter, with the HBM floor",
        "batch_sweep": "Tokens per second against the batch, with the floor's rate",
    }
    for name, caption in captions.items():
        if name in plots:
            lines += [f"![{caption}](images/{PLOTS[name]})", ""]
    return "\n".join(lines).rstrip("\n")


def chapter_block(run, report, ladder, layout, results_name) -> str:
    comparisons = Comparisons(ladder)
    trace = has_trace([report])
    lines = [generated_note(results_name), "", run_line(run, [report], results_name), ""]
    lines += memory_note([report])
    lines += [f"At B = {layout.batch}:", ""]
    lines += table([report], layout.main_sizes, comparisons, "01", trace) + [""]
    if len(batches_at([report], layout.sweep_sizes)) > 1:
        lines += [f"Batch sweep at N = {layout.new_tokens}:", ""]
        lines += table([report], layout.sweep_sizes, comparisons, "01", trace) + [""]
    return "\n".join(lines).rstrip("\n")


# ---------------------------------------------------------------- where a step's time goes

PROFILE_STEP = re.compile(r"^batch (\d+), (\d+) new tokens: GPU busy ([0-9.]+) ms of ([0-9.]+) ms "
                          r"per step")
PROFILE_KERNEL = re.compile(r"^\s+([0-9.]+) us/step\s+([0-9.]+) launches/step\s+(.+)$")
# The matrix products' kernels: cuBLASLt's (the products themselves and their split-K
# reductions) and the decode matmuls (kernels/decode_matmul.cu).
MATMUL_KERNEL = re.compile(r"gemm|cublasLt|cutlass|decode_matmul", re.IGNORECASE)


@dataclass
class StepTime:
    """One traced step, split three ways: the matrix products' kernels, every other
    kernel, and the time the GPU ran nothing."""
    label: str
    source: str
    batch: int
    new_tokens: int
    step_ms: float
    matmul_ms: float
    other_ms: float
    idle_ms: float


def step_time(root: pathlib.Path, report) -> "StepTime | None":
    """The first traced configuration of results/profile/<chapter>.kernel_profile.txt."""
    relative = f"{PROFILES}/{report.chapter}.kernel_profile.txt"
    path = root / relative
    if not path.is_file():
        return None
    lines = path.read_text().splitlines()
    for index, line in enumerate(lines):
        step = PROFILE_STEP.match(line)
        if not step:
            continue
        matmul_us = 0.0
        for kernel_line in lines[index + 1:]:
            kernel = PROFILE_KERNEL.match(kernel_line)
            if not kernel:
                break
            if MATMUL_KERNEL.search(kernel.group(3)):
                matmul_us += float(kernel.group(1))
        busy, whole = float(step.group(3)), float(step.group(4))
        return StepTime(label=report.label, source=relative, batch=int(step.group(1)),
                        new_tokens=int(step.group(2)), step_ms=whole, matmul_ms=matmul_us / 1e3,
                        other_ms=busy - matmul_us / 1e3, idle_ms=whole - busy)
    return None


STEP_TIME_PARTS = [("matmul kernels", "matmul_ms", "#4e79a7"),
                   ("other kernels", "other_ms", "#f28e2b"),
                   ("GPU idle", "idle_ms", "#bab0ac")]


def step_time_svg(times: list) -> str:
    """Horizontal bars on one linear scale, one per chapter, split three ways."""
    left, bar_height, gap, width = 190, 26, 14, 520
    top = 36
    scale_ms = max(time.step_ms for time in times)
    tick = next(step for step in (0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10, 20, 25, 50)
                if scale_ms / step <= 6)
    axis_ms = tick * -(-scale_ms // tick)
    height = top + len(times) * (bar_height + gap) + 40
    total_width = left + width + 30

    def x(ms):
        return left + width * ms / axis_ms

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_width}" height="{height}" '
             f'viewBox="0 0 {total_width} {height}" font-family="sans-serif" font-size="12">',
             f'<rect width="{total_width}" height="{height}" fill="white"/>']
    legend_x = left
    for name, _, colour in STEP_TIME_PARTS:
        parts.append(f'<rect x="{legend_x}" y="10" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{legend_x + 16}" y="20">{name}</text>')
        legend_x += 16 + 8 * len(name) + 20
    for row, time in enumerate(times):
        y = top + row * (bar_height + gap)
        parts.append(f'<text x="{left - 8}" y="{y + bar_height / 2 + 4:.1f}" '
                     f'text-anchor="end">{time.label}</text>')
        start = 0.0
        for name, attribute, colour in STEP_TIME_PARTS:
            value = max(getattr(time, attribute), 0.0)
            parts.append(f'<rect x="{x(start):.1f}" y="{y}" width="{x(start + value) - x(start):.1f}" '
                         f'height="{bar_height}" fill="{colour}"><title>{name}: {value:.3f} ms'
                         f'</title></rect>')
            if x(start + value) - x(start) > 44:
                parts.append(f'<text x="{(x(start) + x(start + value)) / 2:.1f}" '
                             f'y="{y + bar_height / 2 + 4:.1f}" text-anchor="middle" '
                             f'fill="white">{value:.3f}</text>')
            start += value
    axis_y = top + len(times) * (bar_height + gap)
    parts.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + width}" y2="{axis_y}" '
                 f'stroke="black"/>')
    ticks = int(round(axis_ms / tick))
    for index in range(ticks + 1):
        ms = index * tick
        parts.append(f'<line x1="{x(ms):.1f}" y1="{axis_y}" x2="{x(ms):.1f}" y2="{axis_y + 4}" '
                     f'stroke="black"/>')
        parts.append(f'<text x="{x(ms):.1f}" y="{axis_y + 16}" text-anchor="middle">'
                     f'{ms:g}</text>')
    parts.append(f'<text x="{left + width / 2}" y="{axis_y + 32}" text-anchor="middle">'
                 f'ms per step (traced run, linear scale)</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def step_time_image(folder_number: str) -> str:
    return f"step_time_{folder_number}.svg"


def step_time_block(times: list, image: str) -> str:
    """The picture's link and its numbers, for a chapter page."""
    sources = ", ".join(f"`{time.source}`" for time in times)
    first = times[0]
    lines = [f"<!-- generated by scripts/render_results.py from {PROFILES}: edit the script, "
             "not this block -->", "",
             f"![Where a step's time goes](../../docs/images/{image})", "",
             "| chapter | traced ms/step | matmul kernels | other kernels | GPU idle |",
             "|---|--:|--:|--:|--:|"]
    for time in times:
        lines.append(f"| {escape(time.label)} | {time.step_ms:.3f} | {time.matmul_ms:.3f} | "
                     f"{time.other_ms:.3f} | {time.idle_ms:.3f} |")
    lines += ["", f"B = {first.batch}, N = {first.new_tokens}, milliseconds per step of one run "
              f"traced with CUPTI (`--kernel-profile`; tracing slows the host, so the traced step "
              f"is longer than the timed one and its idle time larger): {sources}. Matmul "
              "kernels are cuBLASLt's (the products and their split-K reductions); other "
              "kernels are the rest of the GPU's busy time; GPU idle is the step's time with no "
              "kernel running."]
    return "\n".join(lines)


# ---------------------------------------------------------------- plots

def make_plots(ladder, pytorch, layout, images: pathlib.Path) -> set:
    """The PNGs that could be drawn; one line and none without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        print("render_results.py: matplotlib is not installed: no plots "
              "(apt-get install python3-matplotlib, or pip install matplotlib)", file=sys.stderr)
        return set()
    pyplot.rcParams.update({"font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    images.mkdir(parents=True, exist_ok=True)
    for name in PLOTS.values():  # a plot this run cannot draw must not survive from an older one
        (images / name).unlink(missing_ok=True)
    metadata = {"Software": None}  # no version string: the same data gives the same file
    drawn = set()
    colours = pyplot.get_cmap("tab10").colors
    chapters = [report for report in ladder if report.precision == "fp32"] or ladder
    baseline_pytorch = [report for report in pytorch if report.precision == "fp32"]
    token_counts = sorted({key[1] for report in chapters + baseline_pytorch
                           for key in layout.main_sizes(report)})

    def floor_at(size):
        for report in chapters + baseline_pytorch:
            if size in report.rows and report.rows[size].get("floor_s"):
                return report.rows[size]["floor_s"]
        return None

    groups = chapters + baseline_pytorch
    if groups and token_counts:
        labels = [r.label for r in chapters] + ["HBM floor"] + [f"PyTorch: {r.label}" for r in baseline_pytorch]
        figure, axes = pyplot.subplots(figsize=(max(8, 0.9 * len(labels) + 2), 5))
        width = 0.8 / len(token_counts)
        for index, new_tokens in enumerate(token_counts):
            size = (layout.batch, new_tokens)
            values = ([r.rows[size]["median_s"] * 1e3 if size in r.rows else float("nan") for r in chapters]
                      + [(floor_at(size) or float("nan")) * 1e3]
                      + [r.rows[size]["median_s"] * 1e3 if size in r.rows else float("nan") for r in baseline_pytorch])
            positions = [x + (index - (len(token_counts) - 1) / 2) * width for x in range(len(labels))]
            bars = axes.bar(positions, values, width, label=f"N = {new_tokens}", color=colours[index % 10])
            bars[len(chapters)].set_hatch("//")  # the floor is a bound, not a measurement
            bars[len(chapters)].set_edgecolor("black")
        for separator in (len(chapters) - 0.5, len(chapters) + 0.5):
            axes.axvline(separator, color="grey", linewidth=0.8)
        axes.set_xticks(range(len(labels)))
        axes.set_xticklabels(labels, rotation=30, ha="right")
        axes.set_yscale("log")
        axes.set_ylabel("median time (ms, log scale)")
        axes.set_title(f"Time per chapter, B = {layout.batch}, fp32"
                       + (" (PyTorch rows: Hugging Face GPT-2, fp32)" if baseline_pytorch else ""))
        axes.legend()
        figure.tight_layout()
        figure.savefig(images / PLOTS["time_per_chapter"], dpi=110, metadata=metadata)
        pyplot.close(figure)
        drawn.add("time_per_chapter")

    if chapters and len(token_counts) > 1:
        figure, axes = pyplot.subplots(figsize=(7, 4.5))
        for index, report in enumerate(chapters):
            sizes = [size for size in layout.main_sizes(report)]
            axes.plot([size[1] for size in sizes], [report.rows[s]["median_s"] * 1e3 for s in sizes],
                      marker="o", color=colours[index % 10], label=report.label)
        floors = [(n, floor_at((layout.batch, n))) for n in token_counts]
        floors = [(n, value) for n, value in floors if value]
        if floors:
            axes.plot([n for n, _ in floors], [value * 1e3 for _, value in floors], "k--",
                      label="HBM floor")
        axes.set_yscale("log")
        axes.set_xticks(token_counts)
        axes.set_xlabel("new tokens N")
        axes.set_ylabel("median time (ms, log scale)")
        axes.set_title(f"Time against N, B = {layout.batch}, fp32")
        axes.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(images / PLOTS["time_vs_n"], dpi=110, metadata=metadata)
        pyplot.close(figure)
        drawn.add("time_vs_n")

    batches = sorted({key[0] for report in chapters for key in layout.sweep_sizes(report)})
    if chapters and len(batches) > 1:
        figure, axes = pyplot.subplots(figsize=(7, 4.5))
        for index, report in enumerate(chapters):
            sizes = layout.sweep_sizes(report)
            axes.plot([size[0] for size in sizes], [report.rows[s]["tokens_per_s"] for s in sizes],
                      marker="o", color=colours[index % 10], label=report.label)
        floor_rates = []
        for batch in batches:
            size = (batch, layout.new_tokens)
            row = next((r.rows[size] for r in chapters if size in r.rows), None)
            if row and row.get("floor_s"):
                floor_rates.append((batch, row["batch"] * row["steps"] / row["floor_s"]))
        if floor_rates:
            axes.plot([b for b, _ in floor_rates], [rate for _, rate in floor_rates], "k--",
                      label="HBM floor's rate")
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xticks(batches)
        axes.set_xticklabels([str(b) for b in batches])
        axes.set_xlabel("batch B")
        axes.set_ylabel("tokens per second (log scale)")
        axes.set_title(f"Batch sweep at N = {layout.new_tokens}, fp32")
        axes.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(images / PLOTS["batch_sweep"], dpi=110, metadata=metadata)
        pyplot.close(figure)
        drawn.add("batch_sweep")
    return drawn


# ---------------------------------------------------------------- GPT-2's sizes

def in_size_sweep(report) -> bool:
    """The rows the size sweep runs: chapters 07 on that serve one batch (not 12), and the
    compiled anchors, in fp32 or bf16."""
    if report.precision not in SIZE_PRECISIONS:
        return False
    if report.is_pytorch:
        return report.chapter in SIZE_ANCHORS
    number = report.chapter[:2]
    return (number.isdigit() and int(number) >= SIZE_FIRST_CHAPTER
            and report.chapter != "12_continuous_batching")


def load_sizes(directory: pathlib.Path, ladder, pytorch) -> dict:
    """{model: {(chapter, precision): Report}}: GPT-2 small from the run's own reports, the
    larger sizes from directory/sizes/MODEL (empty where the run has none)."""
    sizes = {}
    for model in MODEL_PARAMETERS:
        if model == "small":
            reports = ladder + pytorch
        else:
            folder = directory / "sizes" / model
            reports = []
            if folder.is_dir() and any(path.name != "run.json" for path in folder.glob("*.json")):
                _, size_ladder, size_pytorch = load_results(folder)
                reports = size_ladder + size_pytorch
        sizes[model] = {(r.chapter, r.precision): r for r in reports if in_size_sweep(r)}
    return sizes


def size_series(sizes: dict) -> list:
    """(chapter, precision, label) of every rung and anchor any size has, in ladder order:
    the chapters, then the anchors, fp32 before bf16."""
    found = {}
    for reports in sizes.values():
        for key, report in reports.items():
            found.setdefault(key, report)

    def order(key):
        report = found[key]
        position = (PYTORCH_ORDER.index(report.chapter) if report.is_pytorch
                    and report.chapter in PYTORCH_ORDER else 0)
        return (report.is_pytorch, position, report.chapter, SIZE_PRECISIONS.index(report.precision))
    return [(key[0], key[1], SIZE_ANCHORS.get(key[0], found[key].label))
            for key in sorted(found, key=order)]


def size_row(sizes, model, chapter, precision, batch):
    """The configuration (batch, N = 100) of that series at that size, "failed", or None."""
    report = sizes[model].get((chapter, precision))
    if report is None:
        return None
    row = report.rows.get((batch, SIZE_NEW_TOKENS))
    if row is not None:
        return row
    if any(size in ((batch, SIZE_NEW_TOKENS), None) for size, _ in report.failures):
        return "failed"
    return None


def times_floor(row):
    """A row's median time over its HBM floor, or None."""
    if not isinstance(row, dict) or not row.get("floor_s"):
        return None
    return row["median_s"] / row["floor_s"]


def size_cell(row) -> str:
    if row == "failed":
        return "failed"
    value = times_floor(row)
    if value is None:
        return "not measured"
    return f"{ratio(value)} ({row['median_s'] * 1e3 / max(row.get('steps') or 1, 1):.3g} ms)"


def floor_per_step(sizes, model, precision, batch):
    """The HBM floor in seconds a step at that size, precision and batch, from any row."""
    for (chapter, report_precision), report in sizes[model].items():
        row = report.rows.get((batch, SIZE_NEW_TOKENS))
        if report_precision == precision and row and row.get("floor_s") and row.get("steps"):
            return row["floor_s"] / row["steps"]
    return None


def model_heading(model: str) -> str:
    return f"{model} ({MODEL_PARAMETERS[model] / 1e6:.0f} M)"


def sizes_block(run, sizes, results_name, plot_drawn: bool) -> str:
    lines = [generated_note(results_name), ""]
    measured = [model for model in MODEL_PARAMETERS if model != "small" and sizes[model]]
    series = size_series(sizes)
    everyone = [report for reports in sizes.values() for report in reports.values()]
    if everyone:
        lines += [run_line(run, everyone, results_name), ""]
    if not measured:
        lines += [f"Not measured: `{results_name}` holds no run of GPT-2 medium, large or xl yet "
                  "(`scripts/run_ladder.sh` writes them into its `sizes/` folder on a GPU "
                  "machine; `--sizes-only` adds them to a run that has the rest).", ""]
    lines += ["Each cell: the median time of a generation over the HBM floor of that size and "
              "precision (× floor; 1.00× would be the floor), then the median time a step. "
              f"N = {SIZE_NEW_TOKENS}, BOS prompts, random weights of each size (fixed seed); "
              "small's rows are the run's own, the others `--model medium`, `large` and `xl`.", ""]
    models = list(MODEL_PARAMETERS)
    for batch in SIZE_BATCHES:
        lines += [f"**B = {batch}**", ""]
        lines += table_head(["rung", "precision"] + [model_heading(model) for model in models])
        for chapter, precision, label in series:
            cells = [size_cell(size_row(sizes, model, chapter, precision, batch)) for model in models]
            lines.append("| " + " | ".join([escape(label), precision] + cells) + " |")
        for precision in SIZE_PRECISIONS:
            floors = [floor_per_step(sizes, model, precision, batch) for model in models]
            if any(floors):
                cells = ["not measured" if value is None else f"{value * 1e3:.3g} ms a step"
                         for value in floors]
                lines.append("| " + " | ".join(["HBM floor", precision] + cells) + " |")
        lines.append("")
    if plot_drawn:
        lines += [f"![× floor against the model's size, B = 1 and 32](images/{SIZES_PLOT})", ""]
    return "\n".join(lines).rstrip("\n")


def make_size_plot(sizes, images: pathlib.Path) -> bool:
    """× floor against the parameter count, one panel per batch; only once a size beyond
    small was measured (one point per line says nothing). Whether it was drawn."""
    target = images / SIZES_PLOT
    target.unlink(missing_ok=True)  # a plot this run cannot draw must not survive an older one
    if not any(sizes[model] for model in MODEL_PARAMETERS if model != "small"):
        return False
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        print("render_results.py: matplotlib is not installed: no size plot", file=sys.stderr)
        return False
    pyplot.rcParams.update({"font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    images.mkdir(parents=True, exist_ok=True)
    colours = pyplot.get_cmap("tab10").colors
    series = size_series(sizes)
    figure, panels = pyplot.subplots(1, len(SIZE_BATCHES), figsize=(11, 4.5), sharey=True)
    for axes, batch in zip(panels, SIZE_BATCHES):
        for index, (chapter, precision, label) in enumerate(series):
            points = [(MODEL_PARAMETERS[model],
                       times_floor(size_row(sizes, model, chapter, precision, batch)))
                      for model in MODEL_PARAMETERS]
            points = [(x, y) for x, y in points if y is not None]
            if not points:
                continue
            anchor = chapter in SIZE_ANCHORS
            axes.plot([x for x, _ in points], [y for _, y in points],
                      marker="s" if anchor else "o",
                      linestyle="--" if precision == "bf16" else "-",
                      color=colours[index % 10], label=f"{label} ({precision})")
        axes.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
        axes.set_xscale("log")
        axes.set_xticks(list(MODEL_PARAMETERS.values()))
        axes.set_xticklabels([model_heading(model) for model in MODEL_PARAMETERS])
        axes.minorticks_off()
        axes.set_xlabel("GPT-2 size (parameters)")
        axes.set_title(f"B = {batch}, N = {SIZE_NEW_TOKENS}")
    panels[0].set_ylabel("× HBM floor (1 = the floor)")
    panels[0].set_ylim(bottom=0)
    panels[-1].legend(fontsize=7)
    figure.suptitle("Time over the HBM floor against the model's size")
    figure.tight_layout()
    figure.savefig(target, dpi=110, metadata={"Software": None})
    pyplot.close(figure)
    return True


# ---------------------------------------------------------------- writing

def marker_line(marker: str):
    """A marker counts only alone on its line, so prose may name it."""
    return re.compile(r"^[ \t]*" + re.escape(marker) + r"[ \t]*$", re.MULTILINE)


def has_markers(text: str, begin: str) -> bool:
    return marker_line(begin).search(text) is not None


class Writer:
    """Writes generated text into files, or (check mode) only notes the files it would change."""

    def __init__(self, check: bool):
        self.check = check
        self.stale = []  # check mode: the files whose generated text is not current

    def write(self, path: pathlib.Path, text: str):
        if path.exists() and path.read_text() == text:
            return
        if self.check:
            if path not in self.stale:
                self.stale.append(path)
        else:
            path.write_text(text)

    def replace_between(self, path: pathlib.Path, begin: str, end: str, content: str) -> bool:
        """Replaces the lines between the markers; False (and one line) when they are missing."""
        text = path.read_text()
        start = marker_line(begin).search(text)
        stop = marker_line(end).search(text, start.end()) if start else None
        if not start or not stop:
            print(f"render_results.py: {path}: no {begin} ... {end} lines: left as it is",
                  file=sys.stderr)
            return False
        # A blank line before the end marker keeps the block's last paragraph its own.
        self.write(path, text[:start.end()] + "\n" + content.rstrip("\n") + "\n\n"
                   + text[stop.start():])
        return True


def unmeasured_block(results_name: str) -> str:
    return "\n".join([generated_note(results_name), "",
                      f"Not measured: `{results_name}` holds no run of this chapter yet "
                      "(`scripts/run_ladder.sh` writes one on a GPU machine)."])


def render_unmeasured_chapters(root: pathlib.Path, measured: set, results_name: str,
                               writer) -> list:
    """The results blocks of every chapter page the run has no report for say so; the
    pages it wrote."""
    written = []
    for readme in sorted((root / "chapters").glob("*/README.md")):
        if readme.parent.name in measured:
            continue
        text = readme.read_text()
        blocks = ([(CHAPTER_BEGIN, CHAPTER_END)] if has_markers(text, CHAPTER_BEGIN) else []) + \
                 [(beside.group(1), BESIDE_END) for beside in BESIDE_BEGIN.finditer(text)]
        for begin, end in blocks:
            if writer.replace_between(readme, begin, end, unmeasured_block(results_name)):
                if readme not in written:
                    written.append(readme)
    return written


MEASURED_BEGIN = re.compile(r"^[ \t]*<!-- measured:(\S+):begin -->[ \t]*$", re.MULTILINE)


def measured_block(root: pathlib.Path, relative: str) -> str:
    """The table lines of a kept measurement file, and where they came from."""
    path = root / relative
    if not path.is_file():
        fail(f"{relative}: no such measurement file (named by a measured:...:begin marker)")
    lines = path.read_text().splitlines()
    rows = [index for index, line in enumerate(lines) if line.startswith("|")]
    if not rows:
        fail(f"{relative}: no markdown table in it")
    before = [line.strip() for line in lines[:rows[0]] if line.strip()]
    after = [line.strip() for line in lines[rows[-1] + 1:] if line.strip()]
    source = (f"<!-- generated by scripts/render_results.py from {relative}: "
              f"edit the measurement, not this block -->")
    caption = f"`{relative}`: " + "; ".join(escape(line.replace(" | ", ", ")) for line in before)
    return "\n".join([source, "", caption, ""] + lines[rows[0]:rows[-1] + 1]
                     + ([""] + after if after else []))


def render_measured_blocks(root: pathlib.Path, writer: Writer) -> list:
    """Fills every measured:PATH block of the READMEs and docs pages; the files it wrote."""
    written = []
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md")),
             *sorted((root / "chapters").glob("*/README.md"))]
    for page in pages:
        if not page.exists():
            continue
        for relative in dict.fromkeys(MEASURED_BEGIN.findall(page.read_text())):
            if writer.replace_between(page, f"<!-- measured:{relative}:begin -->",
                                      f"<!-- measured:{relative}:end -->",
                                      measured_block(root, relative)):
                if page not in written:
                    written.append(page)
    return written


def display_name(directory: pathlib.Path, root: pathlib.Path) -> str:
    try:
        return directory.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return directory.name


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog="render_results.py", description=__doc__.split("\n")[0])
    parser.add_argument("results", type=pathlib.Path, help="the results directory (e.g. results/latest)")
    parser.add_argument("--root", type=pathlib.Path, default=REPOSITORY,
                        help="the checkout whose README.md, docs/ and chapters/ to update "
                             "(default: this one)")
    parser.add_argument("--no-docs", action="store_true",
                        help="write summary.md only: no plots, README.md and docs untouched")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming every file whose generated text "
                             "(summary.md, README, docs and chapter blocks) is not current. "
                             "The plots are not redrawn: the blocks name those that exist")
    args = parser.parse_args(argv)

    run, ladder, pytorch = load_results(args.results)
    layout = Layout(batch=main_batch(ladder or pytorch), new_tokens=sweep_new_tokens(ladder or pytorch))
    results_name = display_name(args.results, args.root)
    writer = Writer(args.check)
    summary = args.results / "summary.md"
    writer.write(summary, summary_markdown(run, ladder, pytorch, layout, results_name))
    written = [summary]
    if not args.no_docs:
        images = args.root / "docs" / "images"
        plots = ({name for name, file in PLOTS.items() if (images / file).exists()} if args.check
                 else make_plots(ladder, pytorch, layout, images))
        written += [args.root / "docs" / "images" / PLOTS[name] for name in sorted(plots)]
        readme = args.root / "README.md"
        if writer.replace_between(readme, RESULTS_BEGIN, RESULTS_END,
                                  readme_block(run, ladder, pytorch, layout, results_name, plots)):
            written.append(readme)
        page = args.root / "docs" / "results.md"
        if page.exists() and writer.replace_between(
                page, RESULTS_BEGIN, RESULTS_END,
                results_page_block(run, ladder, pytorch, layout, results_name, plots)):
            written.append(page)
        for report in ladder:
            chapter_readme = args.root / "chapters" / report.chapter / "README.md"
            if report.precision not in PAGE_PRECISIONS or not chapter_readme.exists():
                continue
            if has_markers(chapter_readme.read_text(), CHAPTER_BEGIN) and writer.replace_between(
                    chapter_readme, CHAPTER_BEGIN, CHAPTER_END,
                    chapter_block(run, report, ladder, layout, results_name)):
                written.append(chapter_readme)
            # Every beside-previous block of the page (a page may hold several, each with its
            # own columns; the begin lines differ, so each is found by its own).
            for beside in list(BESIDE_BEGIN.finditer(chapter_readme.read_text())):
                if writer.replace_between(
                        chapter_readme, beside.group(1), BESIDE_END,
                        beside_previous_block(run, report, ladder, layout, results_name,
                                              [name.strip() for name in beside.group(2).split("|")])):
                    if chapter_readme not in written:
                        written.append(chapter_readme)
            if has_markers(chapter_readme.read_text(), STEP_TIME_BEGIN):
                group = ladder_group(ladder, report)
                index = group.index(report)
                times = [time for time in (step_time(args.root, other)
                                           for other in group[max(0, index - 1):index + 1]) if time]
                if times:
                    image = images / step_time_image(report.chapter[:2])
                    images.mkdir(parents=True, exist_ok=True)
                    writer.write(image, step_time_svg(times))
                    written.append(image)
                    if writer.replace_between(chapter_readme, STEP_TIME_BEGIN, STEP_TIME_END,
                                              step_time_block(times, image.name)):
                        if chapter_readme not in written:
                            written.append(chapter_readme)
        if page.exists() and has_markers(page.read_text(), SIZES_BEGIN):
            sizes = load_sizes(args.results, ladder, pytorch)
            plot = images / SIZES_PLOT
            drawn = ((plot.exists() and any(sizes[model] for model in MODEL_PARAMETERS
                                            if model != "small"))
                     if args.check else make_size_plot(sizes, images))
            if drawn and not args.check:
                written.append(plot)
            if writer.replace_between(page, SIZES_BEGIN, SIZES_END,
                                      sizes_block(run, sizes, results_name, drawn)):
                if page not in written:
                    written.append(page)
        workshop = args.root / "docs" / "workshop.md"
        if (ladder and workshop.exists()
                and has_markers(workshop.read_text(), PEAK_RESERVED_BEGIN)
                and writer.replace_between(workshop, PEAK_RESERVED_BEGIN, PEAK_RESERVED_END,
                                           peak_reserved_block(ladder, layout, results_name))):
            written.append(workshop)
        if ladder and workshop.exists():
            figures = CardFigures(ladder, args.root)
            for card in list(CARD_BEGIN.finditer(workshop.read_text())):
                if writer.replace_between(workshop, card.group(1),
                                          f"<!-- card:{card.group(2)}:end -->",
                                          card_block(card.group(2), figures, run, results_name)):
                    if workshop not in written:
                        written.append(workshop)
        measured = {report.chapter for report in ladder if report.precision in PAGE_PRECISIONS}
        written += [page for page in render_unmeasured_chapters(args.root, measured, results_name,
                                                                writer) if page not in written]
        written += [page for page in render_measured_blocks(args.root, writer)
                    if page not in written]
    if args.check:
        for path in writer.stale:
            print(f"render_results.py: {path} is not current: "
                  f"run python3 scripts/render_results.py {results_name}", file=sys.stderr)
        return 1 if writer.stale else 0
    for path in written:
        print(f"render_results.py: wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
