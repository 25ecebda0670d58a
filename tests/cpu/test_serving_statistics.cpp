// tests/cpu/test_serving_statistics.cpp - the serving summary and static batching's padding,
// on hand-made inputs whose answers are worked out in the comments.
// Run: cpu_tests "[batching]"
#include <catch2/catch.hpp>

#include <vector>

#include "common/continuous_batching.hpp"
#include "common/serving_statistics.hpp"

using Catch::Matchers::Contains;

TEST_CASE("percentiles by nearest rank", "[batching]") {
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);  // unsorted on purpose
  CHECK(ladder::percentile(hundred, 50) == 50);
  CHECK(ladder::percentile(hundred, 99) == 99);
  CHECK(ladder::percentile(hundred, 100) == 100);
  CHECK(ladder::percentile(hundred, 0.5) == 1);
  CHECK(ladder::percentile({7}, 99) == 7);
  // Four values: p50 is the 2nd (ceil(0.5 * 4)), p99 the 4th.
  CHECK(ladder::percentile({4, 1, 3, 2}, 50) == 2);
  CHECK(ladder::percentile({4, 1, 3, 2}, 99) == 4);
  CHECK_THROWS_WITH(ladder::percentile({}, 50), Contains("empty sample"));
  CHECK_THROWS_WITH(ladder::percentile({1}, 0), Contains("give p in (0, 100]"));
  CHECK_THROWS_WITH(ladder::percentile({1}, 101), Contains("give p in (0, 100]"));
}

TEST_CASE("a serving summary: tokens/s, latencies, slot use and idle time", "[batching]") {
  // Two slots, four steps of 10 ms after 5 ms of waiting for the first arrival:
  //   step 0 (5-15 ms):  prefill A (3 tokens), busy 1
  //   step 1 (15-25 ms): prefill B (2 tokens), decode A, busy 2
  //   step 2 (25-35 ms): decode A, decode B, busy 2
  //   step 3 (35-45 ms): decode B, plus one speculative row of A, busy 2
  // A: 3 tokens, arrives 5, first token 15, done 35 (steps 0..2).
  // B: 3 tokens, arrives 12, first token 25, done 45 (steps 1..3).
  ladder::ServingResult result;
  result.slots = 2;
  result.start_ms = 0;
  result.end_ms = 45;
  result.waiting_ms = 5;
  auto request = [](int first_token, double arrival, double first, double finish, int arrival_step,
                    int finish_step) {
    ladder::RequestRecord record;
    record.tokens = {first_token, first_token + 1, first_token + 2};
    record.arrival_ms = arrival;
    record.first_token_ms = first;
    record.finish_ms = finish;
    record.arrival_step = arrival_step;
    record.finish_step = finish_step;
    return record;
  };
  result.requests = {request(1, 5, 15, 35, 0, 2), request(4, 12, 25, 45, 1, 3)};
  auto step = [](double start, int prefills, int decodes, int speculative, int busy) {
    ladder::StepRecord record;
    record.planned_ms = start;
    record.finished_ms = start + 10;
    record.prefills = prefills;
    record.prefill_tokens = prefills * 3;
    record.decodes = decodes;
    record.speculative = speculative;
    record.busy_slots = busy;
    return record;
  };
  result.steps = {step(5, 1, 0, 0, 1), step(15, 1, 1, 0, 2), step(25, 0, 2, 0, 2),
                  step(35, 0, 1, 1, 2)};

  const ladder::ServingSummary summary = ladder::summarize_serving(result);
  CHECK(summary.requests == 2);
  CHECK(summary.steps == 4);
  CHECK(summary.output_tokens == 6);
  CHECK(summary.elapsed_ms == 45);
  CHECK(summary.output_tokens_per_second == Approx(6 / 0.045));
  // Latencies 30 and 33 ms: p50 = 30, p99 = 33; first tokens after 10 and 13 ms.
  CHECK(summary.latency_p50_ms == 30);
  CHECK(summary.latency_p99_ms == 33);
  CHECK(summary.first_token_p50_ms == 10);
  CHECK(summary.first_token_p99_ms == 13);
  CHECK(summary.latency_p50_steps == 3);
  CHECK(summary.latency_p99_steps == 3);
  CHECK(summary.prefill_rows == 2);
  CHECK(summary.decode_rows == 4);
  CHECK(summary.speculative_rows == 1);
  CHECK(summary.padding_rows == 0);
  CHECK(summary.slot_use == Approx(6.0 / 8.0));           // 6 kept tokens in 2 x 4 slot-steps
  CHECK(summary.mean_busy_slots == Approx(70.0 / 40.0));  // (1 + 2 + 2 + 2) x 10 ms over 40 ms
  CHECK(summary.waiting_ms == 5);
  CHECK(summary.idle_fraction == Approx(5.0 / 45.0));

  CHECK_THROWS_WITH(ladder::summarize_serving(ladder::ServingResult{}), Contains("no requests"));

  // Windows of 10 ms over 45 ms: [0, 10) holds 5 ms of step 0 (1 slot) -> 0.5;
  // [10, 20) 5 ms of step 0 and 5 of step 1 (2 slots) -> 1.5; then 2, 2, and the last,
  // 5 ms long, 2.
  const std::vector<double> busy = ladder::busy_slots_over_time(result, 10);
  REQUIRE(busy.size() == 5);
  CHECK(busy[0] == Approx(0.5));
  CHECK(busy[1] == Approx(1.5));
  CHECK(busy[2] == Approx(2));
  CHECK(busy[3] == Approx(2));
  CHECK(busy[4] == Approx(2));
  CHECK_THROWS_WITH(ladder::busy_slots_over_time(result, 0), Contains("window must be > 0"));

  // Two steps in flight: step 1 planned at 15 ms as before, but step 2 planned at 15 ms
  // too, before step 1 was back; it still runs from 25 ms, after step 1.
  result.steps[2].planned_ms = 15;
  CHECK(ladder::summarize_serving(result).mean_busy_slots == Approx(70.0 / 40.0));
}

TEST_CASE("static batching pads prompts and outputs to each batch's longest", "[batching]") {
  // Batch 0: prompts 2, 4 -> padded to 4 (2 padding tokens); outputs 5, 1 -> 5 steps,
  // 10 row-steps of which 6 useful. Batch 1: prompt 3, output 3 -> no padding.
  const ladder::StaticBatchingWaste waste = ladder::static_batching_waste({2, 4, 3}, {5, 1, 3}, 2);
  CHECK(waste.batches == 2);
  CHECK(waste.steps == 8);
  CHECK(waste.useful_row_steps == 9);
  CHECK(waste.padded_row_steps == 4);
  CHECK(waste.prompt_tokens == 9);
  CHECK(waste.padded_prompt_tokens == 2);
  CHECK(waste.decode_use() == Approx(9.0 / 13.0));

  const ladder::StaticBatchingWaste one_row = ladder::static_batching_waste({2, 4}, {5, 1}, 1);
  CHECK(one_row.padded_row_steps == 0);
  CHECK(one_row.decode_use() == 1);

  CHECK_THROWS_WITH(ladder::static_batching_waste({1}, {1, 2}, 2),
                    Contains("1 prompt lengths but 2 output lengths"));
  CHECK_THROWS_WITH(ladder::static_batching_waste({1, 0}, {1, 2}, 2),
                    Contains("request 1 has a length below 1"));
  CHECK_THROWS_WITH(ladder::static_batching_waste({1}, {1}, 0), Contains("batch must be >= 1"));
}
