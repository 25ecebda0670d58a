// common/gpu_activity.cpp - CUPTI activity tracing.
#include "common/gpu_activity.hpp"

#include <cuda_runtime.h>
#include <cupti.h>

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"

namespace ladder {

namespace {

#define CUPTI_CHECK(call)                                                                     \
  do {                                                                                        \
    const CUptiResult ladder_status_ = (call);                                                \
    if (ladder_status_ != CUPTI_SUCCESS) {                                                    \
      const char* ladder_text_ = nullptr;                                                     \
      cuptiGetResultString(ladder_status_, &ladder_text_);                                    \
      throw CudaError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + #call + \
                      " failed: " + (ladder_text_ ? ladder_text_ : "?"));                     \
    }                                                                                         \
  } while (0)

constexpr std::size_t kBufferBytes = std::size_t{8} << 20;
constexpr std::size_t kBufferAlignment = 8;

/// CUPTI hands completed buffers to plain functions with no user pointer, so the
/// records land here; GpuActivityTrace allows one tracer at a time to own them.
struct RecordSink {
  std::mutex mutex;
  std::string step_marker;
  std::vector<ActivityInterval> intervals;
  std::uint64_t kernels = 0, copies = 0, memsets = 0, graph_launches = 0;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> kernel_time;  // count, ns
  bool keep_kernel_runs = false;
  std::vector<KernelRun> kernel_runs;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> host_calls;             // [start, end) ns
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> api_time;     // count, ns
  bool active = false;
};

std::string readable_name(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  // Drop the argument list: the kernel's name (and template arguments) say enough.
  const std::size_t arguments = name.rfind('(');
  if (arguments != std::string::npos && arguments > 0) name.resize(arguments);
  return name;
}

RecordSink& sink() {
  static RecordSink instance;
  return instance;
}

/// The name of a runtime or driver call, or empty when CUPTI does not know it.
std::string api_call_name(CUpti_ActivityKind kind, CUpti_CallbackId id) {
  const char* name = nullptr;
  const CUpti_CallbackDomain domain = kind == CUPTI_ACTIVITY_KIND_RUNTIME
                                          ? CUPTI_CB_DOMAIN_RUNTIME_API
                                          : CUPTI_CB_DOMAIN_DRIVER_API;
  if (cuptiGetCallbackName(domain, id, &name) != CUPTI_SUCCESS || name == nullptr) return "";
  return call_name_without_version(name);
}

/// Whether a runtime call launches a CUDA graph (plain, or with per-thread default streams).
bool is_graph_launch(CUpti_CallbackId id) {
  return id == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000 ||
         id == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000;
}

/// Whether a call is one that waits for the GPU (a synchronization, or a memory copy,
/// which may block), not one that only enqueues work.
bool waits_for_the_gpu(const std::string& call) {
  return call.find("Synchronize") != std::string::npos || call.find("Memcpy") != std::string::npos;
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                               std::size_t valid_bytes) {
  RecordSink& records = sink();
  std::lock_guard<std::mutex> lock(records.mutex);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        const std::string name = readable_name(kernel->name);
        const bool opens_step =
            !records.step_marker.empty() && name.find(records.step_marker) != std::string::npos;
        records.intervals.push_back({kernel->start, kernel->end, opens_step});
        if (records.keep_kernel_runs)
          records.kernel_runs.push_back({name, kernel->start, kernel->end});
        ++records.kernels;
        auto& [count, nanoseconds] = records.kernel_time[name];
        ++count;
        nanoseconds += kernel->end - kernel->start;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* copy = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        records.intervals.push_back({copy->start, copy->end, false});
        ++records.copies;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* fill = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        records.intervals.push_back({fill->start, fill->end, false});
        ++records.memsets;
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto* call = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        const std::string name = api_call_name(record->kind, call->cbid);
        if (!waits_for_the_gpu(name)) records.host_calls.emplace_back(call->start, call->end);
        auto& [count, nanoseconds] =
            records.api_time[name.empty() ? "callback " + std::to_string(call->cbid) : name];
        ++count;
        nanoseconds += call->end - call->start;
        // The runtime's cudaGraphLaunch calls the driver's cuGraphLaunch: count one.
        if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME && is_graph_launch(call->cbid))
          ++records.graph_launches;
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER};

}  // namespace

ActivityTimeline summarize_timeline(std::vector<ActivityInterval> intervals) {
  ActivityTimeline timeline;
  if (intervals.empty()) return timeline;
  std::sort(intervals.begin(), intervals.end(),
            [](const ActivityInterval& a, const ActivityInterval& b) { return a.start < b.start; });
  std::uint64_t busy = 0;
  std::uint64_t between_steps = 0;
  std::uint64_t current_start = intervals.front().start;
  std::uint64_t current_end = intervals.front().end;  // the latest end seen so far
  for (const ActivityInterval& interval : intervals) {
    if (interval.opens_step) {
      // The gap before a step: from the end of all earlier work to this kernel's start.
      if (timeline.step_openings > 0 && interval.start > current_end)
        between_steps += interval.start - current_end;
      ++timeline.step_openings;
    }
    if (interval.start > current_end) {  // a gap: the GPU was idle in between
      busy += current_end - current_start;
      current_start = interval.start;
      current_end = interval.end;
    } else {
      current_end = std::max(current_end, interval.end);
    }
  }
  busy += current_end - current_start;
  timeline.busy_seconds = static_cast<double>(busy) * 1e-9;
  timeline.span_seconds = static_cast<double>(current_end - intervals.front().start) * 1e-9;
  timeline.idle_between_steps_seconds = static_cast<double>(between_steps) * 1e-9;
  return timeline;
}

