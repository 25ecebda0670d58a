// common/gpu_activity.hpp - what the GPU actually ran, from CUPTI activity records.
//
// Counts what the chapters change and a stopwatch cannot see: kernel launches per
// step, memory copies per step, and the time the GPU sat idle between its work (the
// host was waiting, or launching), in all and just before each step's first kernel. CUPTI
// timestamps every kernel, copy and memset on the device itself; the busy time is the union of
// those intervals, the idle time is what is left of the span from the first start to the last end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ladder {

/// Time on the GPU of one kernel (all its launches).
struct KernelTime {
  std::string name;
  std::uint64_t launches = 0;
  double seconds = 0;
};

/// Host time of one CUDA runtime or driver call (all its calls), start to end of each.
struct ApiCallTime {
  std::string name;  ///< e.g. "cudaLaunchKernel" (runtime) or "cuLaunchKernel" (driver)
  std::uint64_t calls = 0;
  double seconds = 0;  ///< summed: a runtime call's time includes the driver calls it makes
  bool waits_for_the_gpu = false;  ///< a synchronization or a memory copy
};

/// One piece of work on the GPU's clock (a kernel, a copy, a memset): [start, end) in ns.
struct ActivityInterval {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  bool opens_step = false;  ///< a kernel that opens a step (its name holds the step marker)
};

/// What a set of GPU activity intervals says about time, in seconds.
struct ActivityTimeline {
  double span_seconds = 0;  ///< first start to last end
  double busy_seconds = 0;  ///< length of the union of the intervals
  double idle_seconds() const { return span_seconds - busy_seconds; }
  std::uint64_t step_openings = 0;  ///< intervals that open a step
  /// Sum over the step-opening intervals but the earliest of the idle time just before
  /// each: from the latest end of everything that started before it, to its start.
  double idle_between_steps_seconds = 0;
};

/// The timeline of `intervals` (any order, overlaps allowed: two streams). Pure
/// arithmetic, so that it is tested without a GPU.
ActivityTimeline summarize_timeline(std::vector<ActivityInterval> intervals);

/// A CUDA call's name as a reader knows it: CUPTI's name without the version suffix it
/// gives runtime calls ("cudaGraphLaunch_v10000" -> "cudaGraphLaunch"); others unchanged.
std::string call_name_without_version(std::string name);

/// Length in seconds of the union of [start, end) intervals in ns (any order, overlaps
/// allowed): the host time covered by API calls, nested or not.
double union_seconds(std::vector<std::pair<std::uint64_t, std::uint64_t>> intervals);

/// One kernel as it ran: its name and [start, end) on the GPU's clock, in ns.
struct KernelRun {
  std::string name;
  std::uint64_t start = 0;
  std::uint64_t end = 0;
};

/// One kernel of a step's timeline, in µs from the start of the step's first kernel. A
/// kernel launched as a programmatic dependent starts before the kernel it waits for ends,
/// so its `took` includes that wait; `adds` is how far its end lies past the latest end of
/// the step's kernels that started before it (0 when it ends within their time): what it
/// added to the step. The `adds` of a step sum to its span, first start to last end.
struct TimelineRow {
  std::string name;
  double start_us = 0;
  double end_us = 0;
  double took_us = 0;
  double adds_us = 0;
};

/// The kernels from the `step`-th (0-based) kernel whose name contains `step_marker` to
/// the next such kernel (or the last kernel), in order of start, as TimelineRows; empty
/// when there are not that many steps. Pure arithmetic, tested without a GPU.
std::vector<TimelineRow> step_timeline(std::vector<KernelRun> kernels,
                                       const std::string& step_marker, int step);

/// `rows` as --step-timeline prints them: a header line, then a line a kernel: start,
/// end, took and adds in µs, each right-aligned in 8 characters after a space, then two
/// spaces and the kernel's name (the format scripts/ab_ratios.py reads).
std::string format_step_timeline(const std::vector<TimelineRow>& rows);

struct GpuActivitySummary {
  std::uint64_t kernels = 0;         ///< kernel launches that ran, those inside graphs included
  std::uint64_t graph_launches = 0;  ///< cudaGraphLaunch calls (each runs many kernels)
  std::uint64_t copies = 0;          ///< memcpy operations (any direction)
  std::uint64_t memsets = 0;
  /// When the GPU was busy and idle: over all the work, and just before each kernel
  /// whose name contains the trace's step marker (the gap between two steps).
  ActivityTimeline timeline;
  /// Host time spent inside CUDA runtime and driver calls (cuBLASLt's included), as the
  /// union of their intervals, leaving out the calls that wait for the GPU
  /// (synchronizations, memory copies): what enqueueing the work cost the host.
  double host_api_seconds = 0;
  std::vector<KernelTime> kernel_times;  ///< per kernel name, most GPU time first
  std::vector<KernelRun> kernel_runs;    ///< each kernel that ran, in no order (if asked to keep)
  /// Per runtime and driver call name, most host time first, the waiting calls included:
  /// which calls host_api_seconds is made of.
  std::vector<ApiCallTime> api_call_times;
};

/// Records GPU activity from construction until collect(). Only one may exist at a
/// time in a process: CUPTI delivers its records to process-wide callbacks.
class GpuActivityTrace {
 public:
  /// `step_marker`: a part of the name of the kernel that opens every step (the
  /// chapters' steps all begin with the token embedding); empty for none.
  /// With `keep_kernel_runs` every kernel's name and times are kept for
  /// GpuActivitySummary::kernel_runs (--step-timeline); otherwise it stays empty.
  /// Throws CudaError when CUPTI cannot trace, e.g. when compute-sanitizer, Nsight
  /// Compute or Nsight Systems already holds it; a later trace may then be tried again.
  explicit GpuActivityTrace(std::string step_marker = "", bool keep_kernel_runs = false);
  ~GpuActivityTrace();
  GpuActivityTrace(const GpuActivityTrace&) = delete;
  GpuActivityTrace& operator=(const GpuActivityTrace&) = delete;

  /// Synchronizes the device, flushes CUPTI's buffers and summarizes everything recorded.
  GpuActivitySummary collect();

 private:
  /// Disables the activity kinds, flushes, and lets the next trace start.
  static void stop_tracing();
};

}  // namespace ladder
