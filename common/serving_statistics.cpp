// common/serving_statistics.cpp - summaries of serving runs and static batching's padding.
#include "common/serving_statistics.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace ladder {

namespace {

/// When step k started running: when it was planned, or when the step before it finished
/// if that is later (steps run one after another, in launch order).
double step_start_ms(const std::vector<StepRecord>& steps, std::size_t k) {
  return k == 0 ? steps[0].planned_ms : std::max(steps[k].planned_ms, steps[k - 1].finished_ms);
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty()) throw std::invalid_argument("percentile of an empty sample");
  if (!(p > 0 && p <= 100)) {
    throw std::invalid_argument("percentile " + std::to_string(p) + "; give p in (0, 100]");
  }
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const auto index = static_cast<std::size_t>(std::max(rank, 1.0)) - 1;
  return values[std::min(index, values.size() - 1)];
}

ServingSummary summarize_serving(const ServingResult& result) {
  if (result.requests.empty()) throw std::invalid_argument("summarize_serving: no requests");
  ServingSummary summary;
  summary.requests = static_cast<int>(result.requests.size());
  summary.slots = result.slots;
  summary.steps = static_cast<int>(result.steps.size());
  summary.elapsed_ms = result.end_ms - result.start_ms;
  summary.waiting_ms = result.waiting_ms;

  std::vector<double> latency_ms, first_token_ms, latency_steps;
  for (const RequestRecord& record : result.requests) {
    summary.output_tokens += static_cast<long long>(record.tokens.size());
    latency_ms.push_back(record.latency_ms());
    first_token_ms.push_back(record.first_token_ms - record.arrival_ms);
    latency_steps.push_back(record.latency_steps());
  }
  summary.latency_p50_ms = percentile(latency_ms, 50);
  summary.latency_p99_ms = percentile(latency_ms, 99);
  summary.first_token_p50_ms = percentile(first_token_ms, 50);
  summary.first_token_p99_ms = percentile(first_token_ms, 99);
  summary.latency_p50_steps = percentile(latency_steps, 50);
  summary.latency_p99_steps = percentile(latency_steps, 99);

  double busy_slot_ms = 0;
  for (std::size_t k = 0; k < result.steps.size(); ++k) {
    const StepRecord& step = result.steps[k];
    summary.prefill_rows += step.prefills;
    summary.decode_rows += step.decodes;
    summary.speculative_rows += step.speculative;
    summary.padding_rows += step.padding;
    busy_slot_ms += step.busy_slots * (step.finished_ms - step_start_ms(result.steps, k));
  }
  if (summary.elapsed_ms > 0) {
    summary.output_tokens_per_second =
        static_cast<double>(summary.output_tokens) / (summary.elapsed_ms * 1e-3);
    summary.idle_fraction = summary.waiting_ms / summary.elapsed_ms;
  }
  if (summary.steps > 0 && summary.slots > 0) {
    summary.slot_use = static_cast<double>(summary.prefill_rows + summary.decode_rows) /
                       (static_cast<double>(summary.steps) * summary.slots);
  }
  const double stepping_ms = summary.elapsed_ms - summary.waiting_ms;
  if (stepping_ms > 0) summary.mean_busy_slots = busy_slot_ms / stepping_ms;
  return summary;
}

std::vector<double> busy_slots_over_time(const ServingResult& result, double window_ms) {
  if (!(window_ms > 0)) {
    throw std::invalid_argument("busy_slots_over_time: the window must be > 0 ms");
  }
  const double elapsed_ms = result.end_ms - result.start_ms;
  const auto windows = static_cast<std::size_t>(std::max(0.0, std::ceil(elapsed_ms / window_ms)));
  std::vector<double> busy_slot_ms(windows, 0.0);
  for (std::size_t k = 0; k < result.steps.size(); ++k) {
    const double start = step_start_ms(result.steps, k) - result.start_ms;
    const double finish = result.steps[k].finished_ms - result.start_ms;
    for (auto w = static_cast<std::size_t>(std::max(0.0, start / window_ms));
         w < windows && static_cast<double>(w) * window_ms < finish; ++w) {
      const double overlap = std::min(finish, static_cast<double>(w + 1) * window_ms) -
                             std::max(start, static_cast<double>(w) * window_ms);
      if (overlap > 0) busy_slot_ms[w] += result.steps[k].busy_slots * overlap;
    }
  }
  for (std::size_t w = 0; w < windows; ++w) {
    const double length = std::min(elapsed_ms, static_cast<double>(w + 1) * window_ms) -
                          static_cast<double>(w) * window_ms;
    busy_slot_ms[w] /= length;
  }
  return busy_slot_ms;
}

StaticBatchingWaste static_batching_waste(const std::vector<int>& prompt_lengths,
                                          const std::vector<int>& output_lengths, int batch) {
  if (batch < 1) throw std::invalid_argument("static_batching_waste: batch must be >= 1");
  if (prompt_lengths.size() != output_lengths.size()) {
    throw std::invalid_argument("static_batching_waste: " + std::to_string(prompt_lengths.size()) +
                                " prompt lengths but " + std::to_string(output_lengths.size()) +
                                " output lengths");
  }
  StaticBatchingWaste waste;
  for (std::size_t first = 0; first < prompt_lengths.size(); first += batch) {
    const std::size_t end = std::min(prompt_lengths.size(), first + batch);
    int longest_prompt = 0, longest_output = 0;
    for (std::size_t i = first; i < end; ++i) {
      if (prompt_lengths[i] < 1 || output_lengths[i] < 1) {
        throw std::invalid_argument("static_batching_waste: request " + std::to_string(i) +
                                    " has a length below 1");
      }
      longest_prompt = std::max(longest_prompt, prompt_lengths[i]);
      longest_output = std::max(longest_output, output_lengths[i]);
    }
    const auto rows = static_cast<long long>(end - first);
    ++waste.batches;
    waste.steps += longest_output;
    for (std::size_t i = first; i < end; ++i) {
      waste.useful_row_steps += output_lengths[i];
      waste.prompt_tokens += prompt_lengths[i];
    }
    waste.padded_row_steps += rows * longest_output;
    waste.padded_prompt_tokens += rows * longest_prompt;
  }
  waste.padded_row_steps -= waste.useful_row_steps;
  waste.padded_prompt_tokens -= waste.prompt_tokens;
  return waste;
}

StaticBatchingWaste static_batching_waste_at_limits(const std::vector<Request>& trace, int batch) {
  std::vector<int> prompt_lengths, output_lengths;
  for (const Request& request : trace) {
    prompt_lengths.push_back(static_cast<int>(request.prompt.size()));
    output_lengths.push_back(request.max_new_tokens);
  }
  return static_batching_waste(prompt_lengths, output_lengths, batch);
}

}  // namespace ladder
