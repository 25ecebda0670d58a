// tests/gpu/test_stream_interleaving.cpp - chapters 06 to 09, run again and again: a
// race shows as a moving result.
//
// Chapter 06 enqueues step i on one stream while the host checks step i - 1's flag, and
// both streams share every buffer; only the events between the steps keep them in
// order. A missing or misplaced wait would make the output change from run to run, or
// let the speculative step after an early stop leak into it. Chapter 07 replays those
// steps from graphs captured once, one per stream, and chapter 08 the whole generation
// from one graph whose loop the GPU runs: a graph replayed with stale state, or a loop
// condition set at the wrong time, would show the same way. Chapter 09 runs that graph
// on its own matmul kernels, whose split sums are added in a fixed order by the block
// that arrives last: a sum whose order moved would show the same way, in fp32 and
// under --tf32 alike. One process with --runs 50
// generates 50 times: the chapter runner itself fails the process ("a race?") when any
// run's tokens differ from the first run's, and the tokens it dumps must equal the CPU
// reference's, stop step included. At GPT-2 small's shapes (attention split over long
// prompts, products summed across splits) chapters 09 and 10 run 50 times too, and
// their tokens must equal another process's. Run: gpu_tests "[chapters]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/prompts.hpp"
#include "common/reference.hpp"
#include "common/weights.hpp"
#include "tests/support/chapter_process.hpp"
#include "tests/support/golden_data.hpp"

namespace {

namespace reference = ladder::reference;

constexpr const char* kRepeatedChapters[] = {"06_stream_interleaving", "07_cuda_graphs",
                                             "08_device_loop", "09_decode_matmuls"};
constexpr int kRuns = 50;

/// The tokens of `chapter` run kRuns times in one process with `arguments` (the runner
/// fails the process when one run's tokens differ from the first's), as dumped after the
/// last run: [batch rows][steps].
std::vector<std::vector<std::int32_t>> tokens_of_repeated_runs(
    const char* chapter, const std::vector<std::string>& arguments, int vocab_size) {
  const std::string directory = ladder::testing::make_temporary_directory("ladder-repeat-same");
  const std::string tokens_path = directory + "/tokens.txt";
  std::vector<std::string> full = arguments;
  full.insert(full.end(), {"--runs", std::to_string(kRuns), "--warmup", "0", "--quiet",
                           "--dump-tokens", tokens_path});
  const ladder::testing::ProcessResult result = ladder::testing::run_chapter_process(chapter, full);
  INFO(chapter << " printed: " << result.output);
  REQUIRE(result.exit_code == 0);
  return ladder::read_token_rows(tokens_path, vocab_size);
}

/// Runs `chapter` kRuns times in one process (tokens_of_repeated_runs) and checks the last
/// run's tokens and stop step against `expected`.
void check_repeated_runs_of(const char* chapter, const std::vector<std::string>& arguments,
                            const reference::Generation& expected, int vocab_size) {
  const std::vector<std::string> chapters = ladder::testing::chapter_names();
  REQUIRE(std::find(chapters.begin(), chapters.end(), chapter) != chapters.end());
  const auto rows = tokens_of_repeated_runs(chapter, arguments, vocab_size);
  REQUIRE(static_cast<int>(rows.size()) == expected.batch);
  REQUIRE(static_cast<int>(rows.front().size()) == expected.steps);
  std::vector<std::int32_t> tokens;
  for (const auto& row : rows) tokens.insert(tokens.end(), row.begin(), row.end());
  CHECK(tokens == expected.tokens);
}

/// Runs each of kRepeatedChapters kRuns times in one process (one warm-up run first) with
/// `arguments`, requires a clean exit, and checks the last run's tokens and stop step
/// against `expected`.
void check_repeated_runs(const std::vector<std::string>& arguments,
                         const reference::Generation& expected, int vocab_size) {
  for (const char* chapter : kRepeatedChapters) {
    INFO("chapter " << chapter);
    check_repeated_runs_of(chapter, arguments, expected, vocab_size);
  }
}

}  // namespace

TEST_CASE("chapters 06-09 give the reference's tokens on every one of 50 runs (random prompts)",
          "[chapters]") {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  const int eos = weights.config.eos_token_id;
  const int batch = 5;
  const int prompt_length = 4;
  const int new_tokens = 30;
  const std::uint64_t seed = 12;
  const ladder::PromptBatch prompts =
      ladder::random_prompts(batch, prompt_length, weights.config.vocab_size, eos, seed);
  const reference::Generation expected =
      reference::generate(weights, prompts.rows(), new_tokens, eos, false);

  check_repeated_runs(
      {"--weights", ladder::testing::golden_model_directory(), "--batch", std::to_string(batch),
       "--new-tokens", std::to_string(new_tokens), "--random-prompt-length",
       std::to_string(prompt_length), "--seed", std::to_string(seed)},
      expected, weights.config.vocab_size);
}

