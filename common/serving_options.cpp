// common/serving_options.cpp - the serving chapter's flags, usage and plan.
#include "common/serving_options.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/cli.hpp"
#include "common/continuous_batching.hpp"

namespace ladder {

namespace {

std::string text_after(int argc, const char* const* argv, int& i) {
  const std::string flag = argv[i];
  if (i + 1 >= argc) throw std::invalid_argument(flag + ": needs a value");
  return argv[++i];
}

/// The range "A-B" after flag argv[i]: whole numbers 1 <= A <= B <= 1e6.
void range_after(int argc, const char* const* argv, int& i, int& low, int& high) {
  const std::string flag = argv[i];
  const std::string text = text_after(argc, argv, i);
  char* end = nullptr;
  const long first = std::strtol(text.c_str(), &end, 10);
  const bool dash = end != text.c_str() && *end == '-';
  char* last_end = nullptr;
  const long last = dash ? std::strtol(end + 1, &last_end, 10) : 0;
  if (!dash || last_end == end + 1 || *last_end != '\0' || first < 1 || last < first ||
      last > 1000000)
    throw std::invalid_argument(flag + ": '" + text + "' is not a range A-B of whole numbers, " +
                                "1 <= A <= B <= 1000000");
  low = static_cast<int>(first);
  high = static_cast<int>(last);
}

/// A generated trace's options against the model, before anything is drawn: every
/// request must fit the context, the prompts the size bound, the arrivals the replay bound.
void check_generated_trace(const TraceOptions& trace, const Gpt2Config& config) {
  const long long longest = static_cast<long long>(trace.max_prompt_length) + trace.max_new_tokens;
  if (longest > config.n_positions)
    throw std::invalid_argument(
        "--prompt-lengths, --output-limits: the longest request, " +
        std::to_string(trace.max_prompt_length) + " prompt + " +
        std::to_string(trace.max_new_tokens) + " new tokens = " + std::to_string(longest) +
        ", exceeds the model's context of " + std::to_string(config.n_positions) +
        " positions; lower the ranges' upper ends");
  const long long tokens = static_cast<long long>(trace.requests) * trace.max_prompt_length;
  if (tokens > kMaxTraceTokens)
    throw std::invalid_argument("--requests, --prompt-lengths: up to " + std::to_string(tokens) +
                                " prompt tokens, more than a generated trace holds (" +
                                std::to_string(kMaxTraceTokens) + "); ask for fewer or shorter");
  if (trace.arrivals_per_second > 0) {
    const double expected_ms = trace.requests * 1000.0 / trace.arrivals_per_second;
    if (!(expected_ms <= kMaxArrivalMs)) {
      char message[256];
      std::snprintf(message, sizeof(message),
                    "--rate: %d requests at %g/s arrive over about %.3g s, longer than the "
                    "replay bound of %.0f s; raise --rate or lower --requests",
                    trace.requests, trace.arrivals_per_second, expected_ms / 1000,
                    kMaxArrivalMs / 1000);
      throw std::invalid_argument(message);
    }
  }
}

}  // namespace

ServingOptions parse_serving_options(int argc, const char* const* argv) {
  ServingOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      options.help = true;
      return options;
    }
  }
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--trace") {
      options.trace_file = text_after(argc, argv, i);
    } else if (flag == "--requests") {
      options.trace.requests = static_cast<int>(number_after_flag(argc, argv, i, 1, 1e7, true));
    } else if (flag == "--trace-seed") {
      options.trace.seed =
          static_cast<std::uint64_t>(number_after_flag(argc, argv, i, 0, 9e15, true));
    } else if (flag == "--rate") {
      options.trace.arrivals_per_second = number_after_flag(argc, argv, i, 0, 1e9, false);
    } else if (flag == "--prompt-lengths") {
      range_after(argc, argv, i, options.trace.min_prompt_length, options.trace.max_prompt_length);
    } else if (flag == "--output-limits") {
      range_after(argc, argv, i, options.trace.min_new_tokens, options.trace.max_new_tokens);
    } else if (flag == "--slots") {
      options.slots = static_cast<int>(number_after_flag(argc, argv, i, 1, 4096, true));
    } else if (flag == "--kv-cache-budget-gib") {
      options.kv_cache_budget_gib = number_after_flag(argc, argv, i, 0, 1e6, false);
    } else if (flag == "--weights") {
      options.weights_directory = text_after(argc, argv, i);
    } else if (flag == "--config") {
      options.config_file = text_after(argc, argv, i);
    } else if (flag == "--model") {
      options.model_name = text_after(argc, argv, i);
      try {
        Gpt2Config::named(options.model_name);
      } catch (const std::invalid_argument& error) {
        throw std::invalid_argument(flag + ": " + error.what());
      }
    } else if (flag == "--seed") {
      options.seed = static_cast<std::uint64_t>(number_after_flag(argc, argv, i, 0, 9e15, true));
    } else if (flag == "--eos") {
      options.eos_token_id = static_cast<int>(number_after_flag(argc, argv, i, -1, 1e9, true));
    } else if (flag == "--tf32") {
      options.allow_tf32 = true;
    } else if (flag == "--cupti") {
      options.cupti = true;
    } else if (flag == "--json") {
      options.json_file = text_after(argc, argv, i);
    } else if (flag == "--dump-requests") {
      options.dump_requests_file = text_after(argc, argv, i);
    } else {
      throw std::invalid_argument("unknown option '" + flag +
                                  "'; this chapter serves a trace (see --help)");
    }
  }
  if (!options.weights_directory.empty() && !options.config_file.empty())
    throw std::invalid_argument("--weights and --config: give one of them");
  if (!options.model_name.empty() &&
      (!options.weights_directory.empty() || !options.config_file.empty()))
    throw std::invalid_argument(std::string("--model: a GPT-2 size with random weights; ") +
                                (options.config_file.empty() ? "--weights" : "--config") +
                                " names the model itself: give one of the two");
  return options;
}

