// tests/cpu/test_continuous_batching.cpp - the request scheduler, against the CPU reference
// and against a scripted back-end.
//
// The contract: every request's tokens equal what reference::generate() gives for that
// request alone (same prompt, same limit, same EOS rule), whatever its slot, the arrival
// order, its neighbours, the number of slots, the policy (continuous or static batches)
// and the number of steps in flight; no slot is leaked; the queue drains. The reference
// runs in its bf16 mode, the oracle of chapter 12's bf16 step, on both sides: the
// back-end that serves and the request generated alone. The model is the
// small golden GPT-2 (tests/data/golden_model) with an EOS id it really emits, so
// requests stop at EOS as well as at their limits. A scripted back-end checks the
// bookkeeping (steps, times, positions, speculative rows) exactly.
// Run: cpu_tests "[batching]"
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/continuous_batching.hpp"
#include "common/reference.hpp"
#include "common/reference_backend.hpp"
#include "common/request_trace.hpp"
#include "common/serving_options.hpp"
#include "common/serving_report.hpp"
#include "common/serving_statistics.hpp"
#include "common/splitmix64.hpp"
#include "tests/support/golden_data.hpp"

using ladder::BatchingPolicy;
using ladder::Request;
using ladder::SchedulerOptions;
using ladder::ServingResult;
using Tokens = std::vector<std::int32_t>;

namespace {

// Emitted by about half of the golden model's greedy rows from random prompts, at steps
// spread over the first 40: requests stop at EOS and at their limits.
constexpr int emitted_eos = 192;
constexpr double plenty_of_memory = 1e12;

const ladder::Gpt2Weights& golden_weights() {
  static const ladder::Gpt2Weights weights = ladder::testing::load_golden_model();
  return weights;
}

/// The oracle's precision: chapter 12 stores bf16 (the reference's bf16 mode, R1-R7).
constexpr ladder::reference::Precision oracle_precision = ladder::reference::Precision::bf16;

/// The golden model in the oracle's precision, built (rounded) once.
const ladder::reference::Model& golden_model() {
  static const ladder::reference::Model model(golden_weights(), oracle_precision);
  return model;
}

/// Random prompts of 1 .. 24 tokens and limits of 1 .. 40 over the golden vocabulary,
/// all at time 0 or Poisson arrivals at `arrivals_per_second`.
std::vector<Request> small_trace(int requests, std::uint64_t seed, double arrivals_per_second = 0) {
  ladder::TraceOptions options;
  options.requests = requests;
  options.min_prompt_length = 1;
  options.max_prompt_length = 24;
  options.min_new_tokens = 1;
  options.max_new_tokens = 40;
  options.arrivals_per_second = arrivals_per_second;
  options.seed = seed;
  options.vocab_size = golden_weights().config.vocab_size;
  options.excluded_id = golden_weights().config.eos_token_id;
  return ladder::generate_trace(options);
}

/// What the reference generates for `request` alone.
Tokens reference_tokens(const Request& request, int eos) {
  return ladder::reference::generate(golden_model(), {request.prompt}, request.max_new_tokens, eos,
                                     false)
      .tokens;
}

/// A Fisher-Yates shuffle driven by SplitMix64 (std::shuffle differs between libraries).
template <typename T>
std::vector<T> shuffled(std::vector<T> values, std::uint64_t seed) {
  std::uint64_t state = seed;
  for (std::size_t i = values.size(); i > 1; --i) {
    std::swap(values[i - 1], values[ladder::splitmix64_next(state) % i]);
  }
  return values;
}

ServingResult serve_on_reference(const std::vector<Request>& requests, int slots,
                                 const SchedulerOptions& options) {
  ladder::ReferenceBackend backend(golden_weights(), slots, golden_weights().config.n_positions,
                                   plenty_of_memory, oracle_precision);
  ladder::SimulatedClock clock(1.0);
  return ladder::serve_requests(requests, backend, options, clock);
}

/// Every request's output equals the reference's, and the records are consistent.
void check_against_reference(const std::vector<Request>& requests, const ServingResult& result,
                             const std::map<Tokens, Tokens>& expected_of_prompt, int slots) {
  REQUIRE(result.requests.size() == requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    INFO("request " << i << " in slot " << result.requests[i].slot);
    const ladder::RequestRecord& record = result.requests[i];
    CHECK(record.tokens == expected_of_prompt.at(requests[i].prompt));
    CHECK(record.slot >= 0);
    CHECK(record.slot < slots);
    CHECK(record.arrival_step <= record.admitted_step);
    CHECK(record.admitted_step == record.first_token_step);
    CHECK(record.first_token_step <= record.finish_step);
    CHECK(record.admitted_ms >= record.arrival_ms);
    CHECK(record.stopped_at_eos == (record.tokens.back() == emitted_eos));
  }
  for (const ladder::StepRecord& step : result.steps) {
    CHECK(step.busy_slots <= slots);
    CHECK(step.prefills + step.decodes + step.speculative + step.padding <= slots);
  }
}

/// The expected output of each prompt of `requests` (prompts are distinct in these traces).
std::map<Tokens, Tokens> expected_outputs(const std::vector<Request>& requests, int eos) {
  std::map<Tokens, Tokens> expected;
  for (const Request& request : requests) {
    REQUIRE(expected.count(request.prompt) == 0);
    expected[request.prompt] = reference_tokens(request, eos);
  }
  return expected;
}

/// A back-end with no model: a prefill gives 1000 + prompt length, a decode at position p
/// gives 100 + p. Checks the per-slot positions like ReferenceBackend, and logs the plans.
class ScriptedBackend : public ladder::ServingBackend {
 public:
  explicit ScriptedBackend(int slots, int capacity = 64)
      : lengths_(static_cast<std::size_t>(slots), -1), capacity_(capacity) {}
  int slot_count() const override { return static_cast<int>(lengths_.size()); }
  int slot_capacity() const override { return capacity_; }
  void launch_step(const ladder::StepPlan& plan) override {
    Tokens tokens;
    for (const ladder::PrefillRow& row : plan.prefills) {
      lengths_[row.slot] = static_cast<int>(row.prompt.size());
      tokens.push_back(1000 + static_cast<int>(row.prompt.size()));
    }
    for (const ladder::DecodeRow& row : plan.decodes) {
      REQUIRE(row.position == lengths_[row.slot]);
      ++lengths_[row.slot];
      tokens.push_back(100 + row.position);
    }
    plans.push_back(plan);
    launched_.push_back(tokens);
  }
  Tokens finish_step() override {
    REQUIRE(finished_ < launched_.size());
    return launched_[finished_++];
  }

