// tests/gpu/test_chapters.cpp - every chapter emits the same tokens as the CPU reference.
//
// The headline tests of the repository. Each chapter executable runs as a reader runs
// it, with its tokens and every step's logits dumped to files; they must equal the CPU
// reference's tokens and stop step exactly, and its logits within 1e-4 relative
// (max |a - ref| / max |ref| per row and step). Random weights make greedy rows collapse
// quickly, so the tests also use per-row random prompts, a model with large weights
// (the golden model, whose rows wander and really emit EOS) and compare logits, not only
// tokens. Run: gpu_tests "[chapters]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/prompts.hpp"
#include "common/reference.hpp"
#include "common/weights.hpp"
#include "tests/support/chapter_process.hpp"
#include "tests/support/golden_data.hpp"

namespace {

namespace reference = ladder::reference;
using ladder::testing::ChapterOutput;
using ladder::testing::TokenRows;

constexpr double kLogitsTolerance = 1e-4;

std::vector<std::int32_t> flatten(const TokenRows& rows, int columns) {
  std::vector<std::int32_t> flat;
  for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.begin() + columns);
  return flat;
}

void write_rows(const std::string& path, const TokenRows& rows) {
  std::ofstream file(path);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) file << (i ? " " : "") << row[i];
    file << '\n';
  }
}

/// Tokens, stop step and (if dumped) every step's logits of `output` against `expected`.
void check_against_reference(const ChapterOutput& output, const reference::Generation& expected,
                             int vocab_size) {
  REQUIRE(output.batch == expected.batch);
  REQUIRE(output.steps == expected.steps);
  CHECK(output.tokens == expected.tokens);
  if (output.logits.empty()) return;
  REQUIRE(output.logits.size() == expected.logits.size());
  double worst = 0.0;
  for (int step = 0; step < output.steps; ++step) {
    for (int row = 0; row < output.batch; ++row) {
      const std::size_t offset =
          (static_cast<std::size_t>(step) * output.batch + row) * static_cast<std::size_t>(vocab_size);
      const double error = reference::relative_error(output.logits.data() + offset,
                                                     expected.logits.data() + offset,
                                                     static_cast<std::size_t>(vocab_size));
      worst = std::max(worst, error);
      if (error > kLogitsTolerance) {
        FAIL_CHECK("step " << step << ", row " << row << ": logits relative error " << error);
        return;
      }
    }
  }
  INFO("largest logits relative error: " << worst);
  CHECK(worst <= kLogitsTolerance);
}

/// Runs every chapter with `arguments` and checks each against `expected`.
void check_every_chapter(const std::vector<std::string>& arguments,
                         const reference::Generation& expected, int vocab_size,
                         bool with_logits = true) {
  for (const std::string& chapter : ladder::testing::chapter_names()) {
    INFO("chapter " << chapter);
    const ChapterOutput output =
        ladder::testing::generate_with_chapter(chapter, arguments, vocab_size, with_logits);
    check_against_reference(output, expected, vocab_size);
  }
}

}  // namespace

TEST_CASE("golden model, BOS prompts: every chapter equals the reference and Hugging Face",
          "[chapters]") {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  const nlohmann::json golden = ladder::testing::load_golden_json("greedy_bos.json");
  const auto hf_tokens = golden.at("tokens").get<TokenRows>();
  const int new_tokens = golden.at("max_new_tokens").get<int>();
  const int batch = static_cast<int>(hf_tokens.size());
  const int eos = weights.config.eos_token_id;

  const ladder::PromptBatch prompts = ladder::bos_prompts(batch, weights.config.bos_token_id);
  const reference::Generation expected =
      reference::generate(weights, prompts.rows(), new_tokens, eos, true);
  const int hf_steps = ladder::testing::expected_stop_steps(hf_tokens, eos, new_tokens);
  REQUIRE(expected.steps == hf_steps);
  REQUIRE(expected.tokens == flatten(hf_tokens, hf_steps));

  check_every_chapter({"--weights", ladder::testing::golden_model_directory(), "--batch",
                       std::to_string(batch), "--new-tokens", std::to_string(new_tokens)},
                      expected, weights.config.vocab_size);
}

