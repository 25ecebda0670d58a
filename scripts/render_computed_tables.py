#!/usr/bin/env python3
"""scripts/render_computed_tables.py - the pages' tables of napkin arithmetic, from their sources.

The tables a page computes (from GPT-2's configuration, the default workload and the
committed run's copy bandwidth and floors) are generated here, never typed by hand. The
sources:
  common/config.hpp     GPT-2 small's sizes (n_layer, n_head, n_embd, vocab_size, n_positions)
  common/cli.hpp        the default workload: batch_sizes{32}, new_token_counts{100, 200, 400}
  results/latest/       run.json's copy_bandwidth_bytes_per_s, the chapters' floor_s
Every count is at the default batch B = 32 with BOS prompts (T = T0 = 1); L is the
number of cached positions, C = n_embd; a position of the KV cache is
2 (K and V) * n_layer * B * C * value bytes. Bytes are decimal (1 MB = 1e6 bytes).

Each block lies between <!-- computed:NAME:begin --> and <!-- computed:NAME:end -->, alone
on their lines; its first line names the sources. The blocks:

  chapters/01_naive_decode/README.md  computed:positions-run
      positions run per row N T0 + N (N - 1) / 2 against N needed, ratio (rounded down)
  chapters/02_kv_cache/README.md      computed:dynamic-cache-copies
      the torch.cat copies: 2 * n_layer * B * L * C * 4 bytes at the decode step with L
      cached positions, L = 1 .. N - 1, so N (N - 1) / 2 positions over the run; the time
      counts them read and written (2x) at run.json's copy bandwidth
  chapters/04_static_cache/README.md  computed:static-cache-reads
      cache read per step 2 * n_layer * B * (T + N) * C * 4, over the run's N - 1 decode
      steps; masked: decode step s (1 .. N - 1) masks N - s positions, N (N - 1) / 2 over
      the run, timed at run.json's bandwidth; the HBM floor is 04_static_cache.json's floor_s
  chapters/05_fused_kernels/README.md computed:fusion-bytes
      GELU: [B, 4C] read and written again per layer, 2 * B * 4C * 4 * n_layer bytes,
      n_layer launches; residual + LayerNorm: one [B, C] read 2 * n_layer times,
      2 * n_layer launches; append + attention: n_layer launches
  chapters/05_fused_kernels/README.md computed:masked-reads
      masked N (N - 1) / 2 positions (as chapter 04's), per step over the run's N steps,
      timed at run.json's bandwidth; valid: decode step s reads s + 1 positions,
      (N - 1) (N + 2) / 2 over the run
  chapters/05_fused_kernels/README.md computed:launches-per-step
      the launches of one decode step, counted by construction from the two loops
      (LAUNCHES below), not measured: CUPTI's kernels/step adds cuBLASLt's own kernels
  chapters/10_mixed_precision/README.md computed:bytes-per-step
      weights: every parameter but the position table (config.cpp's parameter_count()
      less n_positions * C), 4 or 2 bytes each; KV cache 2 * n_layer * B * C * bytes per
      position; logits B * vocab_size * 4 in both (floor_bytes() counts them as fp32)
  docs/workshop.md                    computed:other-gpus
      the floor bytes of 06_stream_interleaving(.sweep).json (floor_s x its own
      copy_bandwidth_bytes_per_s) over run.json's bandwidth for the row of run.json's
      GPU, and over datasheet bandwidth x (run.json's bandwidth / that GPU's datasheet
      bandwidth) for the others (DATASHEET_BANDWIDTH below, with its sources)

    python3 scripts/render_computed_tables.py           # rewrite the blocks
    python3 scripts/render_computed_tables.py --check   # write nothing; exit 1 naming stale files
"""
import argparse
import json
import pathlib
import re
import sys
from decimal import Decimal, ROUND_HALF_UP

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = "scripts/render_computed_tables.py"
RESULTS = "results/latest"
FP32, BF16 = 4, 2  # bytes per value

