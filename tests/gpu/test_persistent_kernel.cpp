// tests/gpu/test_persistent_kernel.cpp - chapter 11 (one persistent kernel) against
// chapter 10, whose blocks its instructions run: the same tokens and the same logits, bit
// for bit, on every workload; repeat runs bit-identical; the watchdog's error path; the
// batch limit. The bf16 contract against the CPU reference runs in test_chapters.cpp
// ("bf16 chapters: ..."), which covers every bf16 chapter.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/splitmix64.hpp"
#include "tests/support/chapter_process.hpp"
#include "tests/support/golden_data.hpp"

namespace {

using ladder::testing::ChapterOutput;

const std::string kChapter = "11_persistent_kernel";
const std::string kPrevious = "10_mixed_precision";

bool built(const std::string& chapter) {
  const std::vector<std::string> chapters = ladder::testing::chapter_names();
  return std::find(chapters.begin(), chapters.end(), chapter) != chapters.end();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::memcmp(&x, &y, sizeof x) == 0;
         });
}

/// Runs chapters 10 and 11 with `arguments` and requires the same steps, tokens and logits.
void check_equals_chapter_10(const std::vector<std::string>& arguments, int vocab_size) {
  REQUIRE(built(kChapter));
  REQUIRE(built(kPrevious));
  const ChapterOutput previous =
      ladder::testing::generate_with_chapter(kPrevious, arguments, vocab_size, true);
  const ChapterOutput persistent =
      ladder::testing::generate_with_chapter(kChapter, arguments, vocab_size, true);
  CHECK(persistent.batch == previous.batch);
  CHECK(persistent.steps == previous.steps);
  CHECK(persistent.tokens == previous.tokens);
  CHECK(same_bits(persistent.logits, previous.logits));
}

std::vector<std::string> golden(std::vector<std::string> flags) {
  flags.insert(flags.begin(), {"--weights", ladder::testing::golden_model_directory()});
  return flags;
}

}  // namespace

TEST_CASE("chapter 11 equals chapter 10 bit for bit on the golden model",
          "[chapters][bf16][persistent]") {
  const int V = ladder::testing::load_golden_model().config.vocab_size;
  SECTION("BOS prompts") {
    check_equals_chapter_10(golden({"--batch", "3", "--new-tokens", "20"}), V);
  }
  SECTION("per-row random prompts, B = 1, 5, 17, 64") {
    for (const char* batch : {"1", "5", "17", "64"}) {
      INFO("batch " << batch);
      check_equals_chapter_10(golden({"--batch", batch, "--new-tokens", "12",
                                      "--random-prompt-length", "6", "--seed", "3"}),
                              V);
    }
  }
}

TEST_CASE("chapter 11 equals chapter 10 bit for bit on GPT-2 small",
          "[chapters][bf16][persistent]") {
  const int V = ladder::Gpt2Config{}.vocab_size;
  SECTION("BOS prompts, B = 1 and 32") {
    check_equals_chapter_10({"--batch", "1", "--new-tokens", "24"}, V);
    check_equals_chapter_10({"--batch", "32", "--new-tokens", "8"}, V);
  }
  SECTION("per-row random prompts, B = 8 and 64") {
    check_equals_chapter_10(
        {"--batch", "8", "--new-tokens", "16", "--random-prompt-length", "5", "--seed", "1"}, V);
    check_equals_chapter_10(
        {"--batch", "64", "--new-tokens", "6", "--random-prompt-length", "3", "--seed", "2"}, V);
  }
}

TEST_CASE("chapter 11 teacher-forced: every position's logits equal chapter 10's",
          "[chapters][bf16][persistent]") {
  const ladder::Gpt2Config config;
  const int batch = 4;
  const int steps = 20;
  const std::string directory = ladder::testing::make_temporary_directory("ladder-forced");
  const std::string path = directory + "/forced.txt";
  {
    std::ofstream file(path);
    std::uint64_t state = 11;
    for (int row = 0; row < batch; ++row) {
      for (int step = 0; step < steps; ++step)
        file << (step ? " " : "") << ladder::splitmix64_next(state) % 50000;
      file << "\n";
    }
  }
  check_equals_chapter_10({"--batch", std::to_string(batch), "--new-tokens", std::to_string(steps),
                           "--random-prompt-length", "2", "--force-tokens", path},
                          config.vocab_size);
}

