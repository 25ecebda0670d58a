// tests/cli/test_cpu_reference_chapter.cpp - the CPU prologue, end to end, without a GPU.
//
// chapters/00_cpu_reference runs its own decode loop (per-row KV caches, one token
// per step, the stopping rule, teacher forcing) around reference::Model::step. Run as
// a reader runs it, on the small golden model, its tokens and every step's logits must
// equal what reference::generate computes for the same prompts, and Hugging Face's
// golden tokens and logits; it must also run where no GPU is visible. Run: cli_tests
// "[cpu_reference_chapter]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "common/prompts.hpp"
#include "common/reference.hpp"
#include "common/weights.hpp"
#include "tests/support/chapter_process.hpp"
#include "tests/support/golden_data.hpp"

namespace {

namespace reference = ladder::reference;
using ladder::testing::ChapterOutput;
using ladder::testing::kHostChapter;

constexpr double kLogitsTolerance = 1e-4;

/// The chapter's generation on the golden model with `arguments`, logits included.
ChapterOutput run_on_golden_model(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), {"--weights", ladder::testing::golden_model_directory()});
  const int vocab = ladder::testing::load_golden_model().config.vocab_size;
  return ladder::testing::generate_with_chapter(kHostChapter, arguments, vocab, true);
}

/// `rows` as a file the chapter reads (--prompt-file, --force-tokens).
std::string rows_file(const ladder::testing::TokenRows& rows) {
  std::string path = ladder::testing::make_temporary_directory("ladder-00") + "/rows.txt";
  ladder::testing::write_rows(path, rows);
  return path;
}

/// The same computation as reference::generate, so the same numbers: tokens and stop
/// step equal, and every logit equal to the last bit.
void check_equal(const ChapterOutput& output, const reference::Generation& expected) {
  REQUIRE(output.batch == expected.batch);
  REQUIRE(output.steps == expected.steps);
  CHECK(output.tokens == expected.tokens);
  CHECK(output.logits == expected.logits);
}

}  // namespace

TEST_CASE("chapter 00 on the golden files equals reference::generate and Hugging Face",
          "[cpu_reference_chapter]") {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  for (const char* name : {"greedy_bos.json", "greedy_random_prompts.json", "greedy_eos.json"}) {
    INFO(name);
    const auto golden = ladder::testing::load_golden_greedy(name, weights.config);
    const reference::Generation expected =
        reference::generate(weights, golden.prompts, golden.max_new_tokens, golden.eos, true);
    const ChapterOutput output = run_on_golden_model(
        {"--prompt-file", rows_file(golden.prompts), "--batch",
         std::to_string(golden.prompts.size()), "--new-tokens",
         std::to_string(golden.max_new_tokens), "--eos", std::to_string(golden.eos)});
    check_equal(output, expected);
    CHECK(output.tokens == golden.hf_tokens);
  }
  // greedy_eos.json really stops early: the stopping rule is exercised.
  const auto eos = ladder::testing::load_golden_greedy("greedy_eos.json", weights.config);
  CHECK(eos.stop_steps < eos.max_new_tokens);
}

TEST_CASE("chapter 00, random prompts of several lengths and batches, equals reference::generate",
          "[cpu_reference_chapter]") {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  const int eos = weights.config.eos_token_id;
  struct Case {
    int batch, prompt_length, new_tokens;
    std::uint64_t seed;
  };
  for (const Case& c : {Case{1, 1, 40, 3}, Case{3, 5, 33, 4}, Case{9, 17, 64, 6}}) {
    INFO("batch " << c.batch << ", prompt length " << c.prompt_length);
    const ladder::PromptBatch prompts =
        ladder::random_prompts(c.batch, c.prompt_length, weights.config.vocab_size, eos, c.seed);
    const reference::Generation expected =
        reference::generate(weights, prompts.rows(), c.new_tokens, eos, true);
    const ChapterOutput output =
        run_on_golden_model({"--batch", std::to_string(c.batch), "--new-tokens",
                             std::to_string(c.new_tokens), "--random-prompt-length",
                             std::to_string(c.prompt_length), "--seed", std::to_string(c.seed)});
    check_equal(output, expected);
    // Distinct prompts, distinct rows: each row is really decoded on its own.
    const auto row = [&](int index) {
      const auto begin = output.tokens.begin() + static_cast<std::ptrdiff_t>(index) * output.steps;
      return std::vector<std::int32_t>(begin, begin + output.steps);
    };
    for (int index = 1; index < output.batch; ++index) CHECK(row(index) != row(0));
  }
}

