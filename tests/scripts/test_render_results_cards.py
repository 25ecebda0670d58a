#!/usr/bin/env python3
"""tests/scripts/test_render_results_cards.py - scripts/render_results.py's sentences that
quote a run, on made-up reports: the README's headline (each precision's fastest rung and
its last against the fastest PyTorch row, as faster or slower), the line naming variants a
time limit cut, and the workshop cards' *Compare* sentences.

    python3 tests/scripts/test_render_results_cards.py
"""

import os
import pathlib
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import render_results as rr  # noqa: E402


def report(chapter, title, precision, ms_by_size, complete=True, **fields):
    """A report whose rows at (B, N) take the given ms a step; the floor is 0.1 ms a step."""
    made = rr.Report(chapter=chapter, title=title, precision=precision, device="stand-in",
                     copy_bandwidth=1e12, framework={}, complete=complete)
    for (batch, new_tokens), ms in ms_by_size.items():
        row = {"batch": batch, "new_tokens": new_tokens, "steps": new_tokens,
               "median_s": ms * new_tokens / 1e3, "ms_per_step": ms,
               "floor_s": 0.1 * new_tokens / 1e3, "tokens_per_s": batch * 1e3 / ms,
               "peak_allocated_bytes": 1 << 20, "peak_reserved_bytes": 2 << 20,
               "fragmentation": 0.5}
        row.update(fields)
        made.rows[(batch, new_tokens)] = row
    return made


def expect(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def main():
    sizes = [(1, 100), (8, 100), (32, 100), (64, 100)]
    ten = report("10_mixed_precision", "mixed precision", "bf16",
                 {size: 0.4 for size in sizes})
    eleven = report("11_persistent_kernel", "one persistent kernel", "bf16",
                    {size: 0.8 for size in sizes}, kernels_per_step=0.9)
    nine = report("09_decode_matmuls", "decode matmuls", "fp32", {size: 0.6 for size in sizes})
    eight = report("08_device_loop", "the loop on the GPU", "fp32",
                   {size: 0.9 for size in sizes}, kernels_per_step=139.1)
    nine.rows[(8, 100)]["kernels_per_step"] = 89.1
    anchor = report("pytorch_static_step_compiled", "PyTorch: hand-written step", "bf16",
                    {(32, 100): 0.5}, complete=False)
    ladder = [eight, nine, ten, eleven]
    layout = rr.Layout(batch=32, new_tokens=100)

    # The headline: bf16's fastest rung (10) and its last (11), faster and slower.
    lines = rr.headline(ladder, [anchor], layout)
    bf16 = [line for line in lines if "bf16" in line]
    expect(len(bf16) == 2, f"two bf16 sentences, fastest and last: {lines}")
    expect(bf16[0].startswith("10 mixed precision") and "1.25x faster" in bf16[0], bf16[0])
    expect(bf16[1].startswith("11 one persistent kernel") and "1.60x slower" in bf16[1], bf16[1])
    fp32 = [line for line in lines if "fp32" in line]
    expect(len(fp32) == 1 and "no PyTorch row" in fp32[0], f"fp32's one rung: {fp32}")

    # The README block names the variant a time limit cut.
    block = rr.readme_block({}, ladder, [anchor], layout, "results/latest", {})
    expect("Stopped by the job's time limit" in block and "hand-written step (bf16, 1 "
           "configurations)" in block, block)

    # The workshop cards: ratios to the rung before, from the run.
    with tempfile.TemporaryDirectory() as directory:
        figures = rr.CardFigures(ladder, pathlib.Path(directory))
        text = rr.card_compare("11", figures)
        expect(text.startswith("0.50, 0.50, 0.50 and 0.50 times chapter 10 at B = 1, 8, 32 "
                               "and 64 (below 1: slower)"), text)
        expect(text.endswith("chapter 10's tokens hash at every batch."), text)
        eleven.rows[(8, 100)]["token_hash"] = "different"
        text = rr.card_compare("11", figures)
        expect("**tokens unlike chapter 10's** at B = 8" in text, text)
        text = rr.card_compare("09", figures)
        expect("1.50, 1.50, 1.50 and 1.50 times chapter 08" in text
               and "`kernels/step` 139 -> 89 at B = 8" in text, text)
        text = rr.card_compare("10", figures)
        expect("its `× floor` (4.0 at B = 1)" in text, text)
        # Chapter 00's card reads the committed CPU run; without it the script says so.
        code = None
        try:
            rr.card_compare("00", figures)
        except SystemExit as stop:
            code = stop.code
        expect(code not in (None, 0), "chapter 00's card without its CPU file did not fail")
    print("test_render_results_cards.py: ok")


if __name__ == "__main__":
    main()
