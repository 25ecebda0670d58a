// tests/cpu/test_run_options.cpp - the shared chapter command line.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "common/cli.hpp"

namespace {

ladder::RunOptions parse(std::vector<std::string> words) {
  words.insert(words.begin(), "chapter");
  std::vector<const char*> argv;
  for (const std::string& word : words) argv.push_back(word.c_str());
  return ladder::parse_run_options(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("defaults are the seed's workload", "[cli]") {
  const ladder::RunOptions options = parse({});
  CHECK(options.batch_sizes == std::vector<int>{32});
  CHECK(options.new_token_counts == std::vector<int>{100, 200, 400});
  CHECK(options.runs >= 5);
  CHECK(options.warmup_runs >= 1);
  CHECK_FALSE(options.allow_tf32);
}

TEST_CASE("lists and flags parse", "[cli]") {
  const ladder::RunOptions options =
      parse({"--batch", "1,8,32,64", "--new-tokens", "7", "--runs", "9", "--warmup", "0", "--seed",
             "42", "--eos", "3", "--tf32", "--random-prompt-length", "5", "--quiet"});
  CHECK(options.batch_sizes == std::vector<int>{1, 8, 32, 64});
  CHECK(options.new_token_counts == std::vector<int>{7});
  CHECK(options.runs == 9);
  CHECK(options.warmup_runs == 0);
  CHECK(options.seed == 42);
  REQUIRE(options.eos_token_id.has_value());
  CHECK(*options.eos_token_id == 3);
  CHECK(options.allow_tf32);
  CHECK(options.random_prompt_length == 5);
  CHECK(options.quiet);
}

TEST_CASE("bad values name their flag", "[cli]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(parse({"--batch", "0"}), Contains("--batch"));
  CHECK_THROWS_WITH(parse({"--batch", "4,"}), Contains("--batch"));
  CHECK_THROWS_WITH(parse({"--batch", "4,x"}), Contains("'x'"));
  CHECK_THROWS_WITH(parse({"--new-tokens", "-1"}), Contains("--new-tokens"));
  CHECK_THROWS_WITH(parse({"--runs", "99999999999999999999"}), Contains("--runs"));
  CHECK_THROWS_WITH(parse({"--warmup"}), Contains("missing value"));
  CHECK_THROWS_WITH(parse({"--bogus"}), Contains("unknown flag '--bogus'"));
  CHECK_THROWS_WITH(parse({"--prompt", "a", "--prompt-file", "f"}), Contains("at most one"));
  CHECK_THROWS_WITH(parse({"--weights", "d", "--config", "c"}), Contains("--config"));
}

TEST_CASE("the --compact and --compare parse; --compare needs --compact and a chapter's JSON",
          "[cli]") {
  using Catch::Matchers::Contains;
  CHECK_FALSE(parse({}).compact);
  CHECK(parse({"--compact"}).compact);
  CHECK_THROWS_WITH(parse({"--compare", "previous.json"}), Contains("--compare: only with"));
  CHECK_THROWS_WITH(parse({"--compact", "--compare", "/nonexistent/previous.json"}),
                    Contains("/nonexistent/previous.json: cannot be read"));
}
