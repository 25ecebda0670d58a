// common/serving_report.hpp - how the serving chapter runs its configurations and
// reports them: the table, the JSON (through the same writer as every chapter's report,
// common/benchmark.cpp's) and the per-request dump the tests read.
//
// The chapter supplies a TimedServingBackend (its GPU decoder, which also keeps the GPU's
// own timeline of the steps); run_serving_chapter() does the rest, as run_chapter() does
// for chapters 00-10: parse the command line (common/serving_options.hpp), make the plan,
// build the back-end, serve the trace in static batches and continuously, print.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/chapter_runner.hpp"
#include "common/continuous_batching.hpp"
#include "common/serving_options.hpp"
#include "common/serving_statistics.hpp"

namespace ladder {

/// GPU time of the steps, from events recorded around each one on the stream.
struct GpuTimeline {
  int steps = 0;
  double busy_ms = 0;         ///< sum over steps of (end - start)
  double idle_ms = 0;         ///< sum of the gaps between a step's end and the next one's start
  double span_ms = 0;         ///< first step's start to last step's end
  double host_launch_ms = 0;  ///< host time inside launch_step (planning is the scheduler's)
  double host_wait_ms = 0;    ///< host time waiting in finish_step for a step's tokens

  double idle_fraction() const { return span_ms > 0 ? idle_ms / span_ms : 0; }
};

/// A serving back-end that times its steps on the GPU.
class TimedServingBackend : public ServingBackend {
 public:
  virtual void reset_timeline() = 0;
  virtual const GpuTimeline& timeline() const = 0;
};

/// What CUPTI saw in one more, untimed run of a configuration (--cupti).
struct TracedServing {
  double idle_fraction = 0;  ///< (span - union of GPU activity) / span
  double kernels_per_step = 0;
  double graph_launches_per_step = 0;
  double host_api_ms_per_step = 0;  ///< host time inside CUDA calls that do not wait
};

struct ServedConfiguration {
  std::string name;
  SchedulerOptions scheduler;
  ServingResult result;
  ServingSummary summary;
  GpuTimeline timeline;
  std::optional<TracedServing> traced;
};

/// The table: one row per configuration, the CUPTI lines, each configuration's tokens/s
/// against the first's.
std::string format_serving_table(const std::vector<ServedConfiguration>& served);

/// The same as JSON: the run's header and one object per configuration, with the slots
/// busy over time in 200 windows (the plot's series).
std::string format_serving_json(const std::string& chapter, const std::string& precision,
                                const std::string& device, const ServingPlan& plan,
                                const std::vector<ServedConfiguration>& served);

/// One line per request of every configuration, in trace order, for the tests:
/// "configuration request slot token ...", the configuration counted from 0 in the
/// table's order.
std::string format_request_dump(const std::vector<ServedConfiguration>& served);

/// Builds the chapter's back-end for a plan, from the weights it loaded or drew.
using MakeServingBackend =
    std::function<std::unique_ptr<TimedServingBackend>(const Gpt2Weights&, const ServingPlan&)>;

/// The serving chapter's main: parses argv, refuses bad input before any GPU is touched,
/// serves the trace in static batches of the slot count (the baseline) and with
/// continuous batching (host waiting, then one step ahead), prints the table and writes
/// what was asked. Returns the exit code (common/cli.hpp).
int run_serving_chapter(int argc, char** argv, const ChapterInfo& chapter,
                        const MakeServingBackend& make_backend);

}  // namespace ladder
