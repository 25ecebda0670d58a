// tests/gpu/test_model_sizes.cpp - the last rungs at GPT-2's larger sizes (--model).
//
// GPT-2 medium (24 layers, 16 heads, n_embd 1024) and XL (48 layers, 25 heads, n_embd
// 1600) with the documented random weights (seed 0), teacher-forced: two rows of a
// 3-token random prompt, then 4 forced ids, so every step's logits are compared with the
// CPU reference's logits at the same position (3 + 4 positions, every cache length from
// 3 to 6). Chapter 09 stores fp32 and must match the fp32 reference within 1e-4, as every
// fp32 chapter does at GPT-2 small (tests/gpu/test_chapters.cpp); the bf16 chapters
// (10, 11) must match the reference's bf16 mode within 2e-2, the tolerance
// test_chapters.cpp gives them at GPT-2 small's full size. XL's weights are 1.5 billion
// parameters: each chapter process draws them on the host (every core) and the test
// draws them once more for the reference. Run: gpu_tests "[sizes]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <future>
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
using ladder::testing::TokenRows;

constexpr double kFp32LogitsTolerance = 1e-4;    // test_chapters.cpp's kLogitsTolerance
constexpr double kBfloatLogitsTolerance = 2e-2;  // its kGpt2SmallBfloatLogitsTolerance
constexpr int kBatch = 2;
constexpr int kPromptLength = 3;
constexpr int kSteps = 4;
const std::string kFp32LastRung = "09_decode_matmuls";

/// The reference's logits [T, V] of every row's whole sequence, rows on threads of
/// their own (a forward of XL over a few positions takes seconds on one core).
std::vector<std::vector<float>> reference_logits(const reference::Model& model,
                                                 const TokenRows& sequences) {
  std::vector<std::future<std::vector<float>>> rows;
  for (const auto& sequence : sequences)
    rows.push_back(std::async(std::launch::async, [&model, &sequence] {
      // The last id is only ever an output: the forward runs over the ids that are fed.
      return model.forward(std::vector<std::int32_t>(sequence.begin(), sequence.end() - 1));
    }));
  std::vector<std::vector<float>> logits;
  for (auto& row : rows) logits.push_back(row.get());
  return logits;
}

/// Runs `chapter` teacher-forced with `arguments` and checks its tokens (the forced ids)
/// and every step's logits against `expected` (per row, [T, V]; step s is position
/// kPromptLength - 1 + s) within `tolerance`.
void check_chapter(const std::string& chapter, const std::vector<std::string>& arguments,
                   const TokenRows& forced, const std::vector<std::vector<float>>& expected,
                   int vocab_size, double tolerance) {
  INFO("chapter " << chapter);
  const ladder::testing::ChapterOutput output =
      ladder::testing::generate_with_chapter(chapter, arguments, vocab_size, true);
  REQUIRE(output.batch == kBatch);
  REQUIRE(output.steps == kSteps);
  CHECK(output.tokens == ladder::testing::flatten(forced, kSteps));
  REQUIRE(output.logits.size() == static_cast<std::size_t>(kSteps) * kBatch * vocab_size);
  const auto V = static_cast<std::size_t>(vocab_size);
  double worst = 0.0;
  for (int step = 0; step < kSteps; ++step) {
    for (int row = 0; row < kBatch; ++row) {
      const float* actual =
          output.logits.data() + (static_cast<std::size_t>(step) * kBatch + row) * V;
      const float* reference_row = expected[static_cast<std::size_t>(row)].data() +
                                   static_cast<std::size_t>(kPromptLength - 1 + step) * V;
      worst = std::max(worst, reference::relative_error(actual, reference_row, V));
    }
  }
  std::printf("%s: largest logits relative error over %d steps x %d rows: %.3g (tolerance %g)\n",
              chapter.c_str(), kSteps, kBatch, worst, tolerance);
  INFO("largest logits relative error over every position: " << worst);
  CHECK(worst <= tolerance);
}

/// GPT-2 `model` (--model NAME, seed 0) teacher-forced through chapter 09 against the
/// fp32 reference and through every bf16 chapter against the bf16 reference.
void check_size(const std::string& model) {
  const ladder::Gpt2Config config = ladder::Gpt2Config::named(model);
  const ladder::Gpt2Weights weights = ladder::random_gpt2_weights(config, 0);
  const TokenRows sequences = ladder::random_prompts(kBatch, kPromptLength + kSteps,
                                                     config.vocab_size, config.eos_token_id, 47)
                                  .rows();
  TokenRows prompts;
  TokenRows forced;
  for (const auto& sequence : sequences) {
    prompts.emplace_back(sequence.begin(), sequence.begin() + kPromptLength);
    forced.emplace_back(sequence.begin() + kPromptLength, sequence.end());
  }
  // An id no forced row feeds, so no row stops before the last step.
  const int eos = ladder::testing::teacher_forcing(sequences, config.vocab_size).eos;

  const std::string directory = ladder::testing::make_temporary_directory("ladder-sizes");
  ladder::testing::write_rows(directory + "/prompts.txt", prompts);
  ladder::testing::write_rows(directory + "/forced.txt", forced);
  const std::vector<std::string> arguments = {"--model",        model,
                                              "--prompt-file",  directory + "/prompts.txt",
                                              "--force-tokens", directory + "/forced.txt",
                                              "--batch",        std::to_string(kBatch),
                                              "--new-tokens",   std::to_string(kSteps),
                                              "--eos",          std::to_string(eos)};

  {
    const reference::Model fp32(weights, reference::Precision::fp32);
    const std::vector<std::vector<float>> expected = reference_logits(fp32, sequences);
    check_chapter(kFp32LastRung, arguments, forced, expected, config.vocab_size,
                  kFp32LogitsTolerance);
  }
  const std::vector<std::string> bf16_chapters = ladder::testing::bf16_chapter_names();
  REQUIRE_FALSE(bf16_chapters.empty());
  const reference::Model bf16(weights, reference::Precision::bf16);
  const std::vector<std::vector<float>> expected = reference_logits(bf16, sequences);
  for (const std::string& chapter : bf16_chapters)
    check_chapter(chapter, arguments, forced, expected, config.vocab_size, kBfloatLogitsTolerance);
}

}  // namespace

TEST_CASE(
    "GPT-2 medium, teacher-forced: 09 within 1e-4 of the reference, 10 and 11 within 2e-2 "
    "of its bf16 mode",
    "[sizes]") {
  check_size("medium");
}

TEST_CASE(
    "GPT-2 XL, teacher-forced: 09 within 1e-4 of the reference, 10 and 11 within 2e-2 "
    "of its bf16 mode",
    "[sizes]") {
  check_size("xl");
}
