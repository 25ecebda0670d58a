// tests/cli/test_continuous_batching_cli.cpp - chapter 12 refuses bad input with one
// clear line and the documented exit code, before it touches a GPU: a malformed trace
// file, a request longer than the context, more slots than the KV-cache budget holds, and
// the batch flags of chapters 00-10, which it does not take. Every case runs with
// CUDA_VISIBLE_DEVICES=-1: were the input accepted, the chapter would say "no CUDA device".
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/cli_checks.hpp"
#include "tests/support/chapter_process.hpp"

namespace {

using ladder::testing::make_temporary_directory;
using ladder::testing::run_chapter_process;
using ladder::testing::test_data_path;

const std::string kChapter = "12_continuous_batching";
using ladder::testing::kNoGpu;
using ladder::testing::write_file;

void expect_refusal(const std::vector<std::string>& arguments, int exit_code,
                    const std::string& message_part) {
  ladder::testing::check_one_error_line(run_chapter_process(kChapter, arguments, kNoGpu), exit_code,
                                        message_part);
}

}  // namespace

TEST_CASE("chapter 12 prints its usage and exit codes", "[cli][batching]") {
  const auto result = run_chapter_process(kChapter, {"--help"});
  INFO("printed: " << result.output);
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("--trace") != std::string::npos);
  CHECK(result.output.find("\nexit codes\n") != std::string::npos);
}

TEST_CASE("chapter 12 refuses a malformed trace file, naming the line", "[cli][batching]") {
  const std::string directory = make_temporary_directory("ladder-cli-trace");
  expect_refusal({"--trace", directory + "/missing.txt"}, 1, "missing.txt");
  write_file(directory + "/header.txt", "not a trace\n0 5 1 2\n");
  expect_refusal({"--trace", directory + "/header.txt"}, 1, "header.txt:1");
  write_file(directory + "/word.txt", "decode-ladder trace 1\n0 5 1 2\n0 5 1 two\n");
  expect_refusal({"--trace", directory + "/word.txt"}, 1, "word.txt:3");
  write_file(directory + "/order.txt", "decode-ladder trace 1\n5 5 1 2\n1 5 1 2\n");
  expect_refusal({"--trace", directory + "/order.txt"}, 1, "order.txt:3");
  write_file(directory + "/empty.txt", "decode-ladder trace 1\n# nothing\n");
  expect_refusal({"--trace", directory + "/empty.txt"}, 1, "empty.txt");
}

TEST_CASE("chapter 12 refuses a request longer than the context", "[cli][batching]") {
  const std::string directory = make_temporary_directory("ladder-cli-trace");
  // GPT-2 small: 1024 positions; 3 prompt tokens + 1100 new need 1102.
  write_file(directory + "/long.txt", "decode-ladder trace 1\n0 4 1 2\n0 1100 1 2 3\n");
  expect_refusal({"--trace", directory + "/long.txt"}, 1, "long.txt:3");
  // The golden model's 128 positions.
  write_file(directory + "/small.txt", "decode-ladder trace 1\n0 120 1 2 3 4 5 6 7 8 9 10\n");
  expect_refusal({"--weights", test_data_path("golden_model"), "--trace", directory + "/small.txt"},
                 1, "context");
  // A generated trace too long for the golden model's context: refused as a bad command line.
  expect_refusal({"--weights", test_data_path("golden_model"), "--prompt-lengths", "4-64"}, 2,
                 "context");
}

TEST_CASE("chapter 12 refuses more slots than the KV-cache budget holds", "[cli][batching]") {
  // The default trace needs 314 positions a slot: 0.345 GiB for 32 slots of GPT-2 small's
  // bf16 cache (2-byte keys and values).
  expect_refusal({"--kv-cache-budget-gib", "0.1"}, 2, "ask for at most 9 slots");
  expect_refusal({"--slots", "0"}, 2, "--slots");
}

TEST_CASE("chapter 12 refuses the batch flags of the other chapters", "[cli][batching]") {
  expect_refusal({"--batch", "32"}, 2, "serves a trace");
  expect_refusal({"--new-tokens", "100"}, 2, "serves a trace");
  expect_refusal({"--requests", "0"}, 2, "--requests");
  expect_refusal({"--prompt-lengths", "9-3"}, 2, "--prompt-lengths");
  expect_refusal({"--output-limits", "16"}, 2, "--output-limits");
}

TEST_CASE("chapter 12 without a visible CUDA device says so in one line", "[cli][batching]") {
  expect_refusal({"--requests", "4"}, 3, "no CUDA device");
}

