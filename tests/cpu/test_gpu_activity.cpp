// tests/cpu/test_gpu_activity.cpp - the timeline arithmetic behind the traced columns
// (busy and idle time, the idle time between steps, host time inside API calls) and
// behind --step-timeline, on hand-made intervals: no GPU and no CUPTI needed.
#include <catch2/catch.hpp>

#include <cstdint>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/chapter_runner.hpp"
#include "common/gpu_activity.hpp"

namespace {

using ladder::ActivityInterval;

constexpr double kNanosecond = 1e-9;

}  // namespace

TEST_CASE("an empty trace has an empty timeline", "[gpu activity]") {
  const ladder::ActivityTimeline timeline = ladder::summarize_timeline({});
  CHECK(timeline.span_seconds == 0);
  CHECK(timeline.busy_seconds == 0);
  CHECK(timeline.step_openings == 0);
  CHECK(timeline.idle_between_steps_seconds == 0);
  CHECK(ladder::union_seconds({}) == 0);
}

TEST_CASE("busy time is the union of overlapping intervals, in any order", "[gpu activity]") {
  // Two streams: [100, 200) and [150, 300) overlap, [400, 450) stands alone, and
  // [410, 420) lies inside it. Busy = 200 + 50 ns over a span of 350 ns.
  const std::vector<ActivityInterval> intervals = {
      {400, 450, false}, {150, 300, false}, {410, 420, false}, {100, 200, false}};
  const ladder::ActivityTimeline timeline = ladder::summarize_timeline(intervals);
  CHECK(timeline.span_seconds == Approx(350 * kNanosecond));
  CHECK(timeline.busy_seconds == Approx(250 * kNanosecond));
  CHECK(timeline.idle_seconds() == Approx(100 * kNanosecond));
  CHECK(timeline.step_openings == 0);
  CHECK(timeline.idle_between_steps_seconds == 0);
}

TEST_CASE("the idle time between steps is the gap before each step but the first",
          "[gpu activity]") {
  // Step 1: [0, 100) opens, [110, 200). Step 2 opens at 230: 30 ns after the latest end.
  // Step 3 opens at 400, but a kernel of step 2 on the other stream, [250, 420), still
  // runs: no gap. Step 4 opens at 500 after a copy ending at 480: 20 ns.
  const std::vector<ActivityInterval> intervals = {
      {0, 100, true},   {110, 200, false}, {230, 240, true}, {250, 420, false},
      {400, 410, true}, {470, 480, false}, {500, 600, true}};
  const ladder::ActivityTimeline timeline = ladder::summarize_timeline(intervals);
  CHECK(timeline.step_openings == 4);
  CHECK(timeline.idle_between_steps_seconds == Approx(50 * kNanosecond));
  // All idle time: 100-110, 200-230, 240-250, 420-470, 480-500 = 10 + 30 + 10 + 50 + 20.
  CHECK(timeline.idle_seconds() == Approx(120 * kNanosecond));
  CHECK(timeline.span_seconds == Approx(600 * kNanosecond));
}

TEST_CASE("host time inside API calls counts nested and overlapping calls once", "[gpu activity]") {
  // A runtime call [0, 100) with a driver call [20, 60) inside it, another call
  // [90, 150) overlapping its end, and one alone [200, 210): 150 + 10 ns.
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> calls = {
      {200, 210}, {20, 60}, {0, 100}, {90, 150}};
  CHECK(ladder::union_seconds(calls) == Approx(160 * kNanosecond));
}

TEST_CASE("per-step trace columns divide by the steps launched, a speculative one included",
          "[gpu activity]") {
  // A pipelined decoder that stopped after 100 kept steps had launched 101: the trace
  // holds the 101st step's ten kernels and its idle time too.
  ladder::GpuActivitySummary activity;
  activity.kernels = 101 * 10;
  activity.copies = 101 * 2;
  activity.memsets = 0;
  activity.timeline.span_seconds = 101 * 3e-4;
  activity.timeline.busy_seconds = 101 * 2e-4;
  activity.timeline.step_openings = 101;
  activity.timeline.idle_between_steps_seconds = 100 * 5e-6;
  ladder::GenerationOutput pipelined;
  pipelined.steps = 100;
  pipelined.steps_launched = 101;
  ladder::BenchmarkRow row;
  ladder::fill_traced_columns(activity, pipelined, row);
  CHECK(row.kernels_per_step == Approx(10.0));
  CHECK(row.copies_per_step == Approx(2.0));
  CHECK(row.gpu_idle_per_step == Approx(1e-4));
  CHECK(row.gpu_idle_between_steps == Approx(5e-6));

  // A decoder that launches exactly the steps it keeps leaves steps_launched at 0.
  activity.kernels = 100 * 10;
  ladder::GenerationOutput in_order;
  in_order.steps = 100;
  ladder::fill_traced_columns(activity, in_order, row);
  CHECK(row.kernels_per_step == Approx(10.0));
}