  std::vector<ladder::StepPlan> plans;

 private:
  std::vector<int> lengths_;
  int capacity_;
  std::vector<Tokens> launched_;
  std::size_t finished_ = 0;
};

}  // namespace

// ---------------------------------------------------------------- the contract

TEST_CASE("every request's tokens equal the reference's alone, whatever slots, order and policy",
          "[batching]") {
  const std::vector<Request> trace = small_trace(24, 8);
  const std::map<Tokens, Tokens> expected = expected_outputs(trace, emitted_eos);
  int stopped_at_eos = 0, stopped_at_limit = 0;
  for (const Request& request : trace) {
    const Tokens& tokens = expected.at(request.prompt);
    const bool eos = tokens.back() == emitted_eos;
    stopped_at_eos += eos;
    stopped_at_limit += !eos;
    if (eos) CHECK(std::count(tokens.begin(), tokens.end(), emitted_eos) == 1);
  }
  INFO("EOS stops " << stopped_at_eos << ", limit stops " << stopped_at_limit);
  REQUIRE(stopped_at_eos >= 5);  // both ways of finishing are exercised
  REQUIRE(stopped_at_limit >= 5);

  // Static batches of one slot are continuous batching; three orders for the continuous
  // policy, two for the static one (whose padding rows make it the slower to run).
  for (const int slots : {1, 3, 8}) {
    for (const std::uint64_t order : {0u, 1u, 2u}) {
      const std::vector<Request> requests = order == 0 ? trace : shuffled(trace, order);
      for (const BatchingPolicy policy :
           {BatchingPolicy::continuous, BatchingPolicy::static_batches}) {
        if (policy == BatchingPolicy::static_batches && (slots == 1 || order == 2)) continue;
        for (const int in_flight : {1, 2}) {
          INFO("slots " << slots << ", order " << order << ", static "
                        << (policy == BatchingPolicy::static_batches) << ", in flight "
                        << in_flight);
          const ServingResult result =
              serve_on_reference(requests, slots, {policy, emitted_eos, in_flight});
          check_against_reference(requests, result, expected, slots);
        }
      }
    }
  }
}

