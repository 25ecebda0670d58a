// tests/cpu/test_prompts.cpp - prompt batches and the token-id file format.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/prompts.hpp"
#include "tests/support/chapter_process.hpp"

TEST_CASE("BOS prompts hold one BOS per row", "[prompts]") {
  const ladder::PromptBatch prompts = ladder::bos_prompts(3, 50256);
  CHECK(prompts.batch == 3);
  CHECK(prompts.length == 1);
  CHECK(prompts.tokens == std::vector<std::int32_t>{50256, 50256, 50256});
}

TEST_CASE("position-major prompts put each position's B tokens side by side", "[prompts]") {
  const auto rows = ladder::prompts_from_rows({{1, 2, 3}, {4, 5, 6}}, 2);
  CHECK(rows.position_major() == std::vector<std::int32_t>{1, 4, 2, 5, 3, 6});
  CHECK(ladder::bos_prompts(3, 7).position_major() == std::vector<std::int32_t>{7, 7, 7});
}

TEST_CASE("a file's rows must be one per batch row or exactly one", "[prompts]") {
  using ladder::row_count_problem;
  CHECK(row_count_problem(1, 1).empty());
  CHECK(row_count_problem(1, 32).empty());
  CHECK(row_count_problem(32, 32).empty());
  CHECK(row_count_problem(2, 32) ==
        "holds 2 rows; --batch 32 needs 32 rows, or exactly one (repeated for every row)");
  CHECK_FALSE(row_count_problem(33, 32).empty());
  CHECK_FALSE(row_count_problem(4, 1).empty());
}

TEST_CASE("random prompts are deterministic, in range and avoid the excluded id", "[prompts]") {
  const auto first = ladder::random_prompts(16, 9, 11, 10, 1234);
  const auto again = ladder::random_prompts(16, 9, 11, 10, 1234);
  const auto other = ladder::random_prompts(16, 9, 11, 10, 1235);
  CHECK(first.tokens == again.tokens);
  CHECK(first.tokens != other.tokens);
  std::set<std::int32_t> seen(first.tokens.begin(), first.tokens.end());
  CHECK(*seen.begin() >= 0);
  CHECK(*seen.rbegin() <= 9);
  CHECK(seen.count(10) == 0);
  CHECK(seen.size() == 10);  // 144 draws over 10 ids: all appear
  // Rows differ from each other (per-row prompts, not one prompt repeated).
  const auto rows = first.rows();
  CHECK(rows[0] != rows[1]);
}

TEST_CASE("a batch of more ids than an int counts is refused before anything is allocated",
          "[prompts]") {
  using Catch::Matchers::Contains;
  // 65536 x 32768 = 2^31 and 46341^2 = 2^31 + 4633: one past what an int holds, each
  // would overflow an int product (to a negative count or a small positive one).
  CHECK_THROWS_WITH(ladder::random_prompts(65536, 32768, 50257, 50256, 0),
                    Contains("65536 prompts of 32768 tokens are 2147483648 ids"));
  CHECK_THROWS_AS(ladder::random_prompts(46341, 46341, 50257, 50256, 0), std::invalid_argument);
  CHECK_THROWS_AS(ladder::repeated_prompt(std::vector<std::int32_t>(32768, 1), 65536),
                  std::invalid_argument);
  CHECK_THROWS_AS(ladder::prompts_from_rows({std::vector<std::int32_t>(46341, 1)}, 46341),
                  std::invalid_argument);
}

TEST_CASE("token rows round-trip through the file format and fill a batch", "[prompts]") {
  const std::string directory = ladder::testing::make_temporary_directory("ladder-prompts");
  const std::string path = directory + "/rows.txt";
  const std::vector<std::int32_t> tokens{1, 2, 3, 4, 5, 6};
  ladder::write_token_rows(path, tokens, 2, 3);
  const auto rows = ladder::read_token_rows(path, 7);
  REQUIRE(rows.size() == 2);
  CHECK(rows[1] == std::vector<std::int32_t>{4, 5, 6});
  const ladder::PromptBatch batch = ladder::prompts_from_rows(rows, 2);
  CHECK(batch.length == 3);
  CHECK(batch.tokens == tokens);
  // One row is repeated for every row of the batch.
  const ladder::PromptBatch repeated = ladder::prompts_from_rows({rows[1]}, 3);
  CHECK(repeated.tokens == std::vector<std::int32_t>{4, 5, 6, 4, 5, 6, 4, 5, 6});
  using Catch::Matchers::Contains;
  // Two rows for a batch of 5 (or of 1) are neither one per row nor one for all: refused,
  // not cycled or cut.
  CHECK_THROWS_WITH(ladder::prompts_from_rows(rows, 5),
                    Contains("holds 2 rows; --batch 5 needs 5 rows, or exactly one"));
  CHECK_THROWS_AS(ladder::prompts_from_rows(rows, 1), std::invalid_argument);
  CHECK_THROWS_WITH(ladder::read_token_rows(path, 6), Contains("rows.txt:2: token id 6"));
  std::filesystem::remove_all(directory);
}