# Memory bandwidth on each GPU's datasheet (TB/s, as NVIDIA prints it or its GB/s / 1000):
#   H200 (SXM) 4.8 TB/s, H100 SXM 3.35 TB/s, H100 PCIe 2.0 TB/s: NVIDIA H200 and H100
#     Tensor Core GPU datasheets;
#   A100 80GB SXM 2,039 GB/s, A100 40GB PCIe 1,555 GB/s: NVIDIA A100 datasheet;
#   RTX 4090 1,008 GB/s (GeForce RTX 4090 specifications, 21 Gbps GDDR6X on 384 bits);
#   RTX 3090 936 GB/s (GeForce RTX 3090 specifications, 19.5 Gbps GDDR6X on 384 bits);
#   L40S 864 GB/s, A10 600 GB/s, L4 300 GB/s: NVIDIA L40S, A10 and L4 datasheets.
# The table prints at most two decimals (half up): 2.039 as 2.04.
DATASHEET_BANDWIDTH = [
    ("H200", "4.8"),
    ("H100 SXM", "3.35"),
    ("H100 PCIe", "2.0"),
    ("A100 80GB SXM", "2.039"),
    ("A100 40GB", "1.555"),
    ("RTX 4090", "1.008"),
    ("RTX 3090", "0.936"),
    ("L40S", "0.864"),
    ("A10", "0.600"),
    ("L4", "0.300"),
]


def measured_gpu(name: str) -> str:
    """The DATASHEET_BANDWIDTH row of run.json's GPU, as nvidia-smi names it ("NVIDIA H100
    80GB HBM3": H100 SXM; "NVIDIA A100-SXM4-80GB": A100 80GB SXM); fails for a GPU the
    table does not hold, rather than guess its bandwidth."""
    words = set(re.split(r"[\s-]+", name))
    if "H100" in words and "NVL" not in words:  # the NVL's 3.9 TB/s is not in the table
        return "H100 PCIe" if "PCIe" in words else "H100 SXM"
    if "A100" in words:
        return "A100 80GB SXM" if "80GB" in words else "A100 40GB"
    for gpu, _ in DATASHEET_BANDWIDTH:
        if set(gpu.split()) <= words:
            return gpu
    fail(f"{RESULTS}/run.json names GPU '{name}', which has no datasheet bandwidth in "
         "DATASHEET_BANDWIDTH (add it, with its source)")


# The launches of one decode step, as chapters 04 and 05 enqueue them: (count, name,
# plural); "per layer" runs n_layer times.
LAUNCHES = {
    "04": {"before": [(1, "embedding", None)],
           "per layer": [(2, "LayerNorm", "LayerNorms"), (4, "matmul", "matmuls"),
                         (1, "GELU", None), (2, "residual add", "residual adds"),
                         (1, "KV append", None), (1, "attention", None)],
           "after": [(1, "`ln_f`", None), (1, "LM head", None), (2, "argmax", "argmax")]},
    "05": {"before": [(1, "embedding", None), (1, "LayerNorm", None)],
           "per layer": [(4, "matmul", "matmuls"), (1, "fused attention", None),
                         (2, "residual + LayerNorm", "residual + LayerNorm")],
           "after": [(1, "LM head", None), (2, "argmax", "argmax")]},
}


