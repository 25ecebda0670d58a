// common/cli.cpp - parsing of the shared chapter command line.
#include "common/cli.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "common/benchmark.hpp"
#include "common/config.hpp"
#include "common/cuda_check.hpp"

namespace ladder {

namespace {

long long parse_integer(const std::string& flag, const std::string& text, long long minimum,
                        long long maximum) {
  if (text.empty()) throw std::invalid_argument(flag + ": expected a number, got nothing");
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0')
    throw std::invalid_argument(flag + ": expected a whole number, got '" + text + "'");
  if (value < minimum || value > maximum) {
    std::ostringstream message;
    message << flag << ": " << value << " is out of range [" << minimum << ", " << maximum << "]";
    throw std::invalid_argument(message.str());
  }
  return value;
}

std::vector<int> parse_integer_list(const std::string& flag, const std::string& text, int minimum,
                                    int maximum) {
  std::vector<int> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ','))
    values.push_back(static_cast<int>(parse_integer(flag, item, minimum, maximum)));
  if (values.empty() || text.back() == ',')
    throw std::invalid_argument(flag + ": expected a number or a comma-separated list, got '" +
                                text + "'");
  return values;
}

}  // namespace

RunOptions parse_run_options(int argc, const char* const* argv) {
  RunOptions options;
  constexpr int kLargest = std::numeric_limits<int>::max();
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(flag + ": missing value");
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      options.help = true;
    } else if (flag == "--batch") {
      options.batch_sizes = parse_integer_list(flag, value(), 1, 1 << 16);
    } else if (flag == "--new-tokens") {
      options.new_token_counts = parse_integer_list(flag, value(), 1, kLargest);
    } else if (flag == "--runs") {
      options.runs = static_cast<int>(parse_integer(flag, value(), 1, 10000));
    } else if (flag == "--warmup") {
      options.warmup_runs = static_cast<int>(parse_integer(flag, value(), 0, 10000));
    } else if (flag == "--seed") {
      options.seed = static_cast<std::uint64_t>(
          parse_integer(flag, value(), 0, std::numeric_limits<long long>::max()));
    } else if (flag == "--weights") {
      options.weights_directory = value();
    } else if (flag == "--config") {
      options.config_file = value();
    } else if (flag == "--model") {
      options.model_name = value();
      try {
        Gpt2Config::named(options.model_name);
      } catch (const std::invalid_argument& error) {
        throw std::invalid_argument(flag + ": " + error.what());
      }
    } else if (flag == "--tokenizer") {
      options.tokenizer_directory = value();
    } else if (flag == "--prompt") {
      options.prompt_text = value();
    } else if (flag == "--random-prompt-length") {
      options.random_prompt_length = static_cast<int>(parse_integer(flag, value(), 1, kLargest));
    } else if (flag == "--prompt-file") {
      options.prompt_file = value();
    } else if (flag == "--force-tokens") {
      options.forced_tokens_file = value();
    } else if (flag == "--eos") {
      options.eos_token_id = static_cast<int>(parse_integer(flag, value(), 0, kLargest));
    } else if (flag == "--tf32") {
      options.allow_tf32 = true;
    } else if (flag == "--json") {
      options.json_output = value();
    } else if (flag == "--dump-tokens") {
      options.tokens_output = value();
    } else if (flag == "--dump-logits") {
      options.logits_output = value();
    } else if (flag == "--print-text") {
      options.print_text = true;
    } else if (flag == "--kernel-profile") {
      options.kernel_profile = true;
    } else if (flag == "--step-timeline") {
      options.step_timeline = true;
    } else if (flag == "--quiet") {
      options.quiet = true;
    } else if (flag == "--compact") {
      options.compact = true;
    } else if (flag == "--compare") {
      options.compare_file = value();
    } else {
      throw std::invalid_argument("unknown flag '" + flag + "' (see --help)");
    }
  }
  const int prompt_sources = (options.prompt_text.empty() ? 0 : 1) +
                             (options.random_prompt_length > 0 ? 1 : 0) +
                             (options.prompt_file.empty() ? 0 : 1);
  if (prompt_sources > 1)
    throw std::invalid_argument(
        "--prompt, --random-prompt-length and --prompt-file: choose at most one");
  if (!options.weights_directory.empty() && !options.config_file.empty())
    throw std::invalid_argument(
        "--config: only for random weights; --weights brings its own config");
  if (!options.model_name.empty() &&
      (!options.weights_directory.empty() || !options.config_file.empty()))
    throw std::invalid_argument(std::string("--model: a GPT-2 size with random weights; ") +
                                (options.weights_directory.empty() ? "--config" : "--weights") +
                                " names the model itself: give one of the two");
  if (!options.compare_file.empty()) {
    if (!options.compact)
      throw std::invalid_argument("--compare: only with --compact, whose x prev column it fills");
    options.previous_step_times = read_step_times(options.compare_file);
  }
  return options;
}