TEST_CASE("chapter 11 stops at chapter 10's step where EOS really occurs",
          "[chapters][bf16][persistent]") {
  const int V = ladder::Gpt2Config{}.vocab_size;
  // With random weights each row settles on repeating a token within a few steps: make
  // row 0's fourth token the end-of-sequence id, so every chapter must stop early.
  const std::vector<std::string> base = {
      "--batch", "4", "--new-tokens", "40", "--random-prompt-length", "3", "--seed", "5"};
  const ChapterOutput free_run = ladder::testing::generate_with_chapter(kPrevious, base, V, false);
  REQUIRE(free_run.steps == 40);
  std::vector<std::string> with_eos = base;
  with_eos.insert(with_eos.end(), {"--eos", std::to_string(free_run.tokens.at(3))});
  const ChapterOutput stopped =
      ladder::testing::generate_with_chapter(kPrevious, with_eos, V, false);
  INFO("chapter 10 stopped after " << stopped.steps << " steps");
  check_equals_chapter_10(with_eos, V);
}

TEST_CASE("chapter 11 repeats itself bit for bit at GPT-2 small's shapes (50 runs)",
          "[chapters][bf16][persistent]") {
  REQUIRE(built(kChapter));
  const int V = ladder::Gpt2Config{}.vocab_size;
  const std::vector<std::string> arguments = {
      "--batch", "32", "--new-tokens", "24", "--random-prompt-length", "9", "--seed", "7"};
  const ChapterOutput first = ladder::testing::generate_with_chapter(kChapter, arguments, V, true);
  const ChapterOutput second = ladder::testing::generate_with_chapter(kChapter, arguments, V, true);
  CHECK(second.tokens == first.tokens);
  CHECK(same_bits(first.logits, second.logits));
  // 50 timed runs in one process: the runner fails the run when any run's token hash
  // differs from the first's.
  std::vector<std::string> repeated = arguments;
  repeated.insert(repeated.end(), {"--runs", "50", "--warmup", "0", "--quiet"});
  const auto result = ladder::testing::run_chapter_process(kChapter, repeated);
  INFO(result.output);
  CHECK(result.exit_code == 0);
}

TEST_CASE("chapter 11: a dependency that never arrives ends in one error line, not a hang",
          "[chapters][bf16][persistent]") {
  REQUIRE(built(kChapter));
  // Instruction 1 is the embedding of row 1: ln_1 of row 1 waits for it for ever, and
  // with it everything after; the first wait past the watchdog names itself (any block's).
  const auto result = ladder::testing::run_chapter_process(
      kChapter,
      golden({"--batch", "3", "--new-tokens", "8", "--runs", "1", "--warmup", "0", "--quiet"}),
      "LADDER_PERSISTENT_DROP_SIGNAL=1 LADDER_PERSISTENT_WATCHDOG_MS=300");
  INFO(result.output);
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("the persistent decode kernel stopped") != std::string::npos);
  CHECK(result.output.find("waited past the watchdog at ") != std::string::npos);
  CHECK(std::count(result.output.begin(), result.output.end(), '\n') == 1);
}

TEST_CASE("chapter 11 refuses more than 64 rows in one line", "[chapters][bf16][persistent]") {
  REQUIRE(built(kChapter));
  const auto result = ladder::testing::run_chapter_process(
      kChapter, golden({"--batch", "65", "--new-tokens", "4", "--runs", "1", "--warmup", "0"}));
  INFO(result.output);
  CHECK(result.exit_code != 0);
  CHECK(result.output.find("at most 64 rows") != std::string::npos);
}

TEST_CASE("chapter 11 writes one step's timeline when asked", "[chapters][bf16][persistent]") {
  REQUIRE(built(kChapter));
  const std::string directory = ladder::testing::make_temporary_directory("ladder-timeline");
  const std::string path = directory + "/step.csv";
  const auto result = ladder::testing::run_chapter_process(
      kChapter,
      golden({"--batch", "2", "--new-tokens", "8", "--runs", "1", "--warmup", "0", "--quiet"}),
      "LADDER_PERSISTENT_TIMELINE=" + path);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  std::ifstream file(path);
  std::string line;
  REQUIRE(std::getline(file, line));
  CHECK(line == "instruction,block,op,layer,what,taken_up_ns,ready_ns,done_ns");
  int instructions = 0;
  while (std::getline(file, line)) ++instructions;
  CHECK(instructions > 10);  // every instruction of one step of the golden model
}