TEST_CASE("no slot is leaked and the queue drains", "[batching]") {
  const std::vector<Request> trace = small_trace(20, 9);
  for (const BatchingPolicy policy : {BatchingPolicy::continuous, BatchingPolicy::static_batches}) {
    for (const int in_flight : {1, 2}) {
      ladder::ReferenceBackend backend(golden_weights(), 3, golden_weights().config.n_positions,
                                       plenty_of_memory, oracle_precision);
      ladder::RequestScheduler scheduler(trace, 3, backend.slot_capacity(),
                                         {policy, emitted_eos, in_flight});
      int steps = 0;
      while (!scheduler.drained()) {
        REQUIRE(steps < 2000);
        if (scheduler.steps_in_flight() < in_flight) {
          const ladder::StepPlan plan = scheduler.plan_step(0);
          if (!plan.empty()) {
            backend.launch_step(plan);
            ++steps;
            continue;
          }
        }
        scheduler.finish_step(backend.finish_step(), 0);
      }
      CHECK(scheduler.free_slots() == 3);
      CHECK(scheduler.next_arrival_ms() == std::numeric_limits<double>::infinity());
      CHECK(scheduler.plan_step(0).empty());
      for (const ladder::RequestRecord& record : scheduler.records())
        CHECK(record.finish_step >= 0);
    }
  }
}

TEST_CASE("slots are reused by many short requests among long ones", "[batching]") {
  // Every sixth request is long (prompt 20, limit 40); the others are short (prompt 1 to 3,
  // limit 1 to 3), so with three slots each slot hosts many requests in turn, some of
  // which are prefilled and retired within one step (limit 1).
  std::vector<Request> trace;
  std::uint64_t state = 77;
  for (int i = 0; i < 60; ++i) {
    const bool long_request = i % 6 == 0;
    Request request;
    request.max_new_tokens =
        long_request ? 40 : 1 + static_cast<int>(ladder::splitmix64_next(state) % 3);
    const int length = long_request ? 20 : 1 + static_cast<int>(ladder::splitmix64_next(state) % 3);
    for (int t = 0; t < length; ++t) {
      request.prompt.push_back(static_cast<std::int32_t>(ladder::splitmix64_next(state) % 380));
    }
    trace.push_back(request);
  }
  std::map<Tokens, Tokens> expected;
  for (const Request& request : trace) {
    const Tokens tokens = reference_tokens(request, -1);
    // Equal short prompts may repeat with different limits; key by prompt and limit.
    Tokens key = request.prompt;
    key.push_back(-request.max_new_tokens);
    expected[key] = tokens;
  }
  for (const int in_flight : {1, 2}) {
    const ServingResult result =
        serve_on_reference(trace, 3, {BatchingPolicy::continuous, -1, in_flight});
    std::vector<int> requests_per_slot(3, 0);
    for (std::size_t i = 0; i < trace.size(); ++i) {
      Tokens key = trace[i].prompt;
      key.push_back(-trace[i].max_new_tokens);
      INFO("request " << i);
      CHECK(result.requests[i].tokens == expected.at(key));
      ++requests_per_slot[result.requests[i].slot];
    }
    for (int count : requests_per_slot) CHECK(count >= 10);
    // Continuous batching keeps the slots full while requests wait.
    const ladder::ServingSummary summary = ladder::summarize_serving(result);
    CHECK(summary.padding_rows == 0);
    CHECK(summary.slot_use > 0.8);
  }
}

TEST_CASE("Poisson arrivals: nothing is admitted before it arrives, the idle time is counted",
          "[batching]") {
  // One request per 5 ms against steps of 1 ms: the slots are often idle.
  const std::vector<Request> trace = small_trace(24, 3, 200);
  const std::map<Tokens, Tokens> expected = expected_outputs(trace, emitted_eos);
  for (const BatchingPolicy policy : {BatchingPolicy::continuous, BatchingPolicy::static_batches}) {
    for (const int in_flight : {1, 2}) {
      const ServingResult result = serve_on_reference(trace, 4, {policy, emitted_eos, in_flight});
      check_against_reference(trace, result, expected, 4);
      for (std::size_t i = 0; i < trace.size(); ++i) {
        CHECK(result.requests[i].arrival_ms == trace[i].arrival_ms);
        CHECK(result.requests[i].admitted_ms >= trace[i].arrival_ms);
      }
      CHECK(result.waiting_ms > 0);
      CHECK(result.end_ms >= trace.back().arrival_ms);
    }
  }
}

