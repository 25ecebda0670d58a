// tests/gpu/test_chapters.cpp - every chapter emits the same tokens as the CPU reference.
//
// The headline tests of the repository. Each chapter executable runs as a reader runs
// it, with its tokens and every step's logits dumped to files; they must equal the CPU
// reference's tokens and stop step exactly, and its logits within 1e-4 relative
// (max |a - ref| / max |ref| per row and step). Random weights make greedy rows collapse
// quickly, so the tests also use per-row random prompts, a model with large weights
// (the golden model, whose rows wander and really emit EOS) and compare logits, not only
// tokens. The CPU prologue, chapters/00_cpu_reference, runs here with the others
// (ladder::testing::chapter_names() lists every chapter), and every chapter's tokens
// must also equal the first chapter's. Run: gpu_tests "[chapters]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
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
using ladder::testing::flatten;
using ladder::testing::TokenRows;
using ladder::testing::write_rows;

constexpr double kLogitsTolerance = 1e-4;

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
      const std::size_t offset = (static_cast<std::size_t>(step) * output.batch + row) *
                                 static_cast<std::size_t>(vocab_size);
      const double error =
          reference::relative_error(output.logits.data() + offset, expected.logits.data() + offset,
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

/// Runs every chapter with `arguments` and checks each against `expected` and against
/// the first chapter (the CPU prologue, 00).
void check_every_chapter(const std::vector<std::string>& arguments,
                         const reference::Generation& expected, int vocab_size,
                         bool with_logits = true) {
  std::vector<std::int32_t> first_chapter_tokens;
  for (const std::string& chapter : ladder::testing::chapter_names()) {
    INFO("chapter " << chapter);
    const ChapterOutput output =
        ladder::testing::generate_with_chapter(chapter, arguments, vocab_size, with_logits);
    check_against_reference(output, expected, vocab_size);
    if (first_chapter_tokens.empty()) first_chapter_tokens = output.tokens;
    CHECK(output.tokens == first_chapter_tokens);
  }
}

}  // namespace

namespace {

/// Every chapter on the golden model with the prompts of a greedy golden file: equal to
/// the reference, which must equal Hugging Face's tokens and stop step. BOS prompts are
/// the chapters' default (no --prompt-file).
void check_golden_greedy(const std::string& name, bool bos_prompts = false) {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  const auto golden = ladder::testing::load_golden_greedy(name, weights.config);
  const reference::Generation expected =
      reference::generate(weights, golden.prompts, golden.max_new_tokens, golden.eos, true);
  REQUIRE(expected.steps == golden.stop_steps);
  REQUIRE(expected.tokens == golden.hf_tokens);

  std::vector<std::string> arguments = {"--weights",    ladder::testing::golden_model_directory(),
                                        "--batch",      std::to_string(golden.prompts.size()),
                                        "--new-tokens", std::to_string(golden.max_new_tokens),
                                        "--eos",        std::to_string(golden.eos)};
  if (!bos_prompts) {
    const std::string prompts =
        ladder::testing::make_temporary_directory("ladder-golden") + "/prompts.txt";
    write_rows(prompts, golden.prompts);
    arguments.insert(arguments.end(), {"--prompt-file", prompts});
  }
  check_every_chapter(arguments, expected, weights.config.vocab_size);
}

}  // namespace

TEST_CASE("golden model, BOS prompts: every chapter equals the reference and Hugging Face",
          "[chapters]") {
  check_golden_greedy("greedy_bos.json", /*bos_prompts=*/true);
}

TEST_CASE("golden model, per-row prompts from a file: every chapter equals Hugging Face",
          "[chapters]") {
  check_golden_greedy("greedy_random_prompts.json");
}

TEST_CASE("early stop where EOS really occurs: every chapter stops at the same step",
          "[chapters]") {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  const auto golden = ladder::testing::load_golden_greedy("greedy_eos.json", weights.config);
  REQUIRE(golden.stop_steps < golden.max_new_tokens);  // the run really stops early
  check_golden_greedy("greedy_eos.json");
}

TEST_CASE("golden model, random prompts of several lengths and batches", "[chapters]") {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  const int eos = weights.config.eos_token_id;
  struct Case {
    int batch, prompt_length, new_tokens;
    std::uint64_t seed;
  };
  for (const Case& c :
       {Case{1, 1, 40, 3}, Case{3, 5, 33, 4}, Case{32, 9, 64, 5}, Case{37, 17, 100, 6}}) {
    INFO("batch " << c.batch << ", prompt length " << c.prompt_length);
    const ladder::PromptBatch prompts =
        ladder::random_prompts(c.batch, c.prompt_length, weights.config.vocab_size, eos, c.seed);
    const reference::Generation expected =
        reference::generate(weights, prompts.rows(), c.new_tokens, eos, true);
    check_every_chapter(
        {"--weights", ladder::testing::golden_model_directory(), "--batch", std::to_string(c.batch),
         "--new-tokens", std::to_string(c.new_tokens), "--random-prompt-length",
         std::to_string(c.prompt_length), "--seed", std::to_string(c.seed)},
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
  const auto [first_tokens, continuations, eos] =
      ladder::testing::teacher_forcing(sequences, vocab_size);

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
        const float* actual =
            output.logits.data() + (static_cast<std::size_t>(step) * batch + row) * vocab_size;
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
  check_teacher_forced(
      {"--weights", ladder::testing::golden_model_directory()}, sequences,
      weights.config.vocab_size, [&](int row, int position) {
        return hf_logits.at(static_cast<std::size_t>(row)).at(static_cast<std::size_t>(position));
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
    // The prologue keeps its KV caches in host memory.
    const bool on_host = chapter == ladder::testing::kHostChapter;
    CHECK(result.output.find(on_host ? "out of host memory" : "out of device memory") !=
          std::string::npos);
    CHECK(std::count(result.output.begin(), result.output.end(), '\n') == 1);
  }
}
