// tests/cpu/test_benchmark.cpp - statistics, token hashes, the HBM floor, and the traced
// columns of the table and the JSON.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <string>

#include "common/benchmark.hpp"

TEST_CASE("summaries match hand-computed values", "[benchmark]") {
  const ladder::Summary odd = ladder::summarize({3.0, 1.0, 2.0});
  CHECK(odd.mean == Approx(2.0));
  CHECK(odd.median == Approx(2.0));
  CHECK(odd.min == Approx(1.0));
  CHECK(odd.max == Approx(3.0));
  CHECK(odd.std == Approx(std::sqrt(2.0 / 3.0)));
  CHECK(ladder::summarize({4.0, 1.0, 2.0, 3.0}).median == Approx(2.5));
  CHECK_THROWS(ladder::summarize({}));
}

TEST_CASE("token hashes tell outputs apart and are stable", "[benchmark]") {
  const auto a = ladder::hash_tokens({1, 2, 3});
  CHECK(a == ladder::hash_tokens({1, 2, 3}));
  CHECK(a != ladder::hash_tokens({1, 3, 2}));
  CHECK(a != ladder::hash_tokens({1, 2, 3, 0}));
  CHECK(ladder::hash_string(0xABCull) == "0000000000000abc");
  // FNV-1a of no bytes is the offset basis.
  CHECK(ladder::hash_tokens({}) == 0xCBF29CE484222325ull);
}

TEST_CASE("the HBM floor counts weights, tied head, cache and logits per step", "[benchmark]") {
  ladder::Gpt2Config config;  // GPT-2 small
  // The embedding tables are looked up (a few rows); the token table is read whole once
  // more as the LM head: every parameter but the position table.
  const double weights = static_cast<double>(config.parameter_count()) - 1024.0 * 768;
  // One step, B = 1, prompt of 1: the cache holds one position of 12 layers x (k, v).
  const double one = ladder::floor_bytes(config, 1, 1, 1);
  CHECK(one == Approx(4.0 * (weights + 2.0 * 12 * 768 + 50257.0)));
  // The SPEC's anchor: about 14.5 ms at 4.27 TB/s for B = 32, N = 100 from BOS.
  const double seconds = ladder::floor_bytes(config, 32, 1, 100) / 4.27e12;
  CHECK(seconds == Approx(0.0145).epsilon(0.02));
  CHECK(ladder::floor_bytes(config, 32, 1, 400) / 4.27e12 == Approx(0.091).epsilon(0.02));
  CHECK(ladder::floor_bytes(config, 1, 1, 100) / 4.27e12 == Approx(0.0117).epsilon(0.02));
}

TEST_CASE("the bf16 floor halves weights and cache, the logits stay fp32", "[benchmark][bf16]") {
  ladder::Gpt2Config config;
  const double weights = static_cast<double>(config.parameter_count()) - 1024.0 * 768;
  const double one = ladder::floor_bytes(config, 1, 1, 1, /*value_bytes=*/2);
  CHECK(one == Approx(2.0 * (weights + 2.0 * 12 * 768) + 4.0 * 50257.0));
  // B = 32, N = 100 from BOS: a little over half the fp32 floor (the logits do not halve).
  const double ratio =
      ladder::floor_bytes(config, 32, 1, 100, 2) / ladder::floor_bytes(config, 32, 1, 100);
  CHECK(ratio > 0.5);
  CHECK(ratio < 0.52);
}