TEST_CASE("golden model, per-row prompts from a file: every chapter equals Hugging Face",
          "[chapters]") {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  const nlohmann::json golden = ladder::testing::load_golden_json("greedy_random_prompts.json");
  const auto prompts = golden.at("prompts").get<TokenRows>();
  const auto hf_tokens = golden.at("tokens").get<TokenRows>();
  const int new_tokens = golden.at("max_new_tokens").get<int>();
  const int eos = weights.config.eos_token_id;

  const std::string directory = ladder::testing::make_temporary_directory("ladder-golden");
  write_rows(directory + "/prompts.txt", prompts);
  const reference::Generation expected =
      reference::generate(weights, prompts, new_tokens, eos, true);
  const int hf_steps = ladder::testing::expected_stop_steps(hf_tokens, eos, new_tokens);
  REQUIRE(expected.steps == hf_steps);
  REQUIRE(expected.tokens == flatten(hf_tokens, hf_steps));

  check_every_chapter({"--weights", ladder::testing::golden_model_directory(), "--prompt-file",
                       directory + "/prompts.txt", "--batch", std::to_string(prompts.size()),
                       "--new-tokens", std::to_string(new_tokens)},
                      expected, weights.config.vocab_size);
}

TEST_CASE("early stop where EOS really occurs: every chapter stops at the same step",
          "[chapters]") {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  const nlohmann::json golden = ladder::testing::load_golden_json("greedy_eos.json");
  const auto prompts = golden.at("prompts").get<TokenRows>();
  const int eos = golden.at("eos_override").get<int>();
  const int stop_steps = golden.at("stop_steps").get<int>();
  const int new_tokens = golden.at("max_new_tokens").get<int>();
  REQUIRE(stop_steps < new_tokens);  // the run really stops early

  const std::string directory = ladder::testing::make_temporary_directory("ladder-eos");
  write_rows(directory + "/prompts.txt", prompts);
  const reference::Generation expected =
      reference::generate(weights, prompts, new_tokens, eos, true);
  REQUIRE(expected.steps == stop_steps);

  check_every_chapter({"--weights", ladder::testing::golden_model_directory(), "--prompt-file",
                       directory + "/prompts.txt", "--batch", std::to_string(prompts.size()),
                       "--new-tokens", std::to_string(new_tokens), "--eos", std::to_string(eos)},
                      expected, weights.config.vocab_size);
}

TEST_CASE("golden model, random prompts of several lengths and batches", "[chapters]") {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  const int eos = weights.config.eos_token_id;
  struct Case {
    int batch, prompt_length, new_tokens;
    std::uint64_t seed;
  };
  for (const Case& c : {Case{1, 1, 40, 3}, Case{3, 5, 33, 4}, Case{32, 9, 64, 5},
                        Case{37, 17, 100, 6}}) {
    INFO("batch " << c.batch << ", prompt length " << c.prompt_length);
    const ladder::PromptBatch prompts = ladder::random_prompts(
        c.batch, c.prompt_length, weights.config.vocab_size, eos, c.seed);
    const reference::Generation expected =
        reference::generate(weights, prompts.rows(), c.new_tokens, eos, true);
    check_every_chapter({"--weights", ladder::testing::golden_model_directory(), "--batch",
                         std::to_string(c.batch), "--new-tokens", std::to_string(c.new_tokens),
                         "--random-prompt-length", std::to_string(c.prompt_length), "--seed",
                         std::to_string(c.seed)},
                        expected, weights.config.vocab_size);
  }
}

TEST_CASE("GPT-2 small at full size, per-row random prompts: tokens and logits", "[chapters]") {
  const ladder::Gpt2Config config;  // GPT-2 small
  const std::uint64_t seed = 0;
  const ladder::Gpt2Weights weights = ladder::random_gpt2_weights(config, seed);
  const ladder::PromptBatch prompts =
      ladder::random_prompts(4, 8, config.vocab_size, config.eos_token_id, seed);
  const reference::Generation expected =
      reference::generate(weights, prompts.rows(), 24, config.eos_token_id, true);
  check_every_chapter({"--batch", "4", "--new-tokens", "24", "--random-prompt-length", "8",
                       "--seed", std::to_string(seed)},
                      expected, config.vocab_size);
}

TEST_CASE("GPT-2 small at full size, the BOS workload at B = 32", "[chapters]") {
  const ladder::Gpt2Config config;
  const ladder::Gpt2Weights weights = ladder::random_gpt2_weights(config, 0);
  const ladder::PromptBatch prompts = ladder::bos_prompts(32, config.bos_token_id);
  // All 32 rows compute the same thing; the reference computes the row once.
  const reference::Generation expected =
      reference::generate(weights, prompts.rows(), 64, config.eos_token_id, false);
  check_every_chapter({"--batch", "32", "--new-tokens", "64"}, expected, config.vocab_size,
                      /*with_logits=*/false);
}

