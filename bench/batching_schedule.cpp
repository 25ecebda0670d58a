// bench/batching_schedule.cpp - what static batching wastes on the continuous-batching
// trace, counted by the scheduler itself, with no model and no GPU.
//
// Generates the chapter's request trace (common/request_trace.hpp: by default 512
// requests, prompts of 4 to 64 tokens, limits of 16 to 256, all at time 0), lets every
// request run to its limit (as when EOS never comes), and serves it with the scheduler of
// common/continuous_batching.hpp on a back-end that computes nothing: once in static
// batches (as chapters 01-10 would, each batch waiting for its longest request) and once
// with continuous batching. It prints the padding arithmetic, the steps each policy
// needs, how many of the rows they run produce a kept token, and the latencies in steps.
// If a step costs the same whatever its rows (a decode step of 32 rows is bound by reading
// the weights), the ratio of steps is the ratio of output tokens/s: a prediction, which
// the chapter measures.
//
// Run:  build/current/bench/batching_schedule [--requests N] [--slots S] [--seed X]
//                                            [--rate R] [--timeline] [--write-trace FILE]
//   --rate R     Poisson arrivals, R requests per second, one step = 1 ms of the clock
//   --timeline   also draw which request each slot holds, step by step, for the first
//                12 requests of a short trace on 4 slots
//   --write-trace FILE  also write the trace (common/request_trace.hpp's format): with the
//                defaults, the very trace chapter 12 serves on GPT-2 (its vocabulary and
//                EOS are the generator's defaults), for scripts/check_serving_trace.py
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "common/cli.hpp"
#include "common/continuous_batching.hpp"
#include "common/request_trace.hpp"
#include "common/serving_statistics.hpp"

namespace {

/// Runs nothing: every token is 0 (not EOS), and the plans are kept for the timeline.
class NoModelBackend : public ladder::ServingBackend {
 public:
  NoModelBackend(int slots, int capacity) : slots_(slots), capacity_(capacity) {}
  int slot_count() const override { return slots_; }
  int slot_capacity() const override { return capacity_; }
  void launch_step(const ladder::StepPlan& plan) override {
    plans.push_back(plan);
    unfinished_.push_back(plan.rows());
  }
  std::vector<std::int32_t> finish_step() override {
    const std::size_t rows = unfinished_.front();
    unfinished_.pop_front();
    return std::vector<std::int32_t>(rows, 0);
  }

  std::vector<ladder::StepPlan> plans;

 private:
  int slots_;
  int capacity_;
  std::deque<std::size_t> unfinished_;  ///< rows of each launched, unfinished step
};

struct Options {
  ladder::TraceOptions trace;
  int slots = 32;
  bool timeline = false;
  std::string trace_file;  ///< --write-trace: where to write the generated trace
};

Options parse_options(int argc, char** argv) {
  Options options;
  const auto number = [&](int& i, double low, double high, bool whole) {
    return ladder::number_after_flag(argc, argv, i, low, high, whole);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--requests") {
      options.trace.requests = static_cast<int>(number(i, 1, 1e6, true));
    } else if (flag == "--slots") {
      options.slots = static_cast<int>(number(i, 1, 4096, true));
    } else if (flag == "--seed") {
      options.trace.seed = static_cast<std::uint64_t>(number(i, 0, 1e15, true));
    } else if (flag == "--rate") {
      options.trace.arrivals_per_second = number(i, 0, 1e9, false);
    } else if (flag == "--timeline") {
      options.timeline = true;
    } else if (flag == "--write-trace") {
      if (i + 1 >= argc) throw std::invalid_argument("--write-trace needs a file name");
      options.trace_file = argv[++i];
    } else {
      throw std::invalid_argument(
          "unknown flag '" + flag +
          "'; usage: batching_schedule [--requests N] [--slots S] [--seed X] [--rate R] "
          "[--timeline] [--write-trace FILE]");
    }
  }
  return options;
}

ladder::ServingResult serve(const std::vector<ladder::Request>& trace,
                            ladder::BatchingPolicy policy, NoModelBackend& backend) {
  ladder::SimulatedClock clock(1.0);  // one step = 1 ms
  return ladder::serve_requests(trace, backend, {policy, -1, 1}, clock);
}