TEST_CASE("a static batch waits for its longest request and pads the rows that finished",
          "[batching]") {
  const std::vector<Request> trace = small_trace(10, 13);
  const ServingResult result =
      serve_on_reference(trace, 4, {BatchingPolicy::static_batches, -1, 1});
  // Batches of four in arrival order, each admitted at once when the last one is done.
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const std::size_t first = i / 4 * 4;
    CHECK(result.requests[i].admitted_step == result.requests[first].admitted_step);
    CHECK(result.requests[i].slot == static_cast<int>(i % 4));
  }
  // Without EOS every output runs to its limit: the padding is the arithmetic of
  // static_batching_waste, and the steps are the batches' longest limits.
  const ladder::StaticBatchingWaste waste = ladder::static_batching_waste_at_limits(trace, 4);
  const ladder::ServingSummary summary = ladder::summarize_serving(result);
  CHECK(summary.padding_rows == waste.padded_row_steps);
  CHECK(summary.steps == waste.steps);
  CHECK(summary.prefill_rows + summary.decode_rows == waste.useful_row_steps);
  CHECK(summary.output_tokens == waste.useful_row_steps);
}

// ---------------------------------------------------------------- exact bookkeeping

TEST_CASE("steps, times and positions are booked exactly", "[batching]") {
  // Two slots; R1 is done after its prefill, so R2 takes its slot in step 1.
  const std::vector<Request> trace = {{0, 3, {5, 6}}, {0, 1, {7}}, {0, 2, {8, 9, 10}}};
  for (const int in_flight : {1, 2}) {
    INFO("in flight " << in_flight);
    ScriptedBackend backend(2);
    ladder::SimulatedClock clock(10.0);
    const ServingResult result =
        ladder::serve_requests(trace, backend, {BatchingPolicy::continuous, -1, in_flight}, clock);
    REQUIRE(result.steps.size() == 3);
    CHECK(result.end_ms == 30);
    const auto& r0 = result.requests[0];
    CHECK(r0.tokens == Tokens{1002, 102, 103});
    CHECK(r0.slot == 0);
    CHECK(r0.admitted_step == 0);
    CHECK(r0.first_token_ms == 10);
    CHECK(r0.finish_step == 2);
    CHECK(r0.finish_ms == 30);
    CHECK(r0.latency_steps() == 3);
    const auto& r1 = result.requests[1];
    CHECK(r1.tokens == Tokens{1001});
    CHECK(r1.slot == 1);
    CHECK(r1.finish_step == 0);
    CHECK(r1.latency_ms() == 10);
    const auto& r2 = result.requests[2];
    CHECK(r2.tokens == Tokens{1003, 103});
    CHECK(r2.slot == 1);
    CHECK(r2.admitted_step == 1);
    // With two steps in flight, step 1 is planned at time 0, before step 0 is back.
    CHECK(r2.admitted_ms == (in_flight == 1 ? 10 : 0));
    CHECK(r2.first_token_ms == 20);
    CHECK(r2.finish_ms == 30);

    CHECK(result.steps[0].prefills == 2);
    CHECK(result.steps[0].prefill_tokens == 3);
    CHECK(result.steps[0].decodes == 0);
    CHECK(result.steps[1].prefills == 1);
    CHECK(result.steps[1].decodes == 1);
    CHECK(result.steps[2].decodes == 2);
    for (const auto& step : result.steps) CHECK(step.busy_slots == 2);
    REQUIRE(backend.plans.size() == 3);
    CHECK(backend.plans[1].prefills[0].slot == 1);
    CHECK(backend.plans[2].decodes[0].position == 3);  // R0: prompt 2 + 2 tokens - 1
    CHECK(backend.plans[2].decodes[1].position == 3);  // R2: prompt 3 + 1 token - 1
  }
}

