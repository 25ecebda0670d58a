// tests/cpu/test_request_trace.cpp - the request trace: generated from a seed, the same on
// every machine, and its file format, read back exactly and refused when malformed.
// Run: cpu_tests "[batching]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/request_trace.hpp"
#include "common/tokenizer.hpp"
#include "tests/support/chapter_process.hpp"
#include "tests/support/safetensors_writer.hpp"

using ladder::Request;
using ladder::TraceOptions;

namespace {

std::vector<Request> parse(const std::string& text, ladder::TraceLimits limits = {}) {
  std::istringstream input(text);
  return ladder::parse_trace(input, "trace.txt", limits);
}

}  // namespace

TEST_CASE("the default trace is the chapter's workload, the same numbers on every machine",
          "[batching]") {
  const std::vector<Request> trace = ladder::generate_trace(TraceOptions{});
  REQUIRE(trace.size() == 512);
  for (const Request& request : trace) {
    CHECK(request.arrival_ms == 0);
    CHECK(request.prompt.size() >= 4);
    CHECK(request.prompt.size() <= 64);
    CHECK(request.max_new_tokens >= 16);
    CHECK(request.max_new_tokens <= 256);
    for (std::int32_t token : request.prompt) {
      CHECK(token >= 0);
      CHECK(token < 50256);  // the EOS id is excluded
    }
  }
  const auto [shortest, longest] = std::minmax_element(
      trace.begin(), trace.end(),
      [](const Request& a, const Request& b) { return a.max_new_tokens < b.max_new_tokens; });
  CHECK(shortest->max_new_tokens < 24);  // 512 draws cover the range
  CHECK(longest->max_new_tokens > 248);
  // SplitMix64 from seed 0: pinned, so a change to the generator shows up here.
  CHECK(trace[0].prompt.size() == 50);
  CHECK(trace[0].max_new_tokens == 21);
  CHECK(std::vector<std::int32_t>(trace[0].prompt.begin(), trace[0].prompt.begin() + 4) ==
        std::vector<std::int32_t>{42023, 22480, 28893, 16134});
  CHECK(trace[2].max_new_tokens == 199);

  TraceOptions other;
  other.seed = 1;
  CHECK(ladder::generate_trace(other) != trace);
  CHECK(ladder::generate_trace(TraceOptions{}) == trace);
}

TEST_CASE("Poisson arrivals keep the prompts and limits and space requests at the given rate",
          "[batching]") {
  TraceOptions options;
  options.arrivals_per_second = 100;
  const std::vector<Request> poisson = ladder::generate_trace(options);
  const std::vector<Request> at_zero = ladder::generate_trace(TraceOptions{});
  REQUIRE(poisson.size() == at_zero.size());
  for (std::size_t i = 0; i < poisson.size(); ++i) {
    CHECK(poisson[i].prompt == at_zero[i].prompt);
    CHECK(poisson[i].max_new_tokens == at_zero[i].max_new_tokens);
    if (i > 0) CHECK(poisson[i].arrival_ms >= poisson[i - 1].arrival_ms);
    // Whole microseconds.
    CHECK(poisson[i].arrival_ms * 1000 == Approx(std::round(poisson[i].arrival_ms * 1000)));
  }
  // 512 gaps of mean 10 ms: the mean is within 15% (about 3.4 standard errors).
  const double mean_gap = poisson.back().arrival_ms / static_cast<double>(poisson.size());
  CHECK(mean_gap == Approx(10.0).epsilon(0.15));
  CHECK(poisson[0].arrival_ms == Approx(8.058));
}

TEST_CASE("text prompts go through the BPE tokenizer", "[batching]") {
  const auto tokenizer =
      ladder::Gpt2Tokenizer::from_directory(ladder::testing::test_data_path("tokenizer"));
  const std::vector<std::string> texts = {"Hello world", "The quick brown fox",
                                          "continuous batching"};
  TraceOptions options;
  options.requests = 20;
  const std::vector<Request> trace = ladder::generate_text_trace(options, texts, tokenizer);
  REQUIRE(trace.size() == 20);
  int texts_seen = 0;
  for (const std::string& text : texts) {
    const std::vector<std::int32_t> ids = tokenizer.encode(text);
    texts_seen += std::any_of(trace.begin(), trace.end(),
                              [&](const Request& request) { return request.prompt == ids; });
  }
  CHECK(texts_seen == 3);  // 20 draws of 3 texts: each appears
  for (const Request& request : trace) {
    CHECK(std::any_of(texts.begin(), texts.end(), [&](const std::string& text) {
      return tokenizer.encode(text) == request.prompt;
    }));
  }
  CHECK_THROWS_WITH(ladder::generate_text_trace(options, {"fine", ""}, tokenizer),
                    Catch::Matchers::Contains("text 1 encodes to no tokens"));
}

