// tests/cli/test_bad_input.cpp - every chapter refuses bad input with one clear line.
//
// Each case runs every chapter executable exactly as a reader would and expects a
// single line on the output, naming the problem, and the documented exit code:
// 2 for a bad command line, 1 for a bad file, 3 for no CUDA device (every chapter
// but the CPU prologue needs one). None needs a GPU: the input is checked before the
// device is touched.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/cli_checks.hpp"
#include "tests/support/chapter_process.hpp"

namespace {

using ladder::testing::chapter_names;
using ladder::testing::make_temporary_directory;
using ladder::testing::run_chapter_process;
using ladder::testing::test_data_path;

using ladder::testing::kNoCudaDevice;
using ladder::testing::kRuntimeError;
using ladder::testing::kUsageError;
using ladder::testing::write_file;

/// Runs every chapter with `arguments` and checks the exit code and the one line.
void expect_refusal(const std::vector<std::string>& arguments, int exit_code,
                    const std::string& message_part, const std::string& environment = "",
                    const std::vector<std::string>& chapters = chapter_names()) {
  for (const std::string& chapter : chapters) {
    INFO("chapter " << chapter);
    ladder::testing::check_one_error_line(run_chapter_process(chapter, arguments, environment),
                                          exit_code, message_part);
  }
}

const std::string kSmallModel = test_data_path("golden_model");

}  // namespace

TEST_CASE("every chapter exists and prints its usage", "[cli]") {
  REQUIRE_FALSE(chapter_names().empty());
  for (const std::string& chapter : chapter_names()) {
    const auto result = run_chapter_process(chapter, {"--help"});
    INFO(chapter << " printed: " << result.output);
    CHECK(result.exit_code == 0);
    CHECK(result.output.find("--new-tokens") != std::string::npos);
  }
}

TEST_CASE("the --help text lists the exit codes the tests below expect", "[cli]") {
  for (const std::string& chapter : chapter_names()) {
    const auto result = run_chapter_process(chapter, {"--help"});
    INFO(chapter << " printed: " << result.output);
    CHECK(result.output.find("\nexit codes\n") != std::string::npos);
    CHECK(result.output.find("  0  the table was printed") != std::string::npos);
    CHECK(result.output.find("  " + std::to_string(kRuntimeError) + "  a bad file") !=
          std::string::npos);
    CHECK(result.output.find("  " + std::to_string(kUsageError) + "  a bad command line") !=
          std::string::npos);
    CHECK(result.output.find("  " + std::to_string(kNoCudaDevice) + "  no CUDA device") !=
          std::string::npos);
  }
}

TEST_CASE("bad command-line values are refused", "[cli]") {
  expect_refusal({"--batch", "0"}, kUsageError, "--batch");
  expect_refusal({"--batch", "-3"}, kUsageError, "--batch");
  expect_refusal({"--batch", "eight"}, kUsageError, "--batch");
  expect_refusal({"--new-tokens", "0"}, kUsageError, "--new-tokens");
  expect_refusal({"--new-tokens", "1024"}, kUsageError, "1024 positions");
  expect_refusal({"--runs", "0"}, kUsageError, "--runs");
  expect_refusal({"--no-such-flag"}, kUsageError, "unknown flag");
  expect_refusal({"--batch"}, kUsageError, "missing value");
  expect_refusal({"--eos", "60000"}, kUsageError, "--eos");
  expect_refusal({"--prompt", "hello"}, kUsageError, "tokenizer");
  expect_refusal({"--prompt", "x", "--random-prompt-length", "3"}, kUsageError, "at most one");
}

TEST_CASE("new tokens beyond the model's positions count the prompt", "[cli]") {
  expect_refusal({"--weights", kSmallModel, "--random-prompt-length", "100", "--new-tokens", "29"},
                 kUsageError, "positions");
}