TEST_CASE("with two steps in flight, the step after EOS is decoded and dropped", "[batching]") {
  // R0 produces 1001, 101, 102 (= EOS) and would run to 10; R1 waits for the only slot.
  const std::vector<Request> trace = {{0, 10, {7}}, {0, 2, {3, 4}}};
  const SchedulerOptions synchronous{BatchingPolicy::continuous, 102, 1};
  const SchedulerOptions pipelined{BatchingPolicy::continuous, 102, 2};
  ScriptedBackend backend_1(1), backend_2(1);
  ladder::SimulatedClock clock_1(1.0), clock_2(1.0);
  const ServingResult one = ladder::serve_requests(trace, backend_1, synchronous, clock_1);
  const ServingResult two = ladder::serve_requests(trace, backend_2, pipelined, clock_2);
  for (const ServingResult* result : {&one, &two}) {
    CHECK(result->requests[0].tokens == Tokens{1001, 101, 102});
    CHECK(result->requests[0].stopped_at_eos);
    CHECK(result->requests[1].tokens == Tokens{1002, 102});
    CHECK(result->requests[1].stopped_at_eos);  // 102 is EOS, and its limit too
  }
  CHECK(one.requests[1].admitted_step == 3);
  CHECK(two.requests[1].admitted_step == 4);  // EOS known a step late
  const ladder::ServingSummary summary_1 = ladder::summarize_serving(one);
  const ladder::ServingSummary summary_2 = ladder::summarize_serving(two);
  CHECK(summary_1.speculative_rows == 0);
  CHECK(summary_2.speculative_rows == 1);
  CHECK(two.steps[3].speculative == 1);
  CHECK(two.steps[3].decodes == 0);
  CHECK(backend_2.plans[3].decodes[0].position == 3);
}

TEST_CASE("the chapter's trace: the counts docs/continuous_batching.md quotes", "[batching]") {
  // bench/batching_schedule prints these; a change here means updating that page.
  const std::vector<Request> trace = ladder::generate_trace(ladder::TraceOptions{});
  const ladder::StaticBatchingWaste waste = ladder::static_batching_waste_at_limits(trace, 32);
  CHECK(waste.steps == 4021);
  CHECK(waste.useful_row_steps == 68949);
  CHECK(waste.padded_row_steps == 128672 - 68949);
  CHECK(waste.prompt_tokens == 17403);
  CHECK(waste.padded_prompt_tokens == 14917);
  for (const BatchingPolicy policy : {BatchingPolicy::static_batches, BatchingPolicy::continuous}) {
    ScriptedBackend backend(32, 1024);
    ladder::SimulatedClock clock(1.0);
    const ServingResult result = ladder::serve_requests(trace, backend, {policy, -1, 1}, clock);
    const ladder::ServingSummary summary = ladder::summarize_serving(result);
    CHECK(summary.output_tokens == 68949);
    CHECK(summary.steps == (policy == BatchingPolicy::continuous ? 2321 : 4021));
  }
}

// ---------------------------------------------------------------- bad input

