#!/usr/bin/env python3
"""tests/scripts/test_pytorch_baseline_anchors.py - the compiled anchors of
scripts/pytorch_baseline.py, the parts that need no torch: which sizes they run (the
batch sweep added), their own processes, their titles (the name render_results.py shows)
and the check of their tokens against Hugging Face generate()'s.

    python3 tests/scripts/test_pytorch_baseline_anchors.py
"""
import sys

from script_checks import SCRIPTS, expect

sys.path.insert(0, str(SCRIPTS))
import pytorch_baseline as baseline  # noqa: E402  (after the path)

EOS = 9
anchors = [baseline.VARIANTS_BY_KEY[key] for key in baseline.ANCHORS]
static = baseline.VARIANTS_BY_KEY["static"]

# Sizes: the main batch at every N; an anchor adds the sweep's batches at the smallest N.
expect(baseline.sizes_of(static, [32], [100, 200, 400], [1, 8, 64])
       == [(32, 100), (32, 200), (32, 400)], "a non-anchor variant ran the batch sweep")
expect(baseline.sizes_of(anchors[0], [32], [100, 200, 400], [1, 8, 64])
       == [(32, 100), (32, 200), (32, 400), (1, 100), (8, 100), (64, 100)],
       "an anchor's sizes are not B = 32 at N = 100, 200, 400 and B = 1, 8, 64 at N = 100")
expect(baseline.sizes_of(anchors[1], [1, 8, 64], [100], [1, 8, 64])
       == [(1, 100), (8, 100), (64, 100)], "a size asked twice ran twice")
expect(baseline.sizes_of(anchors[1], [32], [8], []) == [(32, 8)], "--sweep-batch none still swept")

# Each anchor runs in a process of its own; the others keep theirs.
groups = baseline.process_groups(["naive", "static", "expandable"] + list(baseline.ANCHORS))
expect(groups == [("", ["naive", "static"]),
                  (baseline.EXPANDABLE_SEGMENTS, ["expandable"]),
                  ("", ["hf_static_compiled"]), ("", ["static_step_compiled"])],
       f"process groups: {groups}")

# The names the tables show: a "pytorch_" chapter, the compile mode in the title.
for variant in anchors:
    expect(variant.chapter.startswith("pytorch_"), f"{variant.chapter}: not a PyTorch row")
    for mode in baseline.ANCHOR_COMPILE_MODES:
        title = variant.full_title(mode)
        expect(title.startswith("PyTorch: ") and mode in title and "{" not in title,
               f"{variant.key}: title '{title}' does not name mode {mode}")
expect(len({variant.full_title("reduce-overhead") for variant in baseline.VARIANTS})
       == len(baseline.VARIANTS), "two variants share a title")
expect(static.full_title("max-autotune") == static.title, "a title without a mode changed")

# Arguments: the anchors' mode and the sweep, forwarded to the workers.
args = baseline.parse_arguments(["--variants", "static_step_compiled", "--sweep-batch", "none",
                                 "--anchor-compile-mode", "max-autotune"])
expect(args.sweep_batch == [] and args.anchor_compile_mode == "max-autotune",
       "--sweep-batch none / --anchor-compile-mode were not read")
expect(baseline.parse_arguments([]).sweep_batch == [1, 8, 64], "the default sweep is not 1,8,64")

# Token checks. Equal, with a row that finished (EOS, then generate()'s padding).
mine = [[3, 4, EOS, 5], [3, 4, 6, EOS]]
theirs = [[3, 4, EOS, EOS], [3, 4, 6, EOS]]
check = baseline.compare_tokens(mine, theirs, EOS)
expect(check["equal"] and check["agreement"] == 1.0 and check["first_divergent_step"] is None
       and check["compared_tokens"] == 7, f"equal tokens: {check}")
expect("equal" in baseline.token_check_line(check), "the line of an equal check")
# A divergence: the earliest step over the rows, the rate over the compared tokens.
check = baseline.compare_tokens([[3, 4, 5, 6], [3, 7, 5, 6]], [[3, 4, 5, 1], [3, 4, 5, 6]], EOS)
expect(not check["equal"] and check["first_divergent_step"] == 1
       and check["agreeing_tokens"] == 6 and check["compared_tokens"] == 8,
       f"a divergence at step 1: {check}")
check["reference_margin_at_divergence"] = 0.25
line = baseline.token_check_line(check)
expect("first divergent step 1" in line and "75.0%" in line and "0.25" in line,
       f"the line of a divergence: {line}")
# The same tokens, but one stops later: not equal, divergent where the shorter ended.
check = baseline.compare_tokens([[3, 4, 5]], [[3, 4]], EOS)
expect(not check["equal"] and check["first_divergent_step"] == 2, f"a longer run: {check}")
# A failed fp32 check keeps the check and the timed row for the JSON.
failure = baseline.TokenCheckFailed(check, {"batch": 1})
expect(failure.check is check and failure.row == {"batch": 1} and "differ" in str(failure),
       "TokenCheckFailed does not carry its check")

print("pytorch_baseline.py anchors: sizes, processes, titles and token checks as expected")