std::string run_options_usage(const std::string& program) {
  std::string usage = "usage: " + program + R"( [flags]

Generates tokens with GPT-2 (greedy, batch of prompts) and prints the timing and
memory table for every (batch, new tokens) configuration.

workload
  --batch LIST              rows per batch, e.g. 32 or 1,8,32,64        (default 32)
  --new-tokens LIST         new tokens per row, e.g. 100,200,400     (default 100,200,400);
                            a prompt of T tokens and N new must fit the model's context:
                            T + N <= n_positions (1024 for GPT-2)
  --runs N                  timed runs per configuration                (default 5)
  --warmup N                untimed runs first                          (default 1)
                            (a GPU chapter runs at least one: a first run
                            captures graphs and fills caches)
  --seed S                  seed of the random weights and prompts      (default 0)
model
  --weights DIR             Hugging Face GPT-2 directory (config.json, model.safetensors);
                            default: GPT-2 small with the documented random weights
  --model NAME              GPT-2's size with the documented random weights: small
                            (12 layers, 12 heads, 768 wide), medium (24, 16, 1024),
                            large (36, 20, 1280) or xl (48, 25, 1600)  (default small)
  --config FILE             config.json of any other GPT-2 shape, random weights
                            (--model, --config and --weights: one at most)
  --tokenizer DIR           vocab.json + merges.txt (default: the --weights directory)
  --eos ID                  end-of-sequence id (default: the config's)
  --tf32                    TF32 tensor-core matmuls (default: plain fp32)
prompts (default: every row is the BOS token alone)
  --prompt TEXT             one text prompt, tokenized with GPT-2's BPE, for every row
  --random-prompt-length L  per-row random token prompts of length L
  --prompt-file FILE        per-row prompts: token ids, one row per line
  --force-tokens FILE       teacher forcing (tests): feed these ids, one row per line,
                            instead of the argmax; logits are computed as usual
output
  --json FILE               results as JSON
  --dump-tokens FILE        generated ids of the last run, one row per line
  --dump-logits FILE        every step's logits, float32 [steps, batch, vocab] (for tests)
  --print-text              print row 0's generated text (needs a tokenizer)
  --kernel-profile          before the table, the kernels that took the GPU's time
                            (from the untimed CUPTI-traced run)
  --step-timeline           before the table, the kernels of the traced run's middle
                            step in the order they started: when each started and
                            ended, and what it added to the step
  --quiet                   print only the table
  --compact                 a table of at most 100 columns, for a projector: batch, new
                            tokens, ms/step, tokens/s, x floor, x previous, tokens hash
  --compare FILE            another run's --json (the previous chapter's): --compact's
                            "x prev" column is this run's ms/step over that run's, for the
                            configurations both ran

exit codes
)";
  const std::pair<ExitCode, const char*> exit_codes[] = {
      {kExitSuccess, "the table was printed"},
      {kExitRuntimeError, "a bad file (config, weights, tokenizer, prompts) or a runtime error"},
      {kExitUsageError, "a bad command line"},
      {kExitNoCudaDevice, "no CUDA device (no NVIDIA GPU or driver)"},
  };
  for (const auto& [code, meaning] : exit_codes)
    usage += "  " + std::to_string(code) + "  " + meaning + "\n";
  return usage;
}

double number_after_flag(int argc, const char* const* argv, int& i, double low, double high,
                         bool whole) {
  const std::string flag = argv[i];
  if (i + 1 >= argc) throw std::invalid_argument(flag + ": needs a value");
  char* end = nullptr;
  const double value = std::strtod(argv[++i], &end);
  if (end == argv[i] || *end != '\0' || !(value >= low && value <= high) ||
      (whole && value != static_cast<double>(static_cast<long long>(value)))) {
    char range[96];
    std::snprintf(range, sizeof(range), "%s in [%g, %g]", whole ? "a whole number" : "a number",
                  low, high);
    throw std::invalid_argument(flag + ": '" + argv[i] + "' is not " + range);
  }
  return value;
}

int exit_code_reporting_errors(const char* program, const std::function<int()>& run) {
  try {
    return run();
  } catch (const std::invalid_argument& error) {
    std::fprintf(stderr, "%s: error: %s\n", program, error.what());
    return kExitUsageError;
  } catch (const NoCudaDevice& error) {
    std::fprintf(stderr, "%s: error: %s\n", program, error.what());
    return kExitNoCudaDevice;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: error: %s\n", program, error.what());
    return kExitRuntimeError;
  }
}

}  // namespace ladder