namespace {

/// Teacher forcing through the chapter's own loop: each row's first token is the prompt,
/// the rest is fed in place of the argmax, and the logits of step s must equal
/// `expected_logits(row, s)` (the logits at position s) for every position.
template <typename ExpectedLogits>
void check_teacher_forced(const std::vector<std::string>& model_arguments,
                          const TokenRows& sequences, int vocab_size,
                          const ExpectedLogits& expected_logits) {
  const int batch = static_cast<int>(sequences.size());
  const int steps = static_cast<int>(sequences.front().size()) - 1;
  TokenRows first_tokens, continuations;
  std::vector<bool> used(static_cast<std::size_t>(vocab_size), false);
  for (const auto& sequence : sequences) {
    first_tokens.push_back({sequence.front()});
    continuations.emplace_back(sequence.begin() + 1, sequence.end());
    for (std::int32_t id : continuations.back()) used[static_cast<std::size_t>(id)] = true;
  }
  // An EOS id the sequences never feed, so no row stops early.
  const int eos = static_cast<int>(std::find(used.begin(), used.end(), false) - used.begin());
  REQUIRE(eos < vocab_size);

  const std::string directory = ladder::testing::make_temporary_directory("ladder-forced");
  write_rows(directory + "/prompts.txt", first_tokens);
  write_rows(directory + "/forced.txt", continuations);
  std::vector<std::string> arguments = model_arguments;
  arguments.insert(arguments.end(),
                   {"--prompt-file", directory + "/prompts.txt", "--force-tokens",
                    directory + "/forced.txt", "--batch", std::to_string(batch), "--new-tokens",
                    std::to_string(steps), "--eos", std::to_string(eos)});
  for (const std::string& chapter : ladder::testing::chapter_names()) {
    INFO("chapter " << chapter);
    const ChapterOutput output =
        ladder::testing::generate_with_chapter(chapter, arguments, vocab_size, true);
    REQUIRE(output.steps == steps);
    CHECK(output.tokens == flatten(continuations, steps));
    double worst = 0.0;
    for (int step = 0; step < steps; ++step) {
      for (int row = 0; row < batch; ++row) {
        const std::vector<float> expected = expected_logits(row, step);
        const float* actual = output.logits.data() +
                              (static_cast<std::size_t>(step) * batch + row) * vocab_size;
        worst = std::max(worst, reference::relative_error(actual, expected.data(),
                                                          static_cast<std::size_t>(vocab_size)));
      }
    }
    INFO("largest logits relative error over every position: " << worst);
    CHECK(worst <= kLogitsTolerance);
  }
}

}  // namespace

TEST_CASE("teacher-forced logits at every position equal Hugging Face's (golden model)",
          "[chapters]") {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  const nlohmann::json golden = ladder::testing::load_golden_json("teacher_forced.json");
  const auto sequences = golden.at("tokens").get<TokenRows>();
  const auto hf_logits = golden.at("logits").get<std::vector<std::vector<std::vector<float>>>>();
  check_teacher_forced({"--weights", ladder::testing::golden_model_directory()}, sequences,
                       weights.config.vocab_size, [&](int row, int position) {
                         return hf_logits.at(static_cast<std::size_t>(row))
                             .at(static_cast<std::size_t>(position));
                       });
}

TEST_CASE("teacher-forced logits at every position equal the reference (GPT-2 small)",
          "[chapters]") {
  const ladder::Gpt2Config config;
  const ladder::Gpt2Weights weights = ladder::random_gpt2_weights(config, 0);
  const ladder::PromptBatch random =
      ladder::random_prompts(2, 160, config.vocab_size, config.eos_token_id, 77);
  const TokenRows sequences = random.rows();
  const reference::Model model(weights);
  std::vector<std::vector<float>> logits;  // [row] -> [T, V]
  for (const auto& sequence : sequences) logits.push_back(model.forward(sequence));
  const auto V = static_cast<std::size_t>(config.vocab_size);
  check_teacher_forced({}, sequences, config.vocab_size, [&](int row, int position) {
    const auto begin = logits[static_cast<std::size_t>(row)].begin() +
                       static_cast<std::ptrdiff_t>(static_cast<std::size_t>(position) * V);
    return std::vector<float>(begin, begin + static_cast<std::ptrdiff_t>(V));
  });
}

TEST_CASE("an impossible size fails with a clear out-of-memory line", "[chapters]") {
  for (const std::string& chapter : ladder::testing::chapter_names()) {
    // 65536 prompts of 1000 tokens: GPT-2 small's activations alone need hundreds of GB.
    const auto result = ladder::testing::run_chapter_process(
        chapter, {"--batch", "65536", "--random-prompt-length", "1000", "--new-tokens", "8",
                  "--runs", "1", "--warmup", "0", "--quiet"});
    INFO(chapter << " printed: " << result.output);
    CHECK(result.exit_code == 1);
    CHECK(result.output.find("out of device memory") != std::string::npos);
    CHECK(std::count(result.output.begin(), result.output.end(), '\n') == 1);
  }
}