TEST_CASE("chapters 06-09 stop early at the reference's step on every one of 50 runs",
          "[chapters]") {
  const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  const nlohmann::json golden = ladder::testing::load_golden_json("greedy_eos.json");
  const auto prompt_rows = golden.at("prompts").get<ladder::testing::TokenRows>();
  const int eos = golden.at("eos_override").get<int>();
  const int stop_steps = golden.at("stop_steps").get<int>();
  const int max_new_tokens = golden.at("max_new_tokens").get<int>();
  REQUIRE(stop_steps + 1 < max_new_tokens);

  const ladder::PromptBatch prompts =
      ladder::prompts_from_rows(prompt_rows, static_cast<int>(prompt_rows.size()));
  const std::string directory = ladder::testing::make_temporary_directory("ladder-repeat-eos");
  const std::string prompt_file = directory + "/prompts.txt";
  ladder::write_token_rows(prompt_file, prompts.tokens, prompts.batch, prompts.length);

  // The limit far beyond the stop (a speculative step runs and is discarded), one past it
  // (the speculative step is the last the limit allows), and at it (the limit and the
  // flag stop the same step: nothing is enqueued beyond).
  for (const int new_tokens : {max_new_tokens, stop_steps + 1, stop_steps}) {
    INFO("--new-tokens " << new_tokens);
    const reference::Generation expected =
        reference::generate(weights, prompt_rows, new_tokens, eos, false);
    REQUIRE(expected.steps == stop_steps);
    check_repeated_runs({"--weights", ladder::testing::golden_model_directory(), "--prompt-file",
                         prompt_file, "--batch", std::to_string(prompts.batch), "--new-tokens",
                         std::to_string(new_tokens), "--eos", std::to_string(eos)},
                        expected, weights.config.vocab_size);
  }
}

namespace {

/// Runs `chapter` kRuns times in one process, then once in another: the last run of the
/// first must equal the single run of the second, token for token (a sum whose order
/// depended on timing would drift between processes as well as between runs), with the
/// batch and a stop step within the limit.
void check_same_tokens_every_run(const char* chapter, const std::vector<std::string>& arguments,
                                 int batch, int new_tokens, int vocab_size) {
  INFO("chapter " << chapter);
  const auto repeated = tokens_of_repeated_runs(chapter, arguments, vocab_size);
  REQUIRE(static_cast<int>(repeated.size()) == batch);
  REQUIRE_FALSE(repeated.front().empty());
  CHECK(static_cast<int>(repeated.front().size()) <= new_tokens);
  const ladder::testing::ChapterOutput single =
      ladder::testing::generate_with_chapter(chapter, arguments, vocab_size, false);
  std::vector<std::int32_t> flat;
  for (const auto& row : repeated) flat.insert(flat.end(), row.begin(), row.end());
  CHECK(single.tokens == flat);
}

}  // namespace

// Under --tf32 the tokens need not equal the fp32 reference's, but 50 runs must still
// equal each other (the runner fails the process when one differs) and another process's
// run, at B = 32 on GPT-2 small, where the products split their inner dimension.
TEST_CASE("chapter 09 with --tf32 gives the same tokens on every one of 50 runs", "[chapters]") {
  const ladder::Gpt2Config config;  // GPT-2 small
  check_same_tokens_every_run(
      "09_decode_matmuls",
      {"--tf32", "--batch", "32", "--new-tokens", "32", "--random-prompt-length", "4"}, 32, 32,
      config.vocab_size);
}

// The golden model above has 128 positions, so its attention never splits the valid
// length (splits cover 128 positions or more), and its products are small. GPT-2 small
// with random weights from the seed (the chapters' default), prompts of 200 tokens: the
// decode attention splits every row's length across blocks and merges the splits in
// order, and the products split K and sum the splits in thread-block clusters or through
// the workspace (the plans choose per product, batch and device; gpu_tests
// "[decode_matmul]" holds the two paths to the same bits). B = 1 and 32 plan differently.
TEST_CASE("chapters 09 and 10 at GPT-2 small shapes give the same tokens on every one of 50 runs",
          "[chapters]") {
  const ladder::Gpt2Config config;  // GPT-2 small, random weights from seed 0
  for (const char* chapter : {"09_decode_matmuls", "10_mixed_precision"}) {
    for (const int batch : {1, 32}) {
      INFO("batch " << batch);
      check_same_tokens_every_run(chapter,
                                  {"--batch", std::to_string(batch), "--new-tokens", "16",
                                   "--random-prompt-length", "200", "--seed", "3"},
                                  batch, 16, config.vocab_size);
    }
  }
}