TEST_CASE("missing and corrupt checkpoint files are refused", "[cli]") {
  const std::string directory = make_temporary_directory("ladder-cli");
  expect_refusal({"--weights", directory + "/nowhere"}, kRuntimeError, "config.json");

  write_file(directory + "/config.json", "{\"model_type\": \"gpt2\", \"n_layer\": ");
  expect_refusal({"--weights", directory}, kRuntimeError, "config.json");

  write_file(directory + "/config.json", "{\"model_type\": \"llama\"}");
  expect_refusal({"--weights", directory}, kRuntimeError, "llama");

  std::ifstream config(kSmallModel + "/config.json");
  std::string text((std::istreambuf_iterator<char>(config)), std::istreambuf_iterator<char>());
  write_file(directory + "/config.json", text);
  expect_refusal({"--weights", directory}, kRuntimeError, "model.safetensors");

  write_file(directory + "/model.safetensors", std::string("\x10\x00\x00", 3));
  expect_refusal({"--weights", directory}, kRuntimeError, "model.safetensors");

  std::ifstream original(kSmallModel + "/model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(original)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 1000);
  write_file(directory + "/model.safetensors", bytes.substr(0, bytes.size() / 2));
  expect_refusal({"--weights", directory}, kRuntimeError, "model.safetensors");
}

TEST_CASE("a config the kernels cannot run is refused as a bad file, before the GPU check",
          "[cli]") {
  // CUDA_VISIBLE_DEVICES=-1: were the config accepted, the chapter would say "no CUDA
  // device" (exit 3) instead; on a GPU machine it would fail inside the generation.
  const std::string directory = make_temporary_directory("ladder-cli");
  const std::string config = directory + "/config.json";
  const std::string no_gpu = "CUDA_VISIBLE_DEVICES=-1";
  write_file(config, R"({"n_embd": 512, "n_head": 2, "n_layer": 1})");
  expect_refusal({"--config", config}, kRuntimeError, "head size n_embd / n_head = 256", no_gpu);
  write_file(config, R"({"n_embd": 2304, "n_head": 24, "n_layer": 1})");
  expect_refusal({"--config", config}, kRuntimeError, "n_embd 2304 exceeds 2048", no_gpu);
  write_file(config, R"({"layer_norm_epsilon": 1e39})");
  expect_refusal({"--config", config}, kRuntimeError, "not a finite float", no_gpu);
  write_file(config, R"({"layer_norm_epsilon": -1e-5})");
  expect_refusal({"--config", config}, kRuntimeError, "layer_norm_epsilon must be positive",
                 no_gpu);
}

TEST_CASE("unreadable and malformed prompt files are refused", "[cli]") {
  const std::string directory = make_temporary_directory("ladder-cli");
  expect_refusal({"--prompt-file", directory + "/missing.txt"}, kRuntimeError,
                 "cannot read prompt file");
  write_file(directory + "/ragged.txt", "1 2 3\n4 5\n");
  expect_refusal({"--prompt-file", directory + "/ragged.txt"}, kRuntimeError, "equal length");
  write_file(directory + "/words.txt", "1 two 3\n");
  expect_refusal({"--prompt-file", directory + "/words.txt"}, kRuntimeError, "not a token id");
  write_file(directory + "/outside.txt", "1 2 50257\n");
  expect_refusal({"--prompt-file", directory + "/outside.txt"}, kRuntimeError, "vocabulary");
  write_file(directory + "/empty.txt", "\n\n");
  expect_refusal({"--prompt-file", directory + "/empty.txt"}, kRuntimeError, "no token ids");
}

TEST_CASE("without a visible CUDA device a chapter says so in one line", "[cli]") {
  // CUDA_VISIBLE_DEVICES=-1 hides every GPU, so this runs the same on CI and on a GPU machine.
  // The prologue needs no GPU: tests/cli/test_cpu_reference_chapter.cpp runs it so.
  expect_refusal({"--new-tokens", "4"}, kNoCudaDevice, "no CUDA device", "CUDA_VISIBLE_DEVICES=-1",
                 ladder::testing::gpu_chapter_names());
}
