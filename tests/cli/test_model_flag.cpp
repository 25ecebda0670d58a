// tests/cli/test_model_flag.cpp - --model small|medium|large|xl on every chapter: a name
// outside the four, or --model beside --config or --weights, is one line and exit 2 before
// any file is read or any weight is made; each of the four sizes passes every check a
// chapter makes before the GPU (the config, the bf16 kernels' head size) and reaches the
// device query, which CUDA_VISIBLE_DEVICES=-1 answers with "no CUDA device" (exit 3), so
// this runs on any machine and never draws XL's 1.5 billion random weights.
// Run: cli_tests "[sizes]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/cli/cli_checks.hpp"
#include "tests/support/chapter_process.hpp"

namespace {

using ladder::testing::run_chapter_process;

using ladder::testing::kNoCudaDevice;
using ladder::testing::kNoGpu;
using ladder::testing::kUsageError;
constexpr auto expect_one_line = ladder::testing::check_one_error_line;

}  // namespace

TEST_CASE("the --model flag refuses a name outside GPT-2's four sizes in one line",
          "[cli][sizes]") {
  for (const std::string& chapter : ladder::testing::chapter_names()) {
    INFO(chapter);
    expect_one_line(run_chapter_process(chapter, {"--model", "gpt2-xxl"}, kNoGpu), kUsageError,
                    "--model: 'gpt2-xxl' is not a GPT-2 size: choose one of small, medium, "
                    "large, xl");
  }
}

TEST_CASE("the --model flag with --config or --weights is refused before either is read",
          "[cli][sizes]") {
  // Neither path exists: the refusal comes from the command line alone.
  for (const std::string& chapter : ladder::testing::chapter_names()) {
    INFO(chapter);
    expect_one_line(run_chapter_process(
                        chapter, {"--model", "xl", "--config", "/nonexistent/config.json"}, kNoGpu),
                    kUsageError,
                    "--model: a GPT-2 size with random weights; --config names the model itself");
    expect_one_line(run_chapter_process(
                        chapter, {"--weights", "/nonexistent/gpt2", "--model", "medium"}, kNoGpu),
                    kUsageError, "--weights names the model itself");
  }
}

TEST_CASE("every GPU chapter accepts GPT-2's four sizes up to the device query", "[cli][sizes]") {
  const std::vector<std::string> chapters = ladder::testing::gpu_chapter_names();
  REQUIRE_FALSE(chapters.empty());
  for (const std::string& chapter : chapters) {
    for (const char* model : {"small", "medium", "large", "xl"}) {
      INFO(chapter << " --model " << model);
      expect_one_line(
          run_chapter_process(chapter, {"--model", model, "--batch", "1,32", "--new-tokens", "100"},
                              kNoGpu),
          kNoCudaDevice, "no CUDA device");
    }
  }
}

TEST_CASE("the --model flag's context is GPT-2's 1024 positions", "[cli][sizes]") {
  // Every chapter, the host prologue included, reads the size's config before it checks
  // the workload against it (and before it makes a weight).
  for (const std::string& chapter : ladder::testing::chapter_names()) {
    INFO(chapter);
    expect_one_line(
        run_chapter_process(
            chapter, {"--model", "large", "--random-prompt-length", "1000", "--new-tokens", "25"},
            kNoGpu),
        kUsageError, "exceeds the model's 1024 positions");
  }
}