void print_policy(const char* name, const ladder::ServingResult& result) {
  const ladder::ServingSummary summary = ladder::summarize_serving(result);
  std::printf(
      "%-22s %7d steps  %9lld rows run  %5.1f%% of slot-steps kept a token  "
      "latency p50 %5.0f  p99 %5.0f steps  idle %4.1f%%\n",
      name, summary.steps,
      summary.prefill_rows + summary.decode_rows + summary.padding_rows + summary.speculative_rows,
      100.0 * summary.slot_use, summary.latency_p50_steps, summary.latency_p99_steps,
      100.0 * summary.idle_fraction);
}

/// One line per slot, one column per step: the request's letter (capital at its prefill),
/// '.' for a padding row, ' ' for an idle slot.
void print_timeline(const char* name, const ladder::ServingResult& result,
                    const NoModelBackend& backend) {
  std::printf("\n%s:\n", name);
  const std::size_t steps = backend.plans.size();
  std::vector<std::string> rows(static_cast<std::size_t>(result.slots), std::string(steps, ' '));
  for (std::size_t step = 0; step < steps; ++step) {
    for (const ladder::DecodeRow& row : backend.plans[step].decodes) rows[row.slot][step] = '.';
  }
  for (std::size_t r = 0; r < result.requests.size(); ++r) {
    const ladder::RequestRecord& record = result.requests[r];
    const char letter = static_cast<char>('a' + r % 26);
    for (int step = record.admitted_step; step <= record.finish_step; ++step) {
      rows[record.slot][step] =
          step == record.admitted_step ? static_cast<char>(letter - 32) : letter;
    }
  }
  for (std::size_t slot = 0; slot < rows.size(); ++slot) {
    std::printf("  slot %zu |%s|\n", slot, rows[slot].c_str());
  }
}

int run(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  const std::vector<ladder::Request> trace = ladder::generate_trace(options.trace);
  if (!options.trace_file.empty()) {
    ladder::write_trace(options.trace_file, trace);
    std::printf("wrote the trace's %zu requests to %s\n", trace.size(), options.trace_file.c_str());
  }
  const int capacity = 1024;  // GPT-2's context
  const ladder::StaticBatchingWaste waste =
      ladder::static_batching_waste_at_limits(trace, options.slots);

  std::printf(
      "trace: %d requests (seed %llu), prompts %d-%d tokens, limits %d-%d, %s; %d slots; "
      "every request runs to its limit\n",
      options.trace.requests, static_cast<unsigned long long>(options.trace.seed),
      options.trace.min_prompt_length, options.trace.max_prompt_length,
      options.trace.min_new_tokens, options.trace.max_new_tokens,
      options.trace.arrivals_per_second > 0 ? "Poisson arrivals" : "all at time 0", options.slots);
  std::printf(
      "static batches of %d, counted: %d batches, %lld steps, %lld decode rows run of "
      "which %lld keep a token (%.1f%%), %lld padded prompt tokens on %lld real ones\n",
      options.slots, waste.batches, waste.steps, waste.useful_row_steps + waste.padded_row_steps,
      waste.useful_row_steps, 100.0 * waste.decode_use(), waste.padded_prompt_tokens,
      waste.prompt_tokens);

  NoModelBackend static_backend(options.slots, capacity);
  NoModelBackend continuous_backend(options.slots, capacity);
  const ladder::ServingResult static_result =
      serve(trace, ladder::BatchingPolicy::static_batches, static_backend);
  const ladder::ServingResult continuous_result =
      serve(trace, ladder::BatchingPolicy::continuous, continuous_backend);
  print_policy("scheduler, static", static_result);
  print_policy("scheduler, continuous", continuous_result);
  std::printf(
      "steps, static / continuous: %.2f (the output tokens/s ratio if every step costs "
      "the same: a prediction)\n",
      static_cast<double>(static_result.steps.size()) /
          static_cast<double>(continuous_result.steps.size()));

  if (options.timeline) {
    ladder::TraceOptions small = options.trace;
    small.requests = 12;
    small.min_new_tokens = 2;
    small.max_new_tokens = 12;
    const std::vector<ladder::Request> short_trace = ladder::generate_trace(small);
    NoModelBackend timeline_static(4, capacity), timeline_continuous(4, capacity);
    print_timeline("static batches of 4",
                   serve(short_trace, ladder::BatchingPolicy::static_batches, timeline_static),
                   timeline_static);
    print_timeline("continuous batching, 4 slots",
                   serve(short_trace, ladder::BatchingPolicy::continuous, timeline_continuous),
                   timeline_continuous);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ladder::bench::run_bench("batching_schedule", [&] { return run(argc, argv); });
}