TEST_CASE("bad traces, slot counts and plans are refused with one clear line", "[batching]") {
  using Catch::Matchers::Contains;
  const ladder::Gpt2Weights& weights = golden_weights();
  const int context = weights.config.n_positions;  // 128
  ladder::ReferenceBackend backend(weights, 2, context, plenty_of_memory, oracle_precision);
  ladder::SimulatedClock clock(1.0);
  const SchedulerOptions options{BatchingPolicy::continuous, emitted_eos, 1};

  const std::vector<Request> too_long = {{0, 4, {1, 2}}, {0, 100, Tokens(30, 5)}};
  CHECK_THROWS_WITH(ladder::serve_requests(too_long, backend, options, clock),
                    Contains("trace: request 1: prompt length 30 + max_new_tokens 100 = 130 "
                             "positions exceed the context of 128"));
  CHECK_THROWS_WITH(ladder::serve_requests({}, backend, options, clock),
                    Contains("trace: no requests"));
  CHECK_THROWS_WITH(
      ladder::serve_requests({{0, 4, {1}}}, backend, {BatchingPolicy::continuous, -1, 3}, clock),
      Contains("steps_in_flight is 3; use 1 or 2"));

  // More slots than memory allows: 8 slots of 128 positions of this model need
  // 8 * 128 * 2 layers * 2 * 64 * 4 bytes = 1 MiB.
  CHECK(ladder::kv_cache_bytes(weights.config, 8, context, 4) == 1 << 20);
  CHECK_THROWS_WITH(ladder::ReferenceBackend(weights, 8, context, 300000, oracle_precision),
                    Contains("slots: 8 slots of 128 positions need 0.000977 GiB of KV cache but "
                             "0.000279 GiB are available; ask for at most 2 slots"));
  CHECK_THROWS_WITH(
      ladder::ReferenceBackend(weights, 0, context, plenty_of_memory, oracle_precision),
      Contains("slots: 0; serve with at least one"));
  CHECK_THROWS_WITH(
      ladder::ReferenceBackend(weights, 2, context + 1, plenty_of_memory, oracle_precision),
      Contains("slot capacity: 129 positions; give 1 to the model's n_positions"));

  // Plans that break the back-end contract (a scheduler bug) are refused, not run.
  ladder::ReferenceBackend strict(weights, 2, context, plenty_of_memory, oracle_precision);
  CHECK_THROWS_WITH(strict.launch_step({{}, {{0, 0}}}),
                    Contains("decode of slot 0, which was never prefilled"));
  CHECK_THROWS_WITH(strict.launch_step({{{1, {3}}, {1, {4}}}, {}}),
                    Contains("slot 1 appears twice in one step"));
  CHECK_THROWS_WITH(strict.launch_step({{{2, {3}}}, {}}),
                    Contains("prefill of slot 2, but the back-end has 2 slots"));
  strict.launch_step({{{0, {3, 4}}}, {}});
  CHECK(strict.finish_step().size() == 1);
  CHECK_THROWS_WITH(strict.launch_step({{}, {{0, 5}}}),
                    Contains("decode of slot 0 at position 5, but its cache holds 2 of 128"));
  CHECK_THROWS_WITH(strict.finish_step(), Contains("no step was launched"));
  // What every back-end checks (check_step_plan; chapter 12's GPU back-end too).
  CHECK_THROWS_WITH(ladder::check_step_plan({{}, {{1, 128}}}, 2, context),
                    Contains("decode of slot 1 at position 128, outside its 128 positions"));
  CHECK_THROWS_WITH(ladder::check_step_plan({{}, {{0, -1}}}, 2, context),
                    Contains("at position -1"));
  CHECK_THROWS_WITH(
      ladder::check_step_plan({{{0, std::vector<std::int32_t>(129, 1)}}, {}}, 2, context),
      Contains("prefill of 129 tokens into a slot of 128 positions"));
  CHECK_THROWS_WITH(ladder::check_step_plan({{{0, {}}}, {}}, 2, context),
                    Contains("prefill of 0 tokens"));
  CHECK_THROWS_WITH(ladder::check_step_plan({{{0, {1}}}, {{0, 3}}}, 2, context),
                    Contains("slot 0 appears twice in one step"));
  CHECK_THROWS_WITH(ladder::check_step_plan({{}, {{-1, 0}}}, 2, context),
                    Contains("decode of slot -1, but the back-end has 2 slots"));
  CHECK_NOTHROW(ladder::check_step_plan({{{1, {1, 2}}}, {{0, 127}}}, 2, context));

  ladder::RequestScheduler scheduler({{0, 4, {1}}}, 1, context, options);
  scheduler.plan_step(0);
  CHECK_THROWS_WITH(scheduler.plan_step(0), Contains("1 steps are in flight; finish one first"));
  CHECK_THROWS_WITH(scheduler.finish_step({1, 2}, 1),
                    Contains("the back-end returned 2 tokens for step 0 of 1 rows"));
}

// ---------------------------------------------------------------- the serving command line