TEST_CASE("chapter 00, teacher-forced: the logits at every position equal Hugging Face's",
          "[cpu_reference_chapter]") {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  const nlohmann::json golden = ladder::testing::load_golden_json("teacher_forced.json");
  const auto sequences = golden.at("tokens").get<ladder::testing::TokenRows>();
  const auto hf_logits = golden.at("logits").get<std::vector<std::vector<std::vector<float>>>>();
  const int vocab = weights.config.vocab_size;
  const int batch = static_cast<int>(sequences.size());
  const int steps = static_cast<int>(sequences.front().size()) - 1;
  const auto forcing = ladder::testing::teacher_forcing(sequences, vocab);

  const ChapterOutput output = run_on_golden_model(
      {"--prompt-file", rows_file(forcing.first_tokens), "--force-tokens",
       rows_file(forcing.continuations), "--batch", std::to_string(batch), "--new-tokens",
       std::to_string(steps), "--eos", std::to_string(forcing.eos)});
  REQUIRE(output.steps == steps);
  CHECK(output.tokens == ladder::testing::flatten(forcing.continuations, steps));
  double worst = 0.0;
  for (int step = 0; step < steps; ++step)
    for (int row = 0; row < batch; ++row) {
      const float* actual =
          output.logits.data() + (static_cast<std::size_t>(step) * batch + row) * vocab;
      const auto& expected = hf_logits.at(static_cast<std::size_t>(row)).at(step);
      worst = std::max(worst, reference::relative_error(actual, expected.data(), expected.size()));
    }
  INFO("largest logits relative error over every position: " << worst);
  CHECK(worst <= kLogitsTolerance);
}

TEST_CASE("chapter 00 runs where no GPU is visible and prints '-' for what it cannot measure",
          "[cpu_reference_chapter]") {
  const std::string directory = ladder::testing::make_temporary_directory("ladder-00-nogpu");
  const auto result = ladder::testing::run_chapter_process(
      kHostChapter,
      {"--weights", ladder::testing::golden_model_directory(), "--batch", "2", "--new-tokens", "8",
       "--runs", "2", "--warmup", "0", "--json", directory + "/run.json"},
      "CUDA_VISIBLE_DEVICES=-1");
  INFO("printed: " << result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.find("no GPU used") != std::string::npos);
  std::ifstream json_file(directory + "/run.json");
  const nlohmann::json document = nlohmann::json::parse(json_file);
  const nlohmann::json& row = document.at("configurations").at(0);
  CHECK(row.at("steps").get<int>() == 8);
  CHECK(row.at("median_s").get<double>() > 0);
  for (const char* column : {"floor_s", "peak_allocated_bytes", "peak_reserved_bytes",
                             "fragmentation", "kernels_per_step", "gpu_idle_s_per_step"})
    CHECK(row.at(column).is_null());
  CHECK(document.at("copy_bandwidth_bytes_per_s").get<double>() == 0);
}

TEST_CASE("chapter 00 refuses what the CPU reference has no use for", "[cpu_reference_chapter]") {
  for (const char* flag : {"--tf32", "--kernel-profile", "--step-timeline"}) {
    const auto result = ladder::testing::run_chapter_process(kHostChapter, {flag});
    INFO(flag << ": " << result.output);
    CHECK(result.exit_code == 2);
    CHECK(result.output.find(std::string("error: ") + flag) != std::string::npos);
  }
}
