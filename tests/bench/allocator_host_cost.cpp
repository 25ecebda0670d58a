// tests/bench/allocator_host_cost.cpp - the host time the caching and the expandable
// allocator spend inside allocate() and deallocate() per decode step of chapters 02 and 03,
// measured on the CPU with fake memory sources.
//
// Chapters 02 (common/caching_allocator.cpp) and 03 (common/expandable_allocator.cpp) differ
// only in the allocator, and each decode step makes 112 allocations. This program replays
// the chapters' allocation sequence call for call (tests/support/chapter_allocations.hpp)
// on the fake sources of tests/support/fake_device.hpp, for both allocators and each
// configuration of the committed results, as the chapter runner runs one: from an empty
// cache, a 32 MiB cuBLASLt workspace held throughout, one warm-up generation, then R timed
// ones. A TimedAllocator (tests/support/timed_allocator.hpp) reads the host clock around
// every allocate() and deallocate(). It prints, per configuration: the allocator calls a
// step makes, host ns per call (median of the runs), host us per step inside the allocator
// (median, min and max of the runs) and the ratio expandable / caching. A step is one
// generated token; the prefill is the first of N.
//
// What the time leaves out: the cost of the real sources' driver and runtime calls (the
// fakes that stand in for them cost a few ns). The fakes count them instead (the second
// table, per step of the timed runs), so the output says whether any happens once the
// cache is warm. One of them is in every allocate() of both
// allocators: is_capturing(), which the real sources answer with cudaStreamIsCapturing.
//
// Run:  build/current/bench/allocator_host_cost [--runs R] [--json FILE]
//   --runs R      timed generations per configuration (5 unless given)
//   --json FILE   also write every figure printed, and each run's, as JSON
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/benchmark.hpp"
#include "common/caching_allocator.hpp"
#include "common/cli.hpp"
#include "common/expandable_allocator.hpp"
#include "tests/support/chapter_allocations.hpp"
#include "tests/support/fake_device.hpp"
#include "tests/support/timed_allocator.hpp"

namespace {

using namespace ladder;
using namespace ladder::testing;

struct Options {
  int runs = 5;
  std::string json_output;
};

constexpr const char* kUsage = "usage: allocator_host_cost [--runs R] [--json FILE]";

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--runs") {
      options.runs = static_cast<int>(number_after_flag(argc, argv, i, 1, 1000, true));
    } else if (flag == "--json") {
      if (i + 1 >= argc) throw std::invalid_argument("--json: needs a file name");
      options.json_output = argv[++i];
    } else {
      throw std::invalid_argument("unknown flag '" + flag + "'; " + kUsage);
    }
  }
  return options;
}

// ---------------------------------------------------------------- measuring

/// One allocator on one configuration: each timed run's host time, and what the fake
/// sources were asked over all timed runs.
struct ConfigurationCost {
  int batch = 0;
  int new_tokens = 0;
  std::vector<AllocatorHostTime> runs;
  FakeSourceCalls source_calls;
  int synchronizations = 0;

  double calls_per_step() const { return static_cast<double>(runs.front().calls()) / new_tokens; }
  Summary nanoseconds_per_call() const {
    std::vector<double> values;
    for (const AllocatorHostTime& run : runs)
      values.push_back(static_cast<double>(run.time().count()) / static_cast<double>(run.calls()));
    return summarize(values);
  }
  Summary microseconds_per_step() const {
    std::vector<double> values;
    for (const AllocatorHostTime& run : runs)
      values.push_back(static_cast<double>(run.time().count()) * 1e-3 / new_tokens);
    return summarize(values);
  }
  /// A source count per step of the timed runs.
  double per_step(std::uint64_t count) const {
    return static_cast<double>(count) / (static_cast<double>(runs.size()) * new_tokens);
  }
};

/// One allocator on a fake device of its own, timed, holding the decoder's cuBLASLt
/// workspace throughout as the chapters' StepContext does; the configurations run on it in
/// turn, as in one chapter process.
struct TimedFakeAllocator {
  FakeDevice device;  // first: the allocator keeps a reference to it
  std::unique_ptr<DeviceAllocator> allocator;
  std::unique_ptr<TimedAllocator> timed;
  DeviceBuffer workspace;
  std::vector<ConfigurationCost> costs;
};

template <typename Allocator>
std::unique_ptr<TimedFakeAllocator> make_timed_fake_allocator() {
  auto bench = std::make_unique<TimedFakeAllocator>();
  bench->device.total_bytes = 140 * gibibytes;  // an H200's memory
  bench->allocator = make_fake_allocator<Allocator>(bench->device);
  bench->timed = std::make_unique<TimedAllocator>(*bench->allocator);
  bench->workspace = DeviceBuffer(*bench->timed, 32 * mebibytes, fake_stream(1));
  return bench;
}

