// common/serving_options.hpp - the serving chapter's command line and the plan made from
// it before any GPU is touched: the trace (read, or generated from a seed), the model's
// config and weights, the slot capacity.
//
// A trace serves requests, not one batch, so the flags differ from chapters 00-10's
// (common/cli.hpp): no --batch or --new-tokens, a trace instead. What they share is
// kept the same: -h/--help wins over any other flag, a bad value is one line naming the
// flag, the exit codes are common/cli.hpp's, and a request's context rule is theirs,
// prompt tokens + new tokens <= the model's n_positions.
//
// Everything a generated trace will hold is checked before it is generated: its ranges
// against the model's context, its size (at most kMaxTraceTokens prompt tokens), and its
// arrivals against the replay bound (kMaxArrivalMs), so a command line that asks for
// terabytes or years is refused at once, in one line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/request_trace.hpp"
#include "common/weights.hpp"

namespace ladder {

struct ServingOptions {
  std::string trace_file;  ///< --trace; empty: generate one from `trace`
  TraceOptions trace;      ///< --requests, --trace-seed, --rate, --prompt-lengths, ...
  int slots = 32;
  std::optional<double> kv_cache_budget_gib;
  std::string weights_directory;
  std::string config_file;
  std::string model_name;  ///< --model: GPT-2 small, medium, large or xl, random weights
  std::uint64_t seed = 0;  ///< of the random weights
  std::optional<int> eos_token_id;
  bool allow_tf32 = false;
  std::string json_file;
  std::string dump_requests_file;
  bool cupti = false;
  bool help = false;
};

/// Parses argv. -h or --help anywhere gives {help = true} and nothing else is read, so
/// help prints even beside a bad flag. Throws std::invalid_argument("--flag: ...").
ServingOptions parse_serving_options(int argc, const char* const* argv);

/// The --help text: every flag, the context rule, then the exit codes (common/cli.hpp's).
std::string serving_usage(const std::string& program);

/// Everything decided before the GPU is touched, so bad input is refused on any machine.
struct ServingPlan {
  ServingOptions options;
  Gpt2Config config;
  std::optional<Gpt2Weights> checkpoint;  ///< loaded up front so a bad file is refused anywhere
  int eos_token_id = 0;
  std::vector<Request> trace;
  /// Positions per slot: the trace's longest P + N, the context rule's count (the last
  /// token is never fed back, so a request writes one position fewer).
  int capacity = 0;
  std::string trace_description;
};

/// The plan of `options`: loads the config (or checkpoint), reads or generates the trace
/// and checks it. `value_bytes`: bytes of one KV-cache value (4 fp32, 2 bf16), for
/// --kv-cache-budget-gib. Throws std::invalid_argument for a bad command line (a generated
/// trace that breaks the limits included) and std::runtime_error for a bad file (a trace
/// file that breaks the limits included).
ServingPlan make_serving_plan(const ServingOptions& options, int value_bytes);

}  // namespace ladder