std::string serving_usage(const std::string& program) {
  std::string usage = "usage: " + program + R"( [options]
Serves a trace of requests with continuous batching and with static batches of the
slot count, and prints (and writes, --json) output tokens/s, GPU idle, latency p50/p99.
  --trace FILE          replay this trace (format: common/request_trace.hpp)
  --requests N          generated trace: N requests (default 512; prompts 4-64 tokens,
                        limits 16-256 new tokens)
  --trace-seed X        generated trace: its seed (default 0)
  --rate R              generated trace: Poisson arrivals, R requests/s (default 0: all
                        at time 0)
  --prompt-lengths A-B  generated trace: prompt lengths uniform in [A, B] (default 4-64)
  --output-limits A-B   generated trace: limits uniform in [A, B] new tokens (default
                        16-256)
  --slots S             KV-cache slots, rows of the decode step (default 32)
  --kv-cache-budget-gib G  refuse more slots than fit in G GiB (default: half the
                        device's free memory)
  --weights DIR         a Hugging Face GPT-2 directory (default: random GPT-2 small)
  --config FILE         random weights for this config.json
  --model NAME          random weights of GPT-2 small, medium, large or xl (--model,
                        --config and --weights: one at most)
  --seed X              seed of the random weights (default 0)
  --eos ID              a request stops after producing this id (default: the config's)
  --tf32                TF32 tensor cores in the products (an fp32 step only)
  --json FILE           write the results as JSON
  --cupti               one more, untimed run of each configuration under CUPTI: the
                        GPU's idle time as the profiler sees it, kernels per step
  --dump-requests FILE  write each request's slot and tokens, one request a line
  -h, --help            this text
Every request must fit the model's context as in chapters 00-10: its prompt tokens P plus
its new tokens N, P + N <= n_positions (1024 for GPT-2). A generated trace holds at most
)" + std::to_string(kMaxTraceTokens) +
                      R"( prompt tokens, and no request may arrive later than
)" + std::to_string(static_cast<long long>(kMaxArrivalMs / 1000)) +
                      R"( s after the start: a replay waits for every arrival.
This chapter serves a trace, not one batch: --batch and --new-tokens belong to
chapters 00-10.

exit codes
)";
  const std::pair<ExitCode, const char*> exit_codes[] = {
      {kExitSuccess, "the table was printed"},
      {kExitRuntimeError,
       "a bad file (a trace file, also one that breaks the limits above; config; weights) or "
       "a runtime error"},
      {kExitUsageError,
       "a bad command line: a flag or value, a generated trace that breaks the limits, more "
       "slots than fit"},
      {kExitNoCudaDevice, "no CUDA device (no NVIDIA GPU or driver)"},
  };
  for (const auto& [code, meaning] : exit_codes)
    usage += "  " + std::to_string(code) + "  " + meaning + "\n";
  return usage;
}

ServingPlan make_serving_plan(const ServingOptions& options, int value_bytes) {
  ServingPlan plan;
  plan.options = options;
  ChosenModel model = choose_model(options.weights_directory, options.config_file,
                                   options.model_name, options.eos_token_id);
  plan.config = model.config;
  plan.checkpoint = std::move(model.checkpoint);
  plan.eos_token_id = model.eos_token_id;
  const Gpt2Config& config = plan.config;

  const TraceLimits limits{config.vocab_size, config.n_positions, kMaxArrivalMs};
  if (!options.trace_file.empty()) {
    plan.trace = read_trace(options.trace_file, limits);
    plan.trace_description = options.trace_file;
  } else {
    TraceOptions trace = options.trace;
    trace.vocab_size = config.vocab_size;
    trace.excluded_id = config.eos_token_id;
    check_generated_trace(trace, config);
    plan.trace = generate_trace(trace);
    validate_trace(plan.trace, limits);
    char description[160];
    char arrivals[64] = "all at time 0";
    if (trace.arrivals_per_second > 0)
      std::snprintf(arrivals, sizeof(arrivals), "Poisson arrivals (%g/s)",
                    trace.arrivals_per_second);
    std::snprintf(description, sizeof(description),
                  "%d requests (seed %llu), prompts %d-%d tokens, limits %d-%d, %s", trace.requests,
                  static_cast<unsigned long long>(trace.seed), trace.min_prompt_length,
                  trace.max_prompt_length, trace.min_new_tokens, trace.max_new_tokens, arrivals);
    plan.trace_description = description;
  }
  for (const Request& request : plan.trace)
    plan.capacity =
        std::max(plan.capacity, static_cast<int>(request.prompt.size()) + request.max_new_tokens);
  if (options.kv_cache_budget_gib)
    require_slots_fit(config, options.slots, plan.capacity, value_bytes,
                      *options.kv_cache_budget_gib * (1 << 30));
  return plan;
}

}  // namespace ladder
