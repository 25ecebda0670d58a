// tests/cpu/test_benchmark.cpp - statistics, token hashes and the HBM floor.
#include <catch2/catch.hpp>

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
