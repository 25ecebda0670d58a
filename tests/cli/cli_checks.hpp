// tests/cli/cli_checks.hpp - what every command-line test checks of a chapter's refusal:
// the exit code, one line, "error: " and the words that name the problem.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>

#include "tests/support/chapter_process.hpp"

namespace ladder::testing {

constexpr int kRuntimeError = 1;  ///< a bad file, or a run that failed
constexpr int kUsageError = 2;    ///< a bad command line
constexpr int kNoCudaDevice = 3;
/// Hides every GPU, so a chapter that accepted its input would say "no CUDA device": the
/// tests run the same on CI and on a GPU machine.
inline const std::string kNoGpu = "CUDA_VISIBLE_DEVICES=-1";

/// The process exited with `exit_code` after printing one line, an error naming
/// `message_part`.
inline void check_one_error_line(const ProcessResult& result, int exit_code,
                                 const std::string& message_part) {
  INFO("printed: " << result.output);
  CHECK(result.exit_code == exit_code);
  CHECK(std::count(result.output.begin(), result.output.end(), '\n') == 1);
  CHECK(result.output.find("error: ") != std::string::npos);
  CHECK(result.output.find(message_part) != std::string::npos);
}

inline void write_file(const std::string& path, const std::string& contents) {
  std::ofstream file(path, std::ios::binary);
  file << contents;
}

}  // namespace ladder::testing
