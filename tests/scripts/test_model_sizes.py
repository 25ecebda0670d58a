#!/usr/bin/env python3
"""tests/scripts/test_model_sizes.py - GPT-2's four sizes in the scripts: the shapes of
scripts/pytorch_baseline.py --model and scripts/render_results.py's parameter counts are
common/config.cpp's (Gpt2Config::named), and render_results.py's size section (the table
between the model-sizes markers of docs/results.md and its plot) shows every rung and
anchor at every size, "not measured" where the run has no row and "failed" where it failed,
and says so in one line before any larger size was run.

    python3 tests/scripts/test_model_sizes.py

Runs on any machine: the results are copies of results/latest's files, made here."""
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from script_checks import SCRIPTS, expect

sys.path.insert(0, str(SCRIPTS))
import pytorch_baseline as baseline  # noqa: E402  (after the path)
import render_results as render  # noqa: E402

REPOSITORY = SCRIPTS.parent
LATEST = REPOSITORY / "results" / "latest"

# ---- the shapes, one table in C++ and two in Python
config_source = (REPOSITORY / "common" / "config.cpp").read_text()
shapes = {name: (int(layers), int(heads), int(width)) for name, layers, heads, width in
          re.findall(r'\{"(\w+)", (\d+), (\d+), (\d+)\}', config_source)}
expect(shapes == baseline.MODEL_SHAPES,
       f"pytorch_baseline.py's MODEL_SHAPES {baseline.MODEL_SHAPES} are not config.cpp's {shapes}")
expect(list(shapes) == list(render.MODEL_PARAMETERS), "render_results.py names other sizes")


def parameters(n_layer, n_embd, vocab=50257, positions=1024):
    """common/config.cpp parameter_count."""
    c = n_embd
    block = 4 * c + (c * 3 * c + 3 * c + c * c + c) + (c * 4 * c + 4 * c + 4 * c * c + c)
    return vocab * c + positions * c + n_layer * block + 2 * c


for name, (layers, _, width) in shapes.items():
    expect(render.MODEL_PARAMETERS[name] == parameters(layers, width),
           f"{name}: render_results.py says {render.MODEL_PARAMETERS[name]} parameters")

# ---- pytorch_baseline.py --model
expect(baseline.parse_arguments([]).model == "small", "--model's default is not small")
expect(baseline.parse_arguments(["--model", "xl"]).model == "xl", "--model xl not taken")
refused = subprocess.run([sys.executable, str(SCRIPTS / "pytorch_baseline.py"), "--model", "huge"],
                         capture_output=True, text=True)
expect(refused.returncode == 2 and "--model" in refused.stderr,
       f"--model huge: exit {refused.returncode}, {refused.stderr!r}")


class Config:  # what floor_bytes reads of transformers' GPT2Config
    def __init__(self, n_layer, n_embd):
        self.n_layer, self.n_embd, self.vocab_size, self.n_positions = n_layer, n_embd, 50257, 1024


# One step at B = 1 over one position: the weights but the position table, K and V, logits.
for name, (layers, _, width) in shapes.items():
    expected = (parameters(layers, width) - 1024 * width + 2 * layers * width) * 4 + 50257 * 4
    expect(abs(baseline.floor_bytes(Config(layers, width), 1, 1, 1) - expected) < 1,
           f"{name}: pytorch_baseline.py's floor_bytes is not the chapters'")


# ---- render_results.py's size section
def copy_report(source: Path, target: Path, model: str, chapter=None, title=None, failed=()):
    """A copy of a committed results file as a run at `model` would write it; configurations
    at the batches in `failed` moved to failed_configurations."""
    document = json.loads(source.read_text())
    document["weights"] = f"random GPT-2 {model} (seed 0)"
    if chapter:
        document["chapter"], document["title"] = chapter, title
    kept = [c for c in document["configurations"] if c["batch"] not in failed]
    document["failed_configurations"] = [
        {"batch": c["batch"], "new_tokens": c["new_tokens"], "error": "RuntimeError: made up"}
        for c in document["configurations"] if c["batch"] in failed]
    document["configurations"] = kept
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document))


def size_block(page: Path) -> str:
    text = page.read_text()
    return text[text.index(render.SIZES_BEGIN):text.index(render.SIZES_END)]