void measure_configuration(TimedFakeAllocator& bench, int B, int N, int runs) {
  ConfigurationCost& cost = bench.costs.emplace_back();
  cost.batch = B;
  cost.new_tokens = N;
  const auto before_run = [&] {
    if (!cost.runs.empty()) return;  // the sources' counts add up over the timed runs
    bench.device.calls = {};
    bench.device.synchronizations = 0;
  };
  const auto after_run = [&] {
    // Verify, then keep: the allocator counted every timed allocate(), and the
    // generation gave back every block it took.
    const AllocatorHostTime& run = bench.timed->host_time();
    if (run.allocate_calls != bench.timed->stats().allocations ||
        run.deallocate_calls != run.allocate_calls)
      throw std::logic_error("the timed calls do not match the allocator's count");
    cost.runs.push_back(run);
  };
  measure_chapter02_configuration(*bench.timed, B, N, runs, before_run, after_run);
  cost.source_calls = bench.device.calls;
  cost.synchronizations = bench.device.synchronizations;
}

/// What one reading of steady_clock costs, in ns: the median of 9 rounds of a million.
double clock_reading_nanoseconds() {
  using Clock = std::chrono::steady_clock;
  constexpr int readings = 1000000;
  std::vector<double> rounds;
  for (int round = 0; round < 9; ++round) {
    const Clock::time_point first = Clock::now();
    Clock::time_point last = first;
    for (int reading = 0; reading < readings; ++reading) last = Clock::now();
    rounds.push_back(static_cast<double>((last - first).count()) / readings);
  }
  return summarize(rounds).median;
}

// ---------------------------------------------------------------- reporting

void print_times(const std::vector<ConfigurationCost>& caching,
                 const std::vector<ConfigurationCost>& expandable) {
  std::printf("%28s%-38s%-38s\n", "", "caching (chapter 02)", "expandable (chapter 03)");
  std::printf("%4s %4s %10s  %7s %-30s%7s %-30s%s\n", "B", "N", "calls/step", "ns/call",
              " us/step median [min, max]", "ns/call", " us/step median [min, max]",
              "expandable/caching");
  for (std::size_t index = 0; index < caching.size(); ++index) {
    const ConfigurationCost& left = caching[index];
    const ConfigurationCost& right = expandable[index];
    const Summary left_step = left.microseconds_per_step();
    const Summary right_step = right.microseconds_per_step();
    std::printf(
        "%4d %4d %10.2f  %7.1f %7.2f [%7.2f, %7.2f]      %7.1f %7.2f [%7.2f, %7.2f]      "
        "%5.2f\n",
        left.batch, left.new_tokens, left.calls_per_step(), left.nanoseconds_per_call().median,
        left_step.median, left_step.min, left_step.max, right.nanoseconds_per_call().median,
        right_step.median, right_step.min, right_step.max, right_step.median / left_step.median);
  }
}

void print_source_calls(const char* allocator, const std::vector<ConfigurationCost>& costs) {
  for (const ConfigurationCost& cost : costs) {
    const FakeSourceCalls& calls = cost.source_calls;
    std::printf(
        "%-10s %4d %4d %13.3g %10.3g %8.3g %6.3g %8.3g %6.3g %6.3g (%6.3g) %6.3g (%6.3g) "
        "%6.3g\n",
        allocator, cost.batch, cost.new_tokens, cost.per_step(calls.capture_queries),
        cost.per_step(calls.memory_queries), cost.per_step(calls.segment_allocations),
        cost.per_step(calls.segment_frees), cost.per_step(calls.range_reservations),
        cost.per_step(calls.range_frees), cost.per_step(calls.page_mappings),
        cost.per_step(calls.pages_mapped), cost.per_step(calls.page_unmappings),
        cost.per_step(calls.pages_unmapped),
        cost.per_step(static_cast<std::uint64_t>(cost.synchronizations)));
  }
}

/// The driver and runtime calls the timed runs made besides cudaStreamIsCapturing.
std::uint64_t driver_calls_besides_capture_queries(const ConfigurationCost& cost) {
  const FakeSourceCalls& calls = cost.source_calls;
  return calls.memory_queries + calls.segment_allocations + calls.segment_frees +
         calls.range_reservations + calls.range_frees + calls.page_mappings +
         calls.page_unmappings + static_cast<std::uint64_t>(cost.synchronizations);
}

void print_steady_state(const char* allocator, const std::vector<ConfigurationCost>& costs) {
  std::uint64_t calls = 0;
  for (const ConfigurationCost& cost : costs) calls += driver_calls_besides_capture_queries(cost);
  if (calls == 0)
    std::printf("%s: no driver or runtime call in the timed runs but cudaStreamIsCapturing\n",
                allocator);
  else
    std::printf(
        "%s: %llu driver or runtime calls in the timed runs besides "
        "cudaStreamIsCapturing (table above)\n",
        allocator, static_cast<unsigned long long>(calls));
}