TEST_CASE("a trace round-trips through its file format exactly", "[batching]") {
  TraceOptions options;
  options.requests = 40;
  options.arrivals_per_second = 333;
  std::vector<Request> trace = ladder::generate_trace(options);
  trace[3].arrival_ms = trace[2].arrival_ms;                // equal arrivals are allowed
  trace.back().arrival_ms = trace.back().arrival_ms + 0.1;  // not whole microseconds
  const ladder::testing::ScratchDirectory scratch("ladder-trace");
  const std::string path = scratch.file("trace.txt");
  ladder::write_trace(path, trace);
  CHECK(ladder::read_trace(path, {50257, 1024}) == trace);

  std::ifstream file(path);
  std::string header;
  std::getline(file, header);
  CHECK(header == "decode-ladder trace 1");
}

TEST_CASE("the reader accepts comments, blank lines, tabs and Windows line ends", "[batching]") {
  const std::vector<Request> trace = parse(
      "decode-ladder trace 1\r\n# a comment\n\n  0\t5 1 2 3\r\n   # indented comment\n"
      "2.5 1 7\n");
  REQUIRE(trace.size() == 2);
  CHECK(trace[0] == Request{0, 5, {1, 2, 3}});
  CHECK(trace[1] == Request{2.5, 1, {7}});
}

TEST_CASE("a malformed trace is refused with one line naming the line", "[batching]") {
  using Catch::Matchers::Contains;
  const std::string header = "decode-ladder trace 1\n";
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "trace.txt: empty"},
      {"0 5 1 2\n", "trace.txt:1: the first line must be 'decode-ladder trace 1'"},
      {"decode-ladder trace 2\n0 5 1\n", "trace.txt:1: the first line must be"},
      {header, "trace.txt: holds no requests"},
      {header + "# only a comment\n", "trace.txt: holds no requests"},
      {header + "0 5\n", "trace.txt:2: a request needs arrival_ms, max_new_tokens and at least"},
      {header + "0 5 1\nsoon 5 1\n", "trace.txt:3: arrival_ms 'soon' is not a number"},
      {header + "nan 5 1\n", "trace.txt:2: the arrival time must be a finite number"},
      {header + "-1 5 1\n", "trace.txt:2: the arrival time must be a finite number"},
      {header + "5 5 1\n4 5 1\n",
       "trace.txt:3: arrival 4 ms is earlier than the request before it (5 ms)"},
      {header + "0 5.5 1\n", "trace.txt:2: max_new_tokens '5.5' is not an integer"},
      {header + "0 0 1\n", "trace.txt:2: max_new_tokens must be an integer >= 1"},
      {header + "0 5 1 x2\n", "trace.txt:2: 'x2' is not a token id"},
      {header + "0 5 1 -3\n", "trace.txt:2: token id -3 is outside the vocabulary"},
      {header + "0 5 1 100\n", "trace.txt:2: token id 100 is outside the vocabulary [0, 100)"},
      {header + "0 5 1\n0 59 1 2 3 4 5\n",
       "trace.txt:3: prompt length 5 + max_new_tokens 59 = 64 positions exceed the context of "
       "63"},
      {header + "0 5 99999999999 1\n", "trace.txt:2: '99999999999' is not a token id"},
  };
  for (const Case& bad : cases) {
    INFO(bad.text);
    try {
      parse(bad.text, {100, 63});
      FAIL("accepted");
    } catch (const std::runtime_error& error) {
      const std::string message = error.what();
      CHECK_THAT(message, Contains(bad.message));
      CHECK(message.find('\n') == std::string::npos);
    }
  }
  CHECK_THROWS_WITH(ladder::read_trace("/nonexistent/trace.txt", {}),
                    Contains("cannot read trace file '/nonexistent/trace.txt'"));
}

TEST_CASE("the writer and the generator refuse what the reader would", "[batching]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(ladder::write_trace("/nonexistent/x.txt", {Request{0, 0, {1}}}),
                    Contains("trace: request 0: max_new_tokens must be an integer >= 1"));
  CHECK_THROWS_WITH(ladder::write_trace("/nonexistent/x.txt", {}), Contains("no requests"));
  CHECK_THROWS_WITH(ladder::validate_trace({Request{1, 2, {3}}, Request{0, 2, {3}}}, {}),
                    Contains("trace: request 1: arrival"));
  TraceOptions options;
  options.min_prompt_length = 0;
  CHECK_THROWS_WITH(ladder::generate_trace(options), Contains("prompt length range [0, 64]"));
  options = TraceOptions{};
  options.max_new_tokens = 8;
  CHECK_THROWS_WITH(ladder::generate_trace(options), Contains("new-token limit range [16, 8]"));
  options = TraceOptions{};
  options.arrivals_per_second = -1;
  CHECK_THROWS_WITH(ladder::generate_trace(options), Contains("arrival rate"));
}
