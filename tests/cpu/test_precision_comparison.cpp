// tests/cpu/test_precision_comparison.cpp - the precision-comparison helper on hand-made
// logits whose agreement, errors and margins are worked out in the comments.
// Run: cpu_tests "[precision]"
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "common/precision_comparison.hpp"

namespace {

// 3 steps x 2 rows x V = 4, as [steps, rows, V].
//   (step, row)  reference           argmax  margin          actual               argmax  error
//   (0, 0)       1 0 0 0             0       1 / 1 = 1       the same             0       0
//   (0, 1)       0 2 1.9 0           1       0.1 / 2 = 0.05  0 1.9 2 0            2       0.1 / 2
//   (1, 0)       4 0 0 3.99          0       0.01 / 4        3.99 0 0 4           3       0.01 / 4
//   (1, 1)       0 0 0 1             3       1               the same             3       0
//   (2, 0)       0 0 2 0             2       1               0 0 1 0              2       1 / 2
//   (2, 1)       0 0 2 0             2       1               0 3 2 0              1       3 / 2
// clang-format off
const std::vector<float> reference_logits = {1, 0, 0, 0,  0, 2, 1.9f, 0,
                                             4, 0, 0, 3.99f,  0, 0, 0, 1,
                                             0, 0, 2, 0,  0, 0, 2, 0};
const std::vector<float> actual_logits = {1, 0, 0, 0,  0, 1.9f, 2, 0,
                                          3.99f, 0, 0, 4,  0, 0, 0, 1,
                                          0, 0, 1, 0,  0, 3, 2, 0};
// clang-format on

}  // namespace

TEST_CASE("relative top-2 margin: gap over the largest magnitude", "[precision]") {
  const std::vector<float> values = {0, 2, 1.5f, -4};
  CHECK(ladder::relative_top2_margin(values.data(), 4) == Approx(0.5 / 4.0));
  const std::vector<float> negatives = {-1, -3};
  CHECK(ladder::relative_top2_margin(negatives.data(), 2) == Approx(2.0 / 3.0));
  const std::vector<float> tie = {3, 1, 3};
  CHECK(ladder::relative_top2_margin(tie.data(), 3) == 0.0);
  const std::vector<float> zeros(3, 0.0f);
  CHECK(ladder::relative_top2_margin(zeros.data(), 3) == 0.0);
  const std::vector<float> with_nan = {1, std::numeric_limits<float>::quiet_NaN()};
  CHECK(std::isinf(ladder::relative_top2_margin(with_nan.data(), 2)));
  CHECK_THROWS_AS(ladder::relative_top2_margin(values.data(), 1), std::invalid_argument);
}

TEST_CASE("precision comparison counts agreement, divergences, errors and small margins",
          "[precision]") {
  const ladder::PrecisionComparison comparison =
      ladder::compare_logit_sequences(actual_logits, reference_logits, 3, 2, 4, 0.01);
  CHECK(comparison.steps == 3);
  CHECK(comparison.rows == 2);
  CHECK(comparison.agreeing_tokens == 3);  // (0, 0), (1, 1), (2, 0)
  CHECK(comparison.token_agreement_rate == Approx(0.5));
  CHECK(comparison.first_divergent_step == 0);  // row 1 at step 0
  CHECK(comparison.first_divergent_step_of_row == std::vector<int>{1, 0});

  // Sorted errors 0, 0, 0.0025, 0.05, 0.5, 1.5; nearest rank: median the 3rd, p90 the 6th.
  REQUIRE(comparison.relative_errors.size() == 6);
  CHECK(comparison.relative_errors.front() == 0.0);
  CHECK(comparison.relative_error.median == Approx(0.0025).epsilon(1e-4));
  CHECK(comparison.relative_error.p90 == Approx(1.5));
  CHECK(comparison.relative_error.p99 == Approx(1.5));
  CHECK(comparison.relative_error.max == Approx(1.5));

  // Only (1, 0) has a margin below 0.01.
  REQUIRE(comparison.small_margins.size() == 1);
  CHECK(comparison.small_margins[0].step == 1);
  CHECK(comparison.small_margins[0].row == 0);
  CHECK(comparison.small_margins[0].margin == Approx(0.0025).epsilon(1e-4));
  // Mismatches at (0, 1) (margin 0.05) and (2, 1) (margin 1) cannot be rounding.
  REQUIRE(comparison.large_margin_mismatches.size() == 2);
  CHECK(comparison.large_margin_mismatches[0].step == 0);
  CHECK(comparison.large_margin_mismatches[1].step == 2);
  // Row 0 first parts at a small margin (explained); row 1 at a margin of 0.05 (not).
  REQUIRE(comparison.unexplained_first_divergences.size() == 1);
  CHECK(comparison.unexplained_first_divergences[0].row == 1);
  CHECK(comparison.unexplained_first_divergences[0].step == 0);

  CHECK_THAT(ladder::describe(comparison),
             Catch::Contains("token agreement 0.5 (3 of 6)") &&
                 Catch::Contains("first divergent step 0 (per row: 1 0)") &&
                 Catch::Contains("max 1.5") && Catch::Contains("; 1 (step, row)"));

  SECTION("a wider margin tolerance explains row 1's divergence too") {
    const ladder::PrecisionComparison wide =
        ladder::compare_logit_sequences(actual_logits, reference_logits, 3, 2, 4, 0.1);
    CHECK(wide.small_margins.size() == 2);
    CHECK(wide.unexplained_first_divergences.empty());
    REQUIRE(wide.large_margin_mismatches.size() == 1);  // (2, 1): after row 1 diverged
    CHECK(wide.large_margin_mismatches[0].row == 1);
  }
}

TEST_CASE("precision comparison of a sequence with itself, of nothing, and of bad sizes",
          "[precision]") {
  const ladder::PrecisionComparison same =
      ladder::compare_logit_sequences(reference_logits, reference_logits, 3, 2, 4, 0.0);
  CHECK(same.token_agreement_rate == 1.0);
  CHECK(same.first_divergent_step == -1);
  CHECK(same.relative_error.max == 0.0);
  CHECK(same.small_margins.empty());  // nothing is below a zero tolerance
  CHECK_THAT(ladder::describe(same), Catch::Contains("first divergent step none"));

  const ladder::PrecisionComparison empty =
      ladder::compare_logit_sequences(std::vector<float>{}, std::vector<float>{}, 0, 2, 4, 0.1);
  CHECK(empty.token_agreement_rate == 1.0);
  CHECK(empty.first_divergent_step_of_row == std::vector<int>{-1, -1});
  CHECK(empty.relative_errors.empty());

  CHECK_THROWS_AS(ladder::compare_logit_sequences(actual_logits, reference_logits, 3, 2, 3, 0.1),
                  std::invalid_argument);
  CHECK_THROWS_AS(ladder::compare_logit_sequences(actual_logits, reference_logits, 3, 2, 4, -1.0),
                  std::invalid_argument);
  CHECK_THROWS_AS(ladder::compare_logit_sequences(actual_logits, reference_logits, -3, -2, 4, 0.1),
                  std::invalid_argument);
}
