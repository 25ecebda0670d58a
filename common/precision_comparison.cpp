// common/precision_comparison.cpp - token agreement, logit error distribution, margins.
#include "common/precision_comparison.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common/reference.hpp"

namespace ladder {

namespace {

/// Nearest-rank quantile q in [0, 1] of an ascending, non-empty sample.
double quantile(const std::vector<double>& sorted, double q) {
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const std::size_t index = rank < 1.0 ? 0 : static_cast<std::size_t>(rank) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

}  // namespace

double relative_top2_margin(const float* values, int n) {
  if (n < 2) {
    throw std::invalid_argument("relative_top2_margin of " + std::to_string(n) +
                                " values; pass at least two");
  }
  double top1 = -std::numeric_limits<double>::infinity();
  double top2 = top1;
  double largest_magnitude = 0.0;
  for (int i = 0; i < n; ++i) {
    const double value = values[i];
    if (!std::isfinite(value)) return std::numeric_limits<double>::infinity();
    largest_magnitude = std::max(largest_magnitude, std::fabs(value));
    if (value > top1) {
      top2 = top1;
      top1 = value;
    } else if (value > top2) {
      top2 = value;
    }
  }
  const double margin = top1 - top2;
  return largest_magnitude > 0.0 ? margin / largest_magnitude : margin;
}

PrecisionComparison compare_logit_sequences(const float* actual, const float* reference, int steps,
                                            int rows, int vocab_size, double margin_tolerance) {
  if (steps < 0 || rows < 0 || vocab_size < 2 || !(margin_tolerance >= 0.0)) {
    throw std::invalid_argument(
        "compare_logit_sequences: steps " + std::to_string(steps) + ", rows " +
        std::to_string(rows) + ", vocab_size " + std::to_string(vocab_size) +
        ", margin_tolerance " + std::to_string(margin_tolerance) +
        "; pass steps, rows >= 0, vocab_size >= 2 and margin_tolerance >= 0");
  }
  PrecisionComparison comparison;
  comparison.steps = steps;
  comparison.rows = rows;
  comparison.first_divergent_step_of_row.assign(static_cast<std::size_t>(rows), -1);
  const std::size_t V = static_cast<std::size_t>(vocab_size);
  for (int step = 0; step < steps; ++step) {
    for (int row = 0; row < rows; ++row) {
      const std::size_t offset = (static_cast<std::size_t>(step) * rows + row) * V;
      const float* a = actual + offset;
      const float* r = reference + offset;
      comparison.relative_errors.push_back(reference::relative_error(a, r, V));
      const StepRow here{step, row, relative_top2_margin(r, vocab_size)};
      const bool small_margin = here.margin < margin_tolerance;
      if (small_margin) comparison.small_margins.push_back(here);
      if (reference::argmax(a, vocab_size) == reference::argmax(r, vocab_size)) {
        ++comparison.agreeing_tokens;
        continue;
      }
      if (!small_margin) comparison.large_margin_mismatches.push_back(here);
      int& first_of_row = comparison.first_divergent_step_of_row[row];
      if (first_of_row >= 0) continue;
      first_of_row = step;
      if (!small_margin) comparison.unexplained_first_divergences.push_back(here);
      if (comparison.first_divergent_step < 0) comparison.first_divergent_step = step;
    }
  }
  const std::size_t compared = comparison.relative_errors.size();
  if (compared > 0) {
    comparison.token_agreement_rate =
        static_cast<double>(comparison.agreeing_tokens) / static_cast<double>(compared);
    std::vector<double>& errors = comparison.relative_errors;
    std::sort(errors.begin(), errors.end());
    comparison.relative_error = {quantile(errors, 0.5), quantile(errors, 0.9),
                                 quantile(errors, 0.99), errors.back()};
  }
  return comparison;
}

PrecisionComparison compare_logit_sequences(const std::vector<float>& actual,
                                            const std::vector<float>& reference, int steps,
                                            int rows, int vocab_size, double margin_tolerance) {
  const long long expected = static_cast<long long>(steps) * rows * vocab_size;
  if (expected < 0 || actual.size() != static_cast<std::size_t>(expected) ||
      reference.size() != actual.size()) {
    throw std::invalid_argument("compare_logit_sequences: " + std::to_string(actual.size()) +
                                " and " + std::to_string(reference.size()) +
                                " logits for steps x rows x vocab_size = " +
                                std::to_string(expected) + "; pass [steps, rows, V] sequences");
  }
  return compare_logit_sequences(actual.data(), reference.data(), steps, rows, vocab_size,
                                 margin_tolerance);
}

std::string describe(const PrecisionComparison& comparison) {
  std::ostringstream text;
  text << "token agreement " << comparison.token_agreement_rate << " ("
       << comparison.agreeing_tokens << " of " << comparison.relative_errors.size()
       << "), first divergent step ";
  if (comparison.first_divergent_step < 0) {
    text << "none";
  } else {
    text << comparison.first_divergent_step << " (per row:";
    for (int step : comparison.first_divergent_step_of_row) text << ' ' << step;
    text << ")";
  }
  const ErrorDistribution& error = comparison.relative_error;
  text << "; relative logit error median " << error.median << ", p90 " << error.p90 << ", p99 "
       << error.p99 << ", max " << error.max << "; " << comparison.small_margins.size()
       << " (step, row) with a top-2 margin below the tolerance";
  return text.str();
}

}  // namespace ladder
