// common/serving_statistics.hpp - what a serving run is reported by: output tokens/s,
// request latency percentiles, how busy the slots were and how long nothing ran; and the
// arithmetic of what static batching pads on a trace.
//
// Everything here is computed from a ServingResult (common/continuous_batching.hpp) or
// from plain lengths, so it is tested on hand-made inputs. Times are those of the clock
// the run was served with: a SimulatedClock of t ms per step gives the tokens/s the
// schedule would reach if every step took t ms.
#pragma once

#include <vector>

#include "common/continuous_batching.hpp"

namespace ladder {

/// The p-th percentile (0 < p <= 100) by nearest rank: the smallest value v of the sample
/// such that at least p% of the values are <= v. Throws std::invalid_argument for an
/// empty sample or p outside (0, 100].
double percentile(std::vector<double> values, double p);

struct ServingSummary {
  int requests = 0;
  int slots = 0;
  int steps = 0;
  long long output_tokens = 0;  ///< tokens the requests kept (EOS included)
  double elapsed_ms = 0;        ///< end_ms - start_ms
  double output_tokens_per_second = 0;
  double latency_p50_ms = 0;  ///< arrival to last token
  double latency_p99_ms = 0;
  double first_token_p50_ms = 0;  ///< arrival to first token
  double first_token_p99_ms = 0;
  double latency_p50_steps = 0;  ///< RequestRecord::latency_steps()
  double latency_p99_steps = 0;
  long long prefill_rows = 0;
  long long decode_rows = 0;  ///< decode rows whose token a request kept
  long long speculative_rows = 0;
  long long padding_rows = 0;
  /// Rows that produced a kept token, per slot and step: 1 when no slot ever idles.
  double slot_use = 0;
  /// Mean slots holding a request while steps ran, weighted by each step's time. Steps
  /// run one after another in launch order: a step's time runs from when it was planned,
  /// or when the step before it finished if that is later, to when it finished.
  double mean_busy_slots = 0;
  double waiting_ms = 0;     ///< time with no step in flight, waiting for arrivals
  double idle_fraction = 0;  ///< waiting_ms / elapsed_ms
};

/// Throws std::invalid_argument for a result with no requests.
ServingSummary summarize_serving(const ServingResult& result);

/// Slots busy over time, for a plot: the mean number of slots holding a request in each
/// window of `window_ms` from start_ms to end_ms (the last window may be shorter), each
/// step counting over its time as in ServingSummary::mean_busy_slots, waiting as 0.
/// Throws std::invalid_argument unless window_ms > 0.
std::vector<double> busy_slots_over_time(const ServingResult& result, double window_ms);

/// Static batching's padding on a trace, from each request's prompt and output length:
/// batches of `batch` requests in trace order; a batch's prompts are padded to its
/// longest (rows of a batch share one length in chapters 01-10), and it runs as many
/// decode steps as its longest output needs, every row in every step.
struct StaticBatchingWaste {
  int batches = 0;
  long long steps = 0;  ///< sum over batches of the longest output (a token per row a step)
  long long useful_row_steps = 0;  ///< sum of output lengths
  long long padded_row_steps = 0;  ///< rows run after their request finished
  long long prompt_tokens = 0;     ///< sum of prompt lengths
  long long padded_prompt_tokens = 0;

  /// Fraction of the decode rows run that produced a kept token.
  double decode_use() const {
    const long long run = useful_row_steps + padded_row_steps;
    return run > 0 ? static_cast<double>(useful_row_steps) / static_cast<double>(run) : 0;
  }
};

/// Throws std::invalid_argument when the lengths differ in number, a length is < 1 or
/// batch < 1.
StaticBatchingWaste static_batching_waste(const std::vector<int>& prompt_lengths,
                                          const std::vector<int>& output_lengths, int batch);

/// static_batching_waste() of a trace whose every request runs to its limit (no EOS).
StaticBatchingWaste static_batching_waste_at_limits(const std::vector<Request>& trace, int batch);

}  // namespace ladder
