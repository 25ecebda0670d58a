// common/precision_comparison.hpp - how far two runs of the model are apart: tokens,
// logits and the steps where greedy decoding is fragile.
//
// A bf16 run cannot equal an fp32 run bit for bit, so the chapters and tests that compare
// precisions report instead: how often the greedy tokens agree and where they first
// part, the distribution of the logits' relative error, and the steps whose reference
// logits have a top-2 margin so small that any rounding may swap the winner.
//
// Both inputs are logit sequences [steps, rows, V] (the layout of
// reference::Generation::logits); a step's token is the argmax of its logits, with
// reference::argmax's tie rule. The relative error of a (step, row) is
// reference::relative_error: max |a - ref| / max |ref| over V.
//
// The top-2 margin is made relative the same way: (top1 - top2) / max |ref|. An error of
// e in those units moves each logit by at most e * max |ref|, so it can swap the top two
// only when the relative margin is below 2e: pass margin_tolerance = 2 * the logits'
// tolerance to flag every step where a tolerated error could change the token.
//
// Teacher-forced sequences (both runs fed the same tokens) are compared step by step. In
// free-running generation a row's inputs differ after its first divergent step, so only
// that step says something about rounding, and the logit errors after it measure two
// different continuations: read the error distribution from teacher-forced runs.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ladder {

/// (top1 - top2) / max |value| of n >= 2 values; the plain difference when all are 0; +inf
/// when any value is NaN or infinite. Throws std::invalid_argument when n < 2.
double relative_top2_margin(const float* values, int n);

/// One (step, row) of a logit sequence.
struct StepRow {
  int step = 0;
  int row = 0;
  double margin = 0.0;  ///< the reference's relative top-2 margin there
};

/// Summary of a sorted sample: nearest-rank quantiles.
struct ErrorDistribution {
  double median = 0.0;
  double p90 = 0.0;
  double p99 = 0.0;
  double max = 0.0;
};

struct PrecisionComparison {
  int steps = 0;
  int rows = 0;
  std::size_t agreeing_tokens = 0;    ///< (step, row) pairs with the same argmax
  double token_agreement_rate = 1.0;  ///< agreeing_tokens / (steps * rows); 1 when empty
  int first_divergent_step = -1;      ///< first step at which any row differs; -1 if none
  std::vector<int> first_divergent_step_of_row;  ///< per row; -1 where the row never differs

  std::vector<double> relative_errors;  ///< per (step, row), sorted ascending
  ErrorDistribution relative_error;     ///< of relative_errors

  /// Every (step, row) whose reference margin is below margin_tolerance, in step order.
  std::vector<StepRow> small_margins;
  /// Token mismatches where the reference margin is at least margin_tolerance: a bug, not
  /// rounding, when both runs saw the same inputs (teacher-forced).
  std::vector<StepRow> large_margin_mismatches;
  /// Rows whose first divergent step has a margin of at least margin_tolerance: the test
  /// for free-running generation, where inputs differ after the first divergence.
  std::vector<StepRow> unexplained_first_divergences;
};

/// Compares `actual` against `reference`, both [steps, rows, vocab_size].
/// Throws std::invalid_argument for steps or rows < 0, vocab_size < 2, or
/// margin_tolerance < 0.
PrecisionComparison compare_logit_sequences(const float* actual, const float* reference, int steps,
                                            int rows, int vocab_size, double margin_tolerance);

/// Convenience for vectors; also throws when a size is not steps * rows * vocab_size.
PrecisionComparison compare_logit_sequences(const std::vector<float>& actual,
                                            const std::vector<float>& reference, int steps,
                                            int rows, int vocab_size, double margin_tolerance);

/// One paragraph for a report: agreement, first divergence (overall and per row), the
/// error quantiles and the number of small-margin (step, row) pairs.
std::string describe(const PrecisionComparison& comparison);

}  // namespace ladder