TEST_CASE("the table and the JSON carry graph launches and host time per step", "[benchmark]") {
  ladder::ReportHeader header;
  header.chapter = "07_cuda_graphs";
  ladder::BenchmarkRow traced;
  traced.batch = 32;
  traced.new_tokens = traced.steps = 100;
  traced.seconds = {0.09};
  traced.time = ladder::summarize(traced.seconds);
  traced.kernels_per_step = 137.0;
  traced.graph_launches_per_step = 0.99;
  traced.host_seconds_per_step = 6.5e-6;
  traced.host_calls_per_step = {{"cudaGraphLaunch", 0.99, 5.25e-6, false},
                                {"cudaStreamSynchronize", 1.0, 8.0e-4, true}};
  ladder::BenchmarkRow untraced = traced;  // CUPTI was held by a profiler: "-" and null
  untraced.kernels_per_step = untraced.graph_launches_per_step = -1;
  untraced.host_seconds_per_step = -1;

  const std::string table = ladder::format_table(header, {traced, untraced});
  CHECK(table.find("graphs/") != std::string::npos);
  CHECK(table.find("host us") != std::string::npos);
  CHECK(table.find("   1.0 ") != std::string::npos);  // 0.99 graph launches per step
  CHECK(table.find("   6.5 ") != std::string::npos);  // 6.5 us of host time per step

  const nlohmann::json json =
      nlohmann::json::parse(ladder::format_json(header, {traced, untraced}));
  const nlohmann::json& rows = json.at("configurations");
  CHECK(rows.at(0).at("graph_launches_per_step").get<double>() == Approx(0.99));
  CHECK(rows.at(0).at("host_api_s_per_step").get<double>() == Approx(6.5e-6));
  CHECK(rows.at(1).at("graph_launches_per_step").is_null());
  CHECK(rows.at(1).at("host_api_s_per_step").is_null());
  // The calls the host time is made of, in the row's order; none for an untraced row.
  const nlohmann::json& calls = rows.at(0).at("host_api_calls_per_step");
  REQUIRE(calls.size() == 2);
  CHECK(calls.at(0).at("call") == "cudaGraphLaunch");
  CHECK(calls.at(0).at("calls").get<double>() == Approx(0.99));
  CHECK(calls.at(0).at("s").get<double>() == Approx(5.25e-6));
  CHECK_FALSE(calls.at(0).at("waits_for_the_gpu").get<bool>());
  CHECK(calls.at(1).at("call") == "cudaStreamSynchronize");
  CHECK(calls.at(1).at("waits_for_the_gpu").get<bool>());
  CHECK(rows.at(1).at("host_api_calls_per_step").is_null());
}

TEST_CASE("the --compact table fits 100 columns and divides by the previous run where known",
          "[benchmark]") {
  ladder::ReportHeader header;
  header.chapter = "10_mixed_precision";
  header.precision = "bf16";
  header.prompts = "random, length 8";
  header.weights = std::string(200, 'w');  // the full table's title; not the compact one's
  std::vector<ladder::BenchmarkRow> rows;
  for (const int batch : {1, 32}) {
    ladder::BenchmarkRow row;
    row.batch = batch;
    row.new_tokens = row.steps = 100;
    row.seconds = {0.040};
    row.time = ladder::summarize(row.seconds);
    row.floor_seconds = batch == 1 ? 0.010 : -1;  // no floor measured: "-"
    row.token_hash = "0123456789abcdef";
    rows.push_back(row);
  }
  // The previous chapter ran B = 1 only, at 0.5 ms a step; this one takes 0.4.
  const ladder::StepTimes previous = ladder::parse_step_times(
      R"({"configurations": [{"batch": 1, "new_tokens": 100, "ms_per_step": 0.5},
                             {"batch": 8, "new_tokens": 100, "ms_per_step": 0.7}]})",
      "previous.json");
  const std::string table = ladder::format_compact_table(header, rows, previous);
  INFO(table);
  std::size_t start = 0;
  int lines = 0;
  for (std::size_t end; (end = table.find('\n', start)) != std::string::npos; start = end + 1) {
    CHECK(end - start <= 100);
    ++lines;
  }
  CHECK(lines == 4);  // title, heading, two rows
  CHECK(table.rfind("10_mixed_precision | bf16 | prompts: random, length 8\n", 0) == 0);
  CHECK(table.find("    B     N   ms/step   tokens/s  x floor  x prev  tokens hash\n") !=
        std::string::npos);
  // B = 1: 0.400 ms/step, 2500 tokens/s, 4.00x its floor, 0.80x the previous run.
  CHECK(table.find("    1   100     0.400       2500     4.00    0.80  0123456789abcdef\n") !=
        std::string::npos);
  // B = 32: no floor, not in the previous run.
  CHECK(table.find("   32   100     0.400      80000        -       -  0123456789abcdef\n") !=
        std::string::npos);
  // The previous run's file must be a chapter's --json.
  CHECK_THROWS_WITH(ladder::parse_step_times("[1, 2]", "x.json"),
                    Catch::Matchers::Contains("x.json: no \"configurations\" array"));
  CHECK_THROWS_WITH(ladder::parse_step_times("{", "x.json"),
                    Catch::Matchers::Contains("x.json: not JSON"));
}