namespace {

ladder::ServingOptions parse_serving(std::vector<std::string> words) {
  words.insert(words.begin(), "12_continuous_batching");
  std::vector<const char*> argv;
  for (const std::string& word : words) argv.push_back(word.c_str());
  return ladder::parse_serving_options(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE(
    "the serving command line: help wins, and a generated trace is checked before it is "
    "drawn",
    "[batching]") {
  using Catch::Matchers::Contains;
  CHECK(parse_serving({"-h"}).help);
  CHECK(parse_serving({"--slots", "0", "--help"}).help);
  CHECK(parse_serving({"--bogus", "-h"}).help);
  CHECK_THROWS_WITH(parse_serving({"--slots", "0"}), Contains("--slots"));

  // 10^7 prompts of 10^6 tokens (40 TB): refused by the context, at once.
  CHECK_THROWS_WITH(
      ladder::make_serving_plan(
          parse_serving({"--requests", "10000000", "--prompt-lengths", "1000000-1000000"}), 4),
      Contains("exceeds the model's context of 1024"));
  // Within the context, 6.4e8 prompt tokens: refused by the size bound before drawing.
  CHECK_THROWS_WITH(ladder::make_serving_plan(parse_serving({"--requests", "10000000"}), 4),
                    Contains("--requests, --prompt-lengths: up to 640000000 prompt tokens"));
  ladder::TraceOptions huge;
  huge.requests = 10000000;
  CHECK_THROWS_WITH(ladder::generate_trace(huge), Contains("exceed the 67108864"));
  // A rate that would replay for years.
  CHECK_THROWS_WITH(ladder::make_serving_plan(parse_serving({"--rate", "1e-6"}), 4),
                    Contains("--rate: 512 requests at 1e-06/s"));
  // One rule for the context with chapters 00-10: P + N <= n_positions.
  const ladder::ServingPlan plan = ladder::make_serving_plan(
      parse_serving({"--requests", "8", "--prompt-lengths", "4-4", "--output-limits", "16-16"}), 2);
  CHECK(plan.capacity == 20);
  CHECK(plan.trace.size() == 8);
}

TEST_CASE("a replay never sleeps past the bound, nor for a wait that would overflow",
          "[batching]") {
  using Catch::Matchers::Contains;
  ladder::SteadyClock clock;
  CHECK_THROWS_WITH(clock.wait_until_ms(1e300), Contains("longer than the replay bound"));
  CHECK_THROWS_WITH(clock.wait_until_ms(std::numeric_limits<double>::quiet_NaN()),
                    Contains("replay bound"));
  CHECK_THROWS_WITH(
      ladder::validate_trace({{0, 4, {1}}, {4e6, 4, {1}}}, {0, 0, ladder::kMaxArrivalMs}),
      Contains("trace: request 1: arrival 4e+06 ms is later than the 3600000 ms a replay waits"));
}

TEST_CASE("the serving report's JSON comes from the common writer, strings escaped", "[batching]") {
  const std::vector<Request> trace = small_trace(6, 3);
  ladder::ServingPlan plan;
  plan.trace = trace;
  plan.capacity = golden_weights().config.n_positions;
  plan.trace_description = "my \"trace\"\\file\n.txt";
  ladder::ServedConfiguration served;
  served.name = "continuous \"x\"";
  served.scheduler = {BatchingPolicy::continuous, emitted_eos, 2};
  served.result = serve_on_reference(trace, 2, served.scheduler);
  served.summary = ladder::summarize_serving(served.result);
  served.timeline.steps = 10;
  served.timeline.busy_ms = 9;
  served.timeline.idle_ms = 1;
  served.timeline.span_ms = 10;

  const nlohmann::json json = nlohmann::json::parse(
      ladder::format_serving_json("12_continuous_batching", "bf16", "GPU \"0\"", plan, {served}));
  CHECK(json.at("trace") == plan.trace_description);
  CHECK(json.at("device") == "GPU \"0\"");
  CHECK(json.at("precision") == "bf16");
  CHECK(json.at("requests") == trace.size());
  const nlohmann::json& row = json.at("configurations").at(0);
  CHECK(row.at("name") == served.name);
  CHECK(row.at("policy") == "continuous");
  CHECK(row.at("gpu_idle_fraction").get<double>() == Approx(0.1));
  CHECK(row.at("output_tokens") == served.summary.output_tokens);
  CHECK(row.at("busy_slots").size() >= 200);
  CHECK_FALSE(row.contains("cupti_kernels_per_step"));
  const std::string table = ladder::format_serving_table({served});
  CHECK(table.find("| continuous \"x\" |") != std::string::npos);
  const std::string dump = ladder::format_request_dump({served});
  CHECK(std::count(dump.begin(), dump.end(), '\n') == static_cast<long>(trace.size()));
}