def fail(message: str):
    print(f"render_computed_tables.py: {message}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------- sources

def cpp_int(root: pathlib.Path, relative: str, name: str) -> int:
    match = re.search(r"\bint\s+" + name + r"\s*=\s*(\d+)\s*;", (root / relative).read_text())
    if not match:
        fail(f"{relative}: no 'int {name} = ...;'")
    return int(match.group(1))


def cpp_int_list(root: pathlib.Path, relative: str, name: str) -> list:
    match = re.search(r"\b" + name + r"\s*\{([\d,\s]+)\}", (root / relative).read_text())
    if not match:
        fail(f"{relative}: no '{name}{{...}}'")
    return [int(value) for value in match.group(1).split(",")]


class Sources:
    def __init__(self, root: pathlib.Path):
        self.root = root
        config = "common/config.hpp"
        self.n_layer = cpp_int(root, config, "n_layer")
        self.n_embd = cpp_int(root, config, "n_embd")
        self.vocab = cpp_int(root, config, "vocab_size")
        self.n_positions = cpp_int(root, config, "n_positions")
        self.batch = cpp_int_list(root, "common/cli.hpp", "batch_sizes")[0]
        self.counts = cpp_int_list(root, "common/cli.hpp", "new_token_counts")
        self.prompt = 1  # BOS prompts
        self.bandwidth = self.json("run.json")["copy_bandwidth_bytes_per_s"]
        self.gpu = measured_gpu(self.json("run.json").get("gpu", ""))

    def json(self, name: str) -> dict:
        path = self.root / RESULTS / name
        if not path.is_file():
            fail(f"{RESULTS}/{name}: missing")
        return json.loads(path.read_text())

    def floor(self, name: str, batch: int, new_tokens: int) -> tuple:
        """(floor_s, bytes) of one configuration of a chapter's JSON."""
        report = self.json(name)
        for row in report["configurations"]:
            if row["batch"] == batch and row["new_tokens"] == new_tokens:
                return row["floor_s"], row["floor_s"] * report["copy_bandwidth_bytes_per_s"]
        fail(f"{RESULTS}/{name}: no B = {batch}, N = {new_tokens}")

    def kv_position(self, value_bytes: int = FP32) -> int:
        """Bytes of one cached position: K and V of every layer, every row."""
        return 2 * self.n_layer * self.batch * self.n_embd * value_bytes

    def parameters(self) -> int:
        """common/config.cpp's parameter_count(): embeddings, layers, final LayerNorm."""
        c = self.n_embd
        layernorm = 2 * c
        attention = c * 3 * c + 3 * c + c * c + c
        mlp = c * 4 * c + 4 * c + 4 * c * c + c
        return self.vocab * c + self.n_positions * c + self.n_layer * (
            2 * layernorm + attention + mlp) + layernorm


# ---------------------------------------------------------------- formatting

def spaced(value: int) -> str:
    """5050 as '5 050'."""
    return f"{value:,}".replace(",", " ")


def figure(value: float, whole_from: float) -> str:
    """One decimal below whole_from, a whole number from it."""
    return f"{value:.0f}" if value >= whole_from else f"{value:.1f}"


def amount(value: float, unit: str, scale: float, whole_from: float) -> str:
    return f"{figure(value / scale, whole_from)} {unit}"


def gb(value, whole_from=20):
    return amount(value, "GB", 1e9, whole_from)


def mb(value, whole_from=20):
    return amount(value, "MB", 1e6, whole_from)


def ms(seconds, whole_from=20):
    return amount(seconds, "ms", 1e-3, whole_from)


def measured_ms(seconds: float) -> str:
    """render_results.py's milliseconds(): three figures."""
    value = seconds * 1e3
    if value >= 100:
        return f"{value:.0f} ms"
    return f"{value:.1f} ms" if value >= 10 else f"{value:.2f} ms"


def tb_per_s(bytes_per_second: float) -> str:
    return f"{bytes_per_second * 1e-12:.2f} TB/s"


def datasheet_text(figure_text: str) -> str:
    value = Decimal(figure_text)
    if value.as_tuple().exponent < -2:
        value = value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    return f"{value} TB/s"


def note(sources: str) -> str:
    return f"<!-- generated by {SCRIPT} from {sources}: edit the script, not this block -->"


def table(header: list, rows: list, numeric: bool = False) -> list:
    """A markdown table; numeric: every column but the first right-aligned."""
    separator = "|---|" + ("--:|" if numeric else "---|") * (len(header) - 1)
    return (["| " + " | ".join(header) + " |", separator]
            + ["| " + " | ".join(row) + " |" for row in rows])


def block(sources: str, lines: list) -> str:
    return "\n".join([note(sources), ""] + lines)


# ---------------------------------------------------------------- the blocks

def positions_run(s: Sources) -> str:
    rows = []
    for n in s.counts:
        run = n * s.prompt + n * (n - 1) // 2
        rows.append([str(n), spaced(run), spaced(n), f"{run // n}x"])
    return block("common/cli.hpp's token counts, T0 = 1",
                 table(["N", "positions run per row", "positions needed", "ratio"], rows))


def dynamic_cache_copies(s: Sources) -> str:
    rows = []
    for n in s.counts:
        copied = s.kv_position() * n * (n - 1) // 2
        rows.append([str(n), gb(copied), ms(2 * copied / s.bandwidth)])
    return block(f"common/config.hpp, common/cli.hpp and {RESULTS}/run.json",
                 table(["N", "bytes copied in the run",
                        f"at the committed run's {tb_per_s(s.bandwidth)} (read + write)"], rows))


def static_cache_reads(s: Sources) -> str:
    rows = []
    for n in s.counts:
        per_step = s.kv_position() * (s.prompt + n)
        masked = s.kv_position() * n * (n - 1) // 2
        floor_s, _ = s.floor("04_static_cache.json", s.batch, n)
        rows.append([str(n), mb(per_step), gb(per_step * (n - 1)), gb(masked),
                     ms(masked / s.bandwidth), ms(floor_s)])
    return block(f"common/config.hpp, common/cli.hpp, {RESULTS}/run.json and "
                 f"{RESULTS}/04_static_cache.json",
                 table(["N", "cache read per step", "read over the run", "of which masked",
                        f"masked, at the committed run's {tb_per_s(s.bandwidth)}",
                        "HBM floor of the run"], rows))


def fusion_bytes(s: Sources) -> str:
    c, b, layers = s.n_embd, s.batch, s.n_layer
    gelu = 2 * b * 4 * c * FP32 * layers
    layernorm = b * c * FP32 * 2 * layers
    rows = [
        ["GELU in the epilogue", "`[B, 4C]` read and written again by `gelu`, per layer",
         mb(gelu, 100), str(layers)],
        ["residual add + LayerNorm", "the LayerNorm reads back the sum the residual add just "
         f"wrote: one `[B, C]` read, {2 * layers} times", mb(layernorm, 100), str(2 * layers)],
        ["append + attention", "the KV append is its own launch; chapter 04's attention reads "
         "the masked positions `p + 1 .. capacity - 1` of every layer's cache", "see below",
         str(layers)],
    ]
    return block("common/config.hpp and common/cli.hpp",
                 table(["fusion", "what the unfused version moves in addition, per step",
                        "bytes per step", "launches saved per step"], rows))


def masked_reads(s: Sources) -> str:
    rows = []
    for n in s.counts:
        masked = s.kv_position() * n * (n - 1) // 2
        valid = s.kv_position() * (n - 1) * (n + 2) // 2
        rows.append([str(n), gb(masked, 100), mb(masked / n, 100),
                     ms(masked / s.bandwidth, 100), gb(valid, 100)])
    return block(f"common/config.hpp, common/cli.hpp and {RESULTS}/run.json",
                 table(["N", "masked reads over the run (chapter 04)", "per step, on average",
                        f"at {tb_per_s(s.bandwidth)}, per run",
                        "valid reads over the run (both chapters)"], rows))


def launch_text(s: Sources, chapter: str) -> str:
    def item(count, name, plural):
        return f"{count} {plural or name}" if count > 1 else name

    def total(items):
        return sum(count for count, _, _ in items)

    parts = LAUNCHES[chapter]
    layer = parts["per layer"]
    launches = total(parts["before"]) + s.n_layer * total(layer) + total(parts["after"])
    pieces = ([("1 " + name) if count == 1 else item(count, name, plural)
               for count, name, plural in parts["before"]]
              + [f"{s.n_layer} × {total(layer)} ("
                 + ", ".join(item(*entry) for entry in layer) + ")"]
              + [item(*entry) for entry in parts["after"]])
    return " + ".join(pieces) + f" = **{launches}**"


def launches_per_step(s: Sources) -> str:
    rows = [[chapter, launch_text(s, chapter)] for chapter in LAUNCHES]
    return block(f"common/config.hpp's n_layer and {SCRIPT}'s LAUNCHES",
                 table(["chapter", "launches per decode step"], rows))


def bytes_per_step(s: Sources) -> str:
    weights = s.parameters() - s.n_positions * s.n_embd
    logits = s.batch * s.vocab * FP32

    def per_position(value_bytes):
        return f"{s.kv_position(value_bytes) / 1e6:.2f} MB x (p + 1)"

    rows = [["weights", f"{weights * FP32 / 1e6:.1f} MB", f"{weights * BF16 / 1e6:.1f} MB"],
            [f"KV cache at position p ({s.n_layer} layers, k and v)", per_position(FP32),
             per_position(BF16)],
            ["logits (counted by the floor as fp32)", f"{logits / 1e6:.1f} MB",
             f"{logits / 1e6:.1f} MB"]]
    return block("common/config.hpp and common/cli.hpp",
                 table([f"per step, B = {s.batch}", "fp32 (chapter 09)", "bf16 (this chapter)"],
                       rows, numeric=True))


def other_gpus(s: Sources) -> str:
    n_small, n_large = s.counts[0], s.counts[-1]
    chapter = "06_stream_interleaving"
    columns = [(f"{chapter}.json", s.batch, n_small), (f"{chapter}.json", s.batch, n_large),
               (f"{chapter}.sweep.json", 1, n_small)]
    floor_bytes = [s.floor(name, b, n)[1] for name, b, n in columns]
    reference = dict(DATASHEET_BANDWIDTH)[s.gpu]
    fraction = s.bandwidth / (float(reference) * 1e12)
    rows = []
    for gpu, datasheet in DATASHEET_BANDWIDTH:
        if gpu == s.gpu:
            rows.append([f"{gpu} (measured: `{RESULTS}`)", datasheet_text(datasheet)]
                        + [measured_ms(size / s.bandwidth) for size in floor_bytes])
        else:
            bandwidth = float(datasheet) * 1e12 * fraction
            rows.append([gpu, datasheet_text(datasheet)]
                        + [f"{size / bandwidth * 1e3:.0f} ms (est.)" for size in floor_bytes])
    header = ["GPU", "datasheet bandwidth"] + [f"floor B = {b}, N = {n}" for _, b, n in columns]
    return block(f"{RESULTS}/{chapter}*.json, {RESULTS}/run.json and {SCRIPT}'s "
                 "datasheet bandwidths", table(header, rows, numeric=True))


BLOCKS = [
    ("chapters/01_naive_decode/README.md", "positions-run", positions_run),
    ("chapters/02_kv_cache/README.md", "dynamic-cache-copies", dynamic_cache_copies),
    ("chapters/04_static_cache/README.md", "static-cache-reads", static_cache_reads),
    ("chapters/05_fused_kernels/README.md", "fusion-bytes", fusion_bytes),
    ("chapters/05_fused_kernels/README.md", "masked-reads", masked_reads),
    ("chapters/05_fused_kernels/README.md", "launches-per-step", launches_per_step),
    ("chapters/10_mixed_precision/README.md", "bytes-per-step", bytes_per_step),
    ("docs/workshop.md", "other-gpus", other_gpus),
]


# ---------------------------------------------------------------- writing

def marker_line(marker: str):
    """A marker counts only alone on its line, so prose may name it."""
    return re.compile(r"^[ \t]*" + re.escape(marker) + r"[ \t]*$", re.MULTILINE)


def replace_between(text: str, begin: str, end: str, content: str):
    """The text with the lines between the markers replaced; None when they are missing."""
    start = marker_line(begin).search(text)
    stop = marker_line(end).search(text, start.end()) if start else None
    if not start or not stop:
        return None
    # A blank line before the end marker keeps the block's last paragraph its own.
    return text[:start.end()] + "\n" + content.rstrip("\n") + "\n\n" + text[stop.start():]


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog="render_computed_tables.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=pathlib.Path, default=REPOSITORY,
                        help="the checkout whose pages and sources to use (default: this one)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming every page whose blocks are not current")
    args = parser.parse_args(argv)

    sources = Sources(args.root)
    pages = {}
    for relative, name, render in BLOCKS:
        path = args.root / relative
        text = pages.get(relative, path.read_text() if path.exists() else None)
        if text is None:
            fail(f"{relative}: missing")
        begin, end = f"<!-- computed:{name}:begin -->", f"<!-- computed:{name}:end -->"
        replaced = replace_between(text, begin, end, render(sources))
        if replaced is None:
            fail(f"{relative}: no {begin} ... {end} lines")
        pages[relative] = replaced
    stale = [relative for relative, text in pages.items()
             if (args.root / relative).read_text() != text]
    for relative in stale:
        if args.check:
            print(f"render_computed_tables.py: {relative} is not current: "
                  f"run python3 {SCRIPT}", file=sys.stderr)
        else:
            (args.root / relative).write_text(pages[relative])
            print(f"render_computed_tables.py: wrote {relative}", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