def render_into(results: Path, root: Path, *flags):
    return subprocess.run([sys.executable, str(SCRIPTS / "render_results.py"), str(results),
                           "--root", str(root), *flags], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as scratch:
    scratch = Path(scratch)
    root, results = scratch / "tree", scratch / "tree" / "results" / "latest"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text(f"{render.RESULTS_BEGIN}\n{render.RESULTS_END}\n")
    (root / "docs" / "results.md").write_text(
        f"# Results\n\n{render.SIZES_BEGIN}\n{render.SIZES_END}\n\n"
        f"{render.RESULTS_BEGIN}\n{render.RESULTS_END}\n")
    results.mkdir(parents=True)
    for name in ("run.json", "07_cuda_graphs.json", "07_cuda_graphs.sweep.json",
                 "10_mixed_precision.json", "10_mixed_precision.sweep.json"):
        shutil.copy(LATEST / name, results / name)

    # Before any larger size: one line says so, small's rows are there, no plot.
    result = render_into(results, root)
    expect(result.returncode == 0, f"render_results.py failed: {result.stderr}")
    block = size_block(root / "docs" / "results.md")
    expect("holds no run of GPT-2 medium, large or xl yet" in block, f"no 'not measured' line:\n{block}")
    expect(re.search(r"\| 07 CUDA graphs \| fp32 \| [0-9.]+× \([0-9.]+ ms\) \| not measured \| "
                     r"not measured \| not measured \|", block), f"07's row:\n{block}")
    expect("| 10 mixed precision | bf16 |" in block, f"no bf16 row:\n{block}")
    expect(not (root / "docs" / "images" / render.SIZES_PLOT).exists(), "a plot of small alone")

    # medium for both chapters, xl for 10 and an anchor whose B = 32 failed; large not run.
    for model in ("medium", "xl"):
        for name in ("07_cuda_graphs", "10_mixed_precision"):
            if model == "xl" and name == "07_cuda_graphs":
                continue
            for suffix in (".json", ".sweep.json"):
                copy_report(LATEST / (name + suffix), results / "sizes" / model / (name + suffix),
                            model)
    copy_report(LATEST / "pytorch_static_compile.bf16.json",
                results / "sizes" / "xl" / "pytorch_static_step_compiled.bf16.json", "xl",
                chapter="pytorch_static_step_compiled",
                title="PyTorch: hand-written static step, torch.compile reduce-overhead",
                failed=(32,))
    result = render_into(results, root)
    expect(result.returncode == 0, f"render_results.py failed: {result.stderr}")
    block = size_block(root / "docs" / "results.md")
    expect("holds no run" not in block, f"still says nothing was run:\n{block}")
    b1, b32 = block.split("**B = 32**")
    row_07 = [line for line in b32.splitlines() if line.startswith("| 07 CUDA graphs | fp32 |")]
    expect(len(row_07) == 1, f"07 at B = 32:\n{b32}")
    cells = [cell.strip() for cell in row_07[0].strip("|").split("|")]
    expect(cells[2].endswith("ms)") and cells[3].endswith("ms)") and cells[4] == "not measured"
           and cells[5] == "not measured", f"07's cells at B = 32: {cells}")
    anchor = [line for line in b32.splitlines()
              if line.startswith("| PyTorch: hand-written step, compiled | bf16 |")]
    expect(len(anchor) == 1 and anchor[0].rstrip().endswith("| failed |"),
           f"the failed anchor at B = 32:\n{b32}")
    expect(any(line.startswith("| HBM floor | bf16 |") for line in b1.splitlines()),
           f"no bf16 floor row at B = 1:\n{b1}")
    if importlib.util.find_spec("matplotlib"):
        expect((root / "docs" / "images" / render.SIZES_PLOT).exists(), "no size plot")
        expect(f"images/{render.SIZES_PLOT}" in block, "the plot is not in the block")
    check = render_into(results, root, "--check")
    expect(check.returncode == 0, f"--check right after a render: {check.stderr}")

    # A stale block is caught; removing the sizes takes the plot away.
    shutil.rmtree(results / "sizes")
    check = render_into(results, root, "--check")
    expect(check.returncode == 1 and "results.md is not current" in check.stderr,
           f"--check with the sizes gone: exit {check.returncode}, {check.stderr!r}")
    render_into(results, root)
    expect(not (root / "docs" / "images" / render.SIZES_PLOT).exists(), "a stale size plot survived")
    expect("holds no run of GPT-2 medium" in size_block(root / "docs" / "results.md"),
           "no 'not measured' line once the sizes are gone")

print("test_model_sizes.py: the sizes' shapes agree; the size section renders and checks")