TEST_CASE("chapter 12 prints its usage for -h and --help, whatever else is on the line",
          "[cli][batching]") {
  for (const std::vector<std::string>& arguments :
       std::vector<std::vector<std::string>>{{"-h"},
                                             {"--slots", "0", "--help"},
                                             {"--no-such-flag", "-h"},
                                             {"--help", "--requests", "zero"}}) {
    const auto result = run_chapter_process(kChapter, arguments, kNoGpu);
    INFO("printed: " << result.output);
    CHECK(result.exit_code == 0);
    CHECK(result.output.find("usage: 12_continuous_batching") != std::string::npos);
    CHECK(result.output.find("error: ") == std::string::npos);
  }
}

TEST_CASE(
    "chapter 12's usage states the context rule of chapters 00-10 and the exit codes it "
    "returns",
    "[cli][batching]") {
  const auto usage = run_chapter_process(kChapter, {"--help"});
  CHECK(usage.output.find("P + N <= n_positions") != std::string::npos);
  // A trace file that breaks the limits is a bad file (1), a generated one a bad command
  // line (2): the usage says which, and the code does it.
  CHECK(usage.output.find("  1  a bad file (a trace file, also one that breaks the limits") !=
        std::string::npos);
  CHECK(usage.output.find("  2  a bad command line: a flag or value, a generated trace that "
                          "breaks the limits") != std::string::npos);
  const std::string directory = make_temporary_directory("ladder-cli-trace");
  // The golden model's 128 positions: 10 prompt + 119 new = 129 > 128 is refused,
  // 10 + 118 = 128 is not (it reaches the GPU check).
  write_file(directory + "/over.txt", "decode-ladder trace 1\n0 119 1 2 3 4 5 6 7 8 9 10\n");
  expect_refusal({"--weights", test_data_path("golden_model"), "--trace", directory + "/over.txt"},
                 1, "10 + max_new_tokens 119 = 129 positions exceed the context of 128");
  write_file(directory + "/fits.txt", "decode-ladder trace 1\n0 118 1 2 3 4 5 6 7 8 9 10\n");
  expect_refusal({"--weights", test_data_path("golden_model"), "--trace", directory + "/fits.txt"},
                 3, "no CUDA device");
  expect_refusal({"--weights", test_data_path("golden_model"), "--prompt-lengths", "10-10",
                  "--output-limits", "16-119"},
                 2, "10 prompt + 119 new tokens = 129, exceeds the model's context of 128");
}

TEST_CASE("chapter 12 checks a generated trace's size before generating it", "[cli][batching]") {
  // 10^7 prompts of 10^6 tokens would be 40 TB: the context refuses it at once.
  expect_refusal({"--requests", "10000000", "--prompt-lengths", "1000000-1000000"}, 2,
                 "exceeds the model's context of 1024");
  // Within the context but 6.4e8 prompt tokens: the size bound refuses it, before drawing.
  expect_refusal({"--requests", "10000000"}, 2,
                 "--requests, --prompt-lengths: up to 640000000 prompt tokens");
}

TEST_CASE("chapter 12 refuses arrivals a replay would wait years for", "[cli][batching]") {
  expect_refusal({"--rate", "1e-6"}, 2, "--rate: 512 requests at 1e-06/s");
  expect_refusal({"--requests", "100000", "--rate", "10"}, 2, "longer than the replay bound");
  const std::string directory = make_temporary_directory("ladder-cli-trace");
  write_file(directory + "/late.txt", "decode-ladder trace 1\n0 5 1 2\n1e300 5 1 2\n");
  expect_refusal({"--trace", directory + "/late.txt"}, 1, "late.txt:3: arrival 1e+300 ms is later");
  write_file(directory + "/hour.txt", "decode-ladder trace 1\n3600001 5 1 2\n");
  expect_refusal({"--trace", directory + "/hour.txt"}, 1, "hour.txt:2");
}

TEST_CASE("chapter 12 takes --model, and refuses it beside --config or --weights",
          "[cli][batching][sizes]") {
  expect_refusal({"--model", "huge"}, 2, "--model");
  expect_refusal({"--model", "medium", "--weights", test_data_path("golden_model")}, 2,
                 "give one of the two");
  // A size it takes gets as far as asking for the GPU (none here: exit 3), or runs.
  const auto result = run_chapter_process(kChapter, {"--model", "medium", "--requests", "2"});
  INFO("printed: " << result.output);
  CHECK((result.exit_code == 0 || result.exit_code == 3));
}