TEST_CASE("a CUDA call's name loses CUPTI's version suffix, and nothing else", "[gpu activity]") {
  CHECK(ladder::call_name_without_version("cudaGraphLaunch_v10000") == "cudaGraphLaunch");
  CHECK(ladder::call_name_without_version("cudaLaunchKernelExC_v11060") == "cudaLaunchKernelExC");
  CHECK(ladder::call_name_without_version("cuLaunchKernel") == "cuLaunchKernel");  // driver
  CHECK(ladder::call_name_without_version("cuMemMap_v2") == "cuMemMap");
  CHECK(ladder::call_name_without_version("cudaFoo_v") == "cudaFoo_v");        // no digits
  CHECK(ladder::call_name_without_version("cuda_v1x") == "cuda_v1x");          // not only digits
  CHECK(ladder::call_name_without_version("").empty());
}

TEST_CASE("a step's timeline runs from its opening kernel to the next, in order of start",
          "[gpu activity]") {
  // Three steps, each opened by an "embedding" kernel, delivered out of order. Step 1
  // (0-based) opens at 1000 ns: a product [1100, 1400); a programmatic dependent that
  // starts at 1300, while the product runs, and ends at 1600; a kernel [1450, 1550) that
  // ends within the dependent's time. Step 2 opens at 2000.
  const std::vector<ladder::KernelRun> kernels = {
      {"argmax", 1450, 1550},          {"embedding_kernel", 2000, 2100}, {"matmul", 1100, 1400},
      {"embedding_kernel", 0, 100},    {"layernorm", 1300, 1600},        {"matmul", 200, 300},
      {"embedding_kernel", 1000, 1050}};
  const std::vector<ladder::TimelineRow> rows = ladder::step_timeline(kernels, "embedding", 1);
  REQUIRE(rows.size() == 4);
  const std::string names[] = {"embedding_kernel", "matmul", "layernorm", "argmax"};
  const double starts[] = {0.0, 0.1, 0.3, 0.45};  // µs after 1000 ns
  const double ends[] = {0.05, 0.4, 0.6, 0.55};
  // Each end past the latest end before it: 50 ns, 1400 - 1050, 1600 - 1400, 0.
  const double adds[] = {0.05, 0.35, 0.2, 0.0};
  double span = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    CHECK(rows[i].name == names[i]);
    CHECK(rows[i].start_us == Approx(starts[i]));
    CHECK(rows[i].end_us == Approx(ends[i]));
    CHECK(rows[i].took_us == Approx(ends[i] - starts[i]));
    CHECK(rows[i].adds_us == Approx(adds[i]).margin(1e-12));
    span += rows[i].adds_us;
  }
  CHECK(span == Approx(0.6));  // first start to last end: the adds sum to the step's span

  // The last step runs to the last kernel; past it, and without a marker, nothing.
  const std::vector<ladder::TimelineRow> last = ladder::step_timeline(kernels, "embedding", 2);
  REQUIRE(last.size() == 1);
  CHECK(last[0].took_us == Approx(0.1));
  CHECK(ladder::step_timeline(kernels, "embedding", 3).empty());
  CHECK(ladder::step_timeline(kernels, "embedding", -1).empty());
  CHECK(ladder::step_timeline(kernels, "", 0).empty());
  CHECK(ladder::step_timeline({}, "embedding", 0).empty());
}

TEST_CASE("a step timeline is printed in the format scripts/ab_ratios.py reads",
          "[gpu activity]") {
  // ab_ratios.py's TIMELINE_ROW, and its header test: "start us" and "adds us" on a line.
  const std::regex row(R"(^ +(-?[\d.]+) +(-?[\d.]+) +(-?[\d.]+) +(-?[\d.]+)  (\S.*)$)");
  const std::vector<ladder::TimelineRow> rows = {
      {"embedding_kernel<4>", 0.0, 3.04, 3.04, 3.04},
      {"decode_matmul_fp32_kernel<64, true>", 1.5, 123456.78, 123455.28, 123453.74}};
  std::istringstream text(ladder::format_step_timeline(rows));
  std::string line;
  REQUIRE(std::getline(text, line));
  CHECK((line.find("start us") != std::string::npos && line.find("adds us") != std::string::npos));
  for (const ladder::TimelineRow& expected : rows) {
    REQUIRE(std::getline(text, line));
    std::smatch match;
    REQUIRE(std::regex_match(line, match, row));
    CHECK(std::stod(match[1]) == Approx(expected.start_us).margin(0.05));
    CHECK(std::stod(match[4]) == Approx(expected.adds_us).margin(0.05));
    CHECK(match[5] == expected.name);
  }
  CHECK_FALSE(std::getline(text, line));
}