nlohmann::json to_json(const std::vector<ConfigurationCost>& costs) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ConfigurationCost& cost : costs) {
    const Summary step = cost.microseconds_per_step();
    nlohmann::json runs = nlohmann::json::array();
    for (const AllocatorHostTime& run : cost.runs) {
      runs.push_back({{"allocate_calls", run.allocate_calls},
                      {"deallocate_calls", run.deallocate_calls},
                      {"allocate_ns", run.allocate_time.count()},
                      {"deallocate_ns", run.deallocate_time.count()}});
    }
    const FakeSourceCalls& calls = cost.source_calls;
    rows.push_back({{"batch", cost.batch},
                    {"new_tokens", cost.new_tokens},
                    {"calls_per_step", cost.calls_per_step()},
                    {"ns_per_call_median", cost.nanoseconds_per_call().median},
                    {"us_per_step_median", step.median},
                    {"us_per_step_min", step.min},
                    {"us_per_step_max", step.max},
                    {"runs", runs},
                    {"source_calls_in_timed_runs",
                     {{"cudaStreamIsCapturing", calls.capture_queries},
                      {"cudaMemGetInfo", calls.memory_queries},
                      {"cudaMalloc", calls.segment_allocations},
                      {"cudaFree", calls.segment_frees},
                      {"cuMemAddressReserve", calls.range_reservations},
                      {"cuMemAddressFree", calls.range_frees},
                      {"map_pages", calls.page_mappings},
                      {"pages_mapped", calls.pages_mapped},
                      {"unmap_pages", calls.page_unmappings},
                      {"pages_unmapped", calls.pages_unmapped},
                      {"cudaDeviceSynchronize", cost.synchronizations}}}});
  }
  return rows;
}

int run(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  std::ofstream json_file;
  if (!options.json_output.empty()) {
    json_file.open(options.json_output);
    if (!json_file) throw std::runtime_error("cannot write " + options.json_output);
  }
  const double clock_nanoseconds = clock_reading_nanoseconds();
  const auto caching_bench = make_timed_fake_allocator<CachingAllocator>();
  const auto expandable_bench = make_timed_fake_allocator<ExpandableAllocator>();
  for (const auto& [B, N] : chapter02_configurations) {
    // Both allocators in turn, so that a drift in the machine's speed falls on both alike.
    measure_configuration(*caching_bench, B, N, options.runs);
    measure_configuration(*expandable_bench, B, N, options.runs);
  }
  const std::vector<ConfigurationCost>& caching = caching_bench->costs;
  const std::vector<ConfigurationCost>& expandable = expandable_bench->costs;

  std::printf(
      "allocator_host_cost: host time inside allocate() and deallocate(), chapters 02 and 03's "
      "allocation sequence (GPT-2 small, B BOS prompts, N new tokens), on fake memory sources: "
      "no GPU, no driver call timed. Not in the time: the real sources' is_capturing(), a "
      "cudaStreamIsCapturing in every allocate() of both allocators, and the driver calls "
      "counted below.\n");
  std::printf(
      "steady_clock: %.1f ns a reading (each timed call includes about one); from an "
      "empty cache, 1 warm-up and %d timed generations per configuration, medians of "
      "those\n\n",
      clock_nanoseconds, options.runs);
  print_times(caching, expandable);
  std::printf(
      "\nthe fake sources' calls per step of the timed runs, as the driver or runtime "
      "calls they are on a GPU (map_pages: a cuMemCreate and a cuMemMap a page, one "
      "cuMemSetAccess; unmap_pages: a cuMemUnmap and a cuMemRelease a page)\n");
  std::printf("%-10s %4s %4s %13s %10s %8s %6s %8s %6s %15s %15s %6s\n", "allocator", "B", "N",
              "IsCapturing", "MemGetInfo", "Malloc", "Free", "AddrRsv", "AddrFr", "map (pages)",
              "unmap (pages)", "Sync");
  print_source_calls("caching", caching);
  print_source_calls("expandable", expandable);
  print_steady_state("caching", caching);
  print_steady_state("expandable", expandable);

  if (json_file.is_open()) {
    const nlohmann::json report = {{"timed_runs", options.runs},
                                   {"clock_reading_ns", clock_nanoseconds},
                                   {"caching", to_json(caching)},
                                   {"expandable", to_json(expandable)}};
    json_file << report.dump(2) << "\n";
  }
  return kExitSuccess;
}

}  // namespace

int main(int argc, char** argv) {
  return ladder::exit_code_reporting_errors("allocator_host_cost", [&] { return run(argc, argv); });
}
