// common/cli.hpp - the one command-line interface every chapter shares.
//
// Every chapter executable accepts the same flags, so a workshop can run any rung
// the same way and lay the tables side by side. `--help` lists them. A bad value
// gives one line naming the flag and a non-zero exit (the runner catches
// std::invalid_argument).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/benchmark.hpp"  // StepTimes

namespace ladder {

/// Exit codes of a chapter executable (--help lists them).
enum ExitCode : int {
  kExitSuccess = 0,
  kExitRuntimeError = 1,  ///< bad file, out of memory, CUDA failure
  kExitUsageError = 2,    ///< bad command line
  kExitNoCudaDevice = 3,  ///< no GPU / driver
};

/// What a chapter run was asked to do.
struct RunOptions {
  std::vector<int> batch_sizes{32};                  ///< --batch 32 or --batch 1,8,32,64
  std::vector<int> new_token_counts{100, 200, 400};  ///< --new-tokens 100,200,400
  int runs = 5;                                      ///< timed runs per configuration
  int warmup_runs = 1;                               ///< runs before timing, excluded
  std::uint64_t seed = 0;                            ///< seed of the random weights and prompts
  std::string weights_directory;    ///< Hugging Face GPT-2 directory; empty = random
  std::string config_file;          ///< config.json for random weights of another size
  std::string model_name;           ///< --model: small, medium, large or xl, random weights
  std::string tokenizer_directory;  ///< vocab.json + merges.txt (default: weights dir)
  std::string prompt_text;          ///< one text prompt, repeated for every row
  int random_prompt_length = 0;     ///< > 0: per-row random token prompts
  std::string prompt_file;          ///< per-row prompts: token ids, one row per line
  std::string forced_tokens_file;   ///< teacher forcing: ids fed instead of the argmax
  std::optional<int> eos_token_id;  ///< overrides the config's EOS id
  bool allow_tf32 = false;          ///< TF32 tensor-core matmuls (PyTorch's 'high')
  std::string json_output;          ///< write results as JSON here
  std::string tokens_output;        ///< write the last run's tokens here
  std::string logits_output;        ///< write every step's logits here (for tests)
  bool print_text = false;          ///< decode and print row 0's text
  bool quiet = false;               ///< only the table
  bool compact = false;             ///< the table in at most 100 columns (format_compact_table)
  std::string compare_file;         ///< --compare: another run's --json, for "x prev"
  StepTimes previous_step_times;    ///< read from compare_file
  bool kernel_profile = false;      ///< print the kernels that take the GPU's time
  bool step_timeline = false;       ///< print one decode step's kernels as they ran
  bool help = false;
};

/// Parses argv; throws std::invalid_argument("--flag: what is wrong") on bad input.
RunOptions parse_run_options(int argc, const char* const* argv);

/// The --help text: every flag, then the exit codes.
std::string run_options_usage(const std::string& program);

/// For programs with flags of their own: the value after flag argv[i] (i moves onto it),
/// a number in [low, high] (whole if asked); throws std::invalid_argument("--flag: ...").
double number_after_flag(int argc, const char* const* argv, int& i, double low, double high,
                         bool whole);

/// Runs `run` and returns its exit code; an exception becomes one line on stderr,
/// "PROGRAM: error: what", and its exit code (usage 2, no CUDA device 3, anything else 1).
int exit_code_reporting_errors(const char* program, const std::function<int()>& run);

}  // namespace ladder