std::vector<TimelineRow> step_timeline(std::vector<KernelRun> kernels,
                                       const std::string& step_marker, int step) {
  if (step_marker.empty() || step < 0) return {};
  std::stable_sort(kernels.begin(), kernels.end(),
                   [](const KernelRun& a, const KernelRun& b) { return a.start < b.start; });
  const auto opens_step = [&](const KernelRun& kernel) {
    return kernel.name.find(step_marker) != std::string::npos;
  };
  auto first = kernels.begin();
  for (int opened = -1; first != kernels.end(); ++first) {
    if (opens_step(*first) && ++opened == step) break;
  }
  if (first == kernels.end()) return {};
  const auto last = std::find_if(first + 1, kernels.end(), opens_step);
  const std::uint64_t origin = first->start;
  const auto microseconds = [](std::uint64_t nanoseconds) {
    return static_cast<double>(nanoseconds) * 1e-3;
  };
  std::vector<TimelineRow> rows;
  std::uint64_t latest_end = origin;
  for (auto kernel = first; kernel != last; ++kernel) {
    const std::uint64_t added = kernel->end > latest_end ? kernel->end - latest_end : 0;
    latest_end = std::max(latest_end, kernel->end);
    rows.push_back({kernel->name, microseconds(kernel->start - origin),
                    microseconds(kernel->end - origin), microseconds(kernel->end - kernel->start),
                    microseconds(added)});
  }
  return rows;
}

std::string format_step_timeline(const std::vector<TimelineRow>& rows) {
  char line[96];
  std::snprintf(line, sizeof(line), "  %8s %8s %8s %8s  kernel\n", "start us", "end us", "took us",
                "adds us");
  std::string text = line;
  for (const TimelineRow& kernel : rows) {
    std::snprintf(line, sizeof(line), "  %8.1f %8.1f %8.1f %8.1f  ", kernel.start_us, kernel.end_us,
                  kernel.took_us, kernel.adds_us);
    text += line + kernel.name + "\n";
  }
  return text;
}

std::string call_name_without_version(std::string name) {
  // CUPTI names runtime calls with the version that introduced them: "_v" and digits.
  const std::size_t version = name.rfind("_v");
  if (version != std::string::npos && version + 2 < name.size() &&
      name.find_first_not_of("0123456789", version + 2) == std::string::npos)
    name.resize(version);
  return name;
}

double union_seconds(std::vector<std::pair<std::uint64_t, std::uint64_t>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  std::uint64_t total = 0;
  std::uint64_t covered_until = 0;
  for (const auto& [start, end] : intervals) {
    const std::uint64_t from = std::max(start, covered_until);
    if (end > from) total += end - from;
    covered_until = std::max(covered_until, end);
  }
  return static_cast<double>(total) * 1e-9;
}

GpuActivityTrace::GpuActivityTrace(std::string step_marker, bool keep_kernel_runs) {
  RecordSink& records = sink();
  {
    std::lock_guard<std::mutex> lock(records.mutex);
    if (records.active) throw std::logic_error("only one GpuActivityTrace may exist at a time");
    records.step_marker = std::move(step_marker);
    records.intervals.clear();
    records.host_calls.clear();
    records.kernels = records.copies = records.memsets = records.graph_launches = 0;
    records.kernel_time.clear();
    records.keep_kernel_runs = keep_kernel_runs;
    records.kernel_runs.clear();
    records.api_time.clear();
    records.active = true;
  }
  try {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    for (CUpti_ActivityKind kind : kKinds) CUPTI_CHECK(cuptiActivityEnable(kind));
  } catch (...) {
    // No destructor runs for an object whose constructor threw: stop here, so that the
    // next trace (the next configuration's, when CUPTI is held by a profiler) can start.
    stop_tracing();
    throw;
  }
}

GpuActivityTrace::~GpuActivityTrace() { stop_tracing(); }

void GpuActivityTrace::stop_tracing() {
  // Best effort, and not throwing: kinds that were never enabled just return an error.
  for (CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  RecordSink& records = sink();
  std::lock_guard<std::mutex> lock(records.mutex);
  records.active = false;
}

GpuActivitySummary GpuActivityTrace::collect() {
  CUDA_CHECK(cudaDeviceSynchronize());
  CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  RecordSink& records = sink();
  std::lock_guard<std::mutex> lock(records.mutex);
  GpuActivitySummary summary;
  summary.kernels = records.kernels;
  summary.copies = records.copies;
  summary.memsets = records.memsets;
  summary.graph_launches = records.graph_launches;
  for (const auto& [name, totals] : records.kernel_time)
    summary.kernel_times.push_back({name, totals.first, static_cast<double>(totals.second) * 1e-9});
  std::sort(summary.kernel_times.begin(), summary.kernel_times.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.seconds > b.seconds; });
  for (const auto& [name, totals] : records.api_time)
    summary.api_call_times.push_back({name, totals.first, static_cast<double>(totals.second) * 1e-9,
                                      waits_for_the_gpu(name)});
  std::sort(summary.api_call_times.begin(), summary.api_call_times.end(),
            [](const ApiCallTime& a, const ApiCallTime& b) { return a.seconds > b.seconds; });
  summary.kernel_runs = std::move(records.kernel_runs);
  summary.host_api_seconds = union_seconds(records.host_calls);
  summary.timeline = summarize_timeline(records.intervals);
  return summary;
}

}  // namespace ladder
