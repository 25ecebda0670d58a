// bench/compare_logits.cpp - two runs' --dump-logits files side by side: how often their
// greedy tokens agree, where they first part, the logits' relative errors, and every step
// where the reference's top-2 margin is so small that a tolerated error may swap the
// winner (common/precision_comparison.hpp). Needs no GPU.
//
// Run:  build/current/bench/compare_logits REFERENCE.bin ACTUAL.bin --batch B
//                                          [--vocab V] [--tolerance E]
//   REFERENCE.bin, ACTUAL.bin   float32 [steps, B, V] as the chapters' --dump-logits write
//                               them; with different step counts the common first steps
//   --vocab V                   50257 (GPT-2) unless given
//   --tolerance E               the logits' relative tolerance, 1e-2 (bf16) unless given;
//                               margins below 2 E are listed
// The same file twice counts one run's own small margins.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "common/precision_comparison.hpp"

namespace {

struct Options {
  std::string reference;
  std::string actual;
  int batch = 0;
  int vocab = 50257;
  double tolerance = 1e-2;
};

constexpr const char* kUsage =
    "usage: compare_logits REFERENCE.bin ACTUAL.bin --batch B [--vocab V] [--tolerance E]";

Options parse_options(int argc, char** argv) {
  Options options;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--batch" || argument == "--vocab" || argument == "--tolerance") {
      if (i + 1 >= argc) throw std::invalid_argument(argument + ": needs a value");
      char* end = nullptr;
      const double value = std::strtod(argv[++i], &end);
      if (end == argv[i] || *end != '\0' || !(value > 0))
        throw std::invalid_argument(argument + ": needs a positive number, got '" + argv[i] + "'");
      if (argument == "--batch") options.batch = static_cast<int>(value);
      if (argument == "--vocab") options.vocab = static_cast<int>(value);
      if (argument == "--tolerance") options.tolerance = value;
    } else if (!argument.empty() && argument[0] == '-') {
      throw std::invalid_argument("unknown option '" + argument + "'; " + kUsage);
    } else {
      files.push_back(argument);
    }
  }
  if (files.size() != 2 || options.batch <= 0) throw std::invalid_argument(kUsage);
  options.reference = files[0];
  options.actual = files[1];
  return options;
}

/// The floats of a --dump-logits file, whose size must be whole steps of batch x vocab.
std::vector<float> read_logits(const std::string& path, std::size_t step_floats) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) throw std::runtime_error(path + ": cannot open the logits file");
  const auto bytes = static_cast<std::size_t>(file.tellg());
  if (bytes == 0 || bytes % (step_floats * sizeof(float)) != 0)
    throw std::runtime_error(path + ": " + std::to_string(bytes) +
                             " bytes are not whole steps of batch x vocab floats");
  std::vector<float> values(bytes / sizeof(float));
  file.seekg(0);
  file.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(bytes));
  if (!file) throw std::runtime_error(path + ": cannot read the logits file");
  return values;
}

int run(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  const std::size_t step_floats = static_cast<std::size_t>(options.batch) * options.vocab;
  const std::vector<float> reference = read_logits(options.reference, step_floats);
  const std::vector<float> actual = read_logits(options.actual, step_floats);
  const std::size_t reference_steps = reference.size() / step_floats;
  const std::size_t actual_steps = actual.size() / step_floats;
  const int steps = static_cast<int>(std::min(reference_steps, actual_steps));
  const ladder::PrecisionComparison comparison = ladder::compare_logit_sequences(
      actual.data(), reference.data(), steps, options.batch, options.vocab, 2 * options.tolerance);
  std::printf("%d steps (reference %zu, actual %zu), batch %d, vocab %d\n", steps, reference_steps,
              actual_steps, options.batch, options.vocab);
  std::printf("%s\n", ladder::describe(comparison).c_str());
  std::printf("reference top-2 margins below %g (relative): %zu of %d (step, row) pairs\n",
              2 * options.tolerance, comparison.small_margins.size(), steps * options.batch);
  for (const ladder::StepRow& pair : comparison.small_margins)
    std::printf("  step %d, row %d: margin %.3g\n", pair.step, pair.row, pair.margin);
  std::printf("first divergences with a margin of at least %g: %zu\n", 2 * options.tolerance,
              comparison.unexplained_first_divergences.size());
  for (const ladder::StepRow& pair : comparison.unexplained_first_divergences)
    std::printf("  step %d, row %d: margin %.3g\n", pair.step, pair.row, pair.margin);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ladder::bench::run_bench("compare_logits", [&] { return run(argc, argv); });
}
