// tests/cpu/test_chapter_exit_codes.cpp - how a chapter's errors map to its exit codes
// (exit_code_reporting_chapter_errors): a launcher's refused check is the chapter's own
// invariant broken (1), never "bad command line" (2), though it is a std::invalid_argument.
// Run: cpu_tests "[exit]"
#include <catch2/catch.hpp>

#include <stdexcept>

#include "common/chapter_runner.hpp"
#include "common/cli.hpp"
#include "kernels/launch_checks.hpp"

TEST_CASE("a refused launch check exits 1, a bad command line 2", "[exit]") {
  using ladder::exit_code_reporting_chapter_errors;
  CHECK(exit_code_reporting_chapter_errors("test", [] { return 0; }) == ladder::kExitSuccess);
  CHECK(exit_code_reporting_chapter_errors("test", []() -> int {
          ladder::launch_checks::require(false, "launch_something", "x must be aligned");
          return 0;
        }) == ladder::kExitRuntimeError);
  CHECK(exit_code_reporting_chapter_errors("test", []() -> int {
          throw std::invalid_argument("--batch: 'x' is not a whole number");
        }) == ladder::kExitUsageError);
  CHECK(exit_code_reporting_chapter_errors("test", []() -> int {
          throw std::runtime_error("config.json: cannot open");
        }) == ladder::kExitRuntimeError);
  // Code that catches std::invalid_argument still catches a launch check.
  CHECK_THROWS_AS(ladder::launch_checks::fail("launch_something", "bad"), std::invalid_argument);
}
