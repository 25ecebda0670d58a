// common/serving_report.cpp - the serving chapter's configurations, table, JSON and dump.
#include "common/serving_report.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/bfloat16_device_model.hpp"  // bfloat16_model_problem
#include "common/cli.hpp"
#include "common/cuda_check.hpp"
#include "common/gpu_activity.hpp"
#include "common/nvtx.hpp"

namespace ladder {

namespace {

const char* policy_name(BatchingPolicy policy) {
  return policy == BatchingPolicy::continuous ? "continuous" : "static";
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error(path + ": cannot be written; check the folder exists");
  out << text;
  if (!out) throw std::runtime_error(path + ": writing failed");
}

/// The profiler's view of the same serving (its own run: CUPTI's bookkeeping slows the
/// host, so the timed run is the one without it). Empty when a tool already holds CUPTI.
std::optional<TracedServing> trace_serving(const ServingPlan& plan, ServingBackend& backend,
                                           const SchedulerOptions& scheduler) {
  std::optional<GpuActivityTrace> trace;
  try {
    trace.emplace();
  } catch (const CudaError& error) {
    std::fprintf(stderr, "note: no GPU activity trace (%s)\n", error.what());
    return std::nullopt;
  }
  SteadyClock clock;
  const ServingResult result = serve_requests(plan.trace, backend, scheduler, clock);
  const GpuActivitySummary activity = trace->collect();
  const double steps = std::max<double>(1, static_cast<double>(result.steps.size()));
  TracedServing traced;
  const ActivityTimeline& timeline = activity.timeline;
  traced.idle_fraction =
      timeline.span_seconds > 0 ? timeline.idle_seconds() / timeline.span_seconds : 0;
  traced.kernels_per_step = static_cast<double>(activity.kernels) / steps;
  traced.graph_launches_per_step = static_cast<double>(activity.graph_launches) / steps;
  traced.host_api_ms_per_step = activity.host_api_seconds * 1e3 / steps;
  return traced;
}

/// One configuration: a short untimed warm-up (the slot count's first requests, two
/// tokens each), the timed serving, and with --cupti one more, traced.
ServedConfiguration serve(const std::string& name, const ServingPlan& plan,
                          TimedServingBackend& backend, BatchingPolicy policy,
                          int steps_in_flight) {
  ServedConfiguration served;
  served.name = name;
  served.scheduler.policy = policy;
  served.scheduler.eos_token_id = plan.eos_token_id;
  served.scheduler.steps_in_flight = steps_in_flight;
  std::vector<Request> warmup(
      plan.trace.begin(),
      plan.trace.begin() + std::min<std::size_t>(plan.trace.size(), backend.slot_count()));
  for (Request& request : warmup) {
    request.arrival_ms = 0;
    request.max_new_tokens = std::min(request.max_new_tokens, 2);
  }
  SimulatedClock warmup_clock(1.0);
  serve_requests(warmup, backend, served.scheduler, warmup_clock);

  NvtxRange range(name.c_str());
  backend.reset_timeline();
  SteadyClock clock;
  served.result = serve_requests(plan.trace, backend, served.scheduler, clock);
  served.summary = summarize_serving(served.result);
  served.timeline = backend.timeline();
  if (plan.options.cupti) served.traced = trace_serving(plan, backend, served.scheduler);
  return served;
}

}  // namespace

std::string format_serving_table(const std::vector<ServedConfiguration>& served) {
  std::ostringstream out;
  char line[512];
  out << "\n| serving | output tokens/s | steps | GPU busy ms/step | GPU idle | host launch "
         "ms/step | latency p50 ms | latency p99 ms | first token p99 ms | slot use |\n"
         "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const ServedConfiguration& s : served) {
    const double steps = std::max(1, s.timeline.steps);
    std::snprintf(line, sizeof line,
                  "| %s | %.0f | %d | %.3f | %.1f%% | %.3f | %.1f | %.1f | %.1f | %.1f%% |\n",
                  s.name.c_str(), s.summary.output_tokens_per_second, s.summary.steps,
                  s.timeline.busy_ms / steps, 100 * s.timeline.idle_fraction(),
                  s.timeline.host_launch_ms / steps, s.summary.latency_p50_ms,
                  s.summary.latency_p99_ms, s.summary.first_token_p99_ms, 100 * s.summary.slot_use);
    out << line;
  }
  for (const ServedConfiguration& s : served) {
    if (!s.traced) continue;
    std::snprintf(line, sizeof line,
                  "CUPTI, %s: GPU idle %.2f%%, %.1f kernels and %.2f graph launches per step, "
                  "host inside CUDA calls %.3f ms per step\n",
                  s.name.c_str(), 100 * s.traced->idle_fraction, s.traced->kernels_per_step,
                  s.traced->graph_launches_per_step, s.traced->host_api_ms_per_step);
    out << line;
  }
  for (std::size_t i = 1; i < served.size(); ++i) {
    const double baseline = served.front().summary.output_tokens_per_second;
    std::snprintf(line, sizeof line, "%s / %s: %.2fx the output tokens/s\n", served[i].name.c_str(),
                  served.front().name.c_str(),
                  baseline > 0 ? served[i].summary.output_tokens_per_second / baseline : 0.0);
    out << line;
  }
  return out.str();
}

std::string format_serving_json(const std::string& chapter, const std::string& precision,
                                const std::string& device, const ServingPlan& plan,
                                const std::vector<ServedConfiguration>& served) {
  nlohmann::json document = {
      {"chapter", chapter},
      {"precision", precision},
      {"device", device},
      {"trace", plan.trace_description},
      {"requests", plan.trace.size()},
      {"slots", plan.options.slots},
      {"capacity", plan.capacity},
  };
  nlohmann::json configurations = nlohmann::json::array();
  for (const ServedConfiguration& s : served) {
    const ServingSummary& m = s.summary;
    const double window_ms = std::max(m.elapsed_ms / 200.0, 1e-3);
    nlohmann::json configuration = {
        {"name", s.name},
        {"policy", policy_name(s.scheduler.policy)},
        {"steps_in_flight", s.scheduler.steps_in_flight},
        {"output_tokens", m.output_tokens},
        {"elapsed_ms", m.elapsed_ms},
        {"output_tokens_per_second", m.output_tokens_per_second},
        {"steps", m.steps},
        {"gpu_busy_ms", s.timeline.busy_ms},
        {"gpu_idle_ms", s.timeline.idle_ms},
        {"gpu_span_ms", s.timeline.span_ms},
        {"gpu_idle_fraction", s.timeline.idle_fraction()},
        {"host_launch_ms", s.timeline.host_launch_ms},
        {"host_wait_ms", s.timeline.host_wait_ms},
        {"waiting_for_arrivals_ms", m.waiting_ms},
        {"latency_p50_ms", m.latency_p50_ms},
        {"latency_p99_ms", m.latency_p99_ms},
        {"first_token_p50_ms", m.first_token_p50_ms},
        {"first_token_p99_ms", m.first_token_p99_ms},
        {"slot_use", m.slot_use},
        {"mean_busy_slots", m.mean_busy_slots},
        {"padding_rows", m.padding_rows},
        {"speculative_rows", m.speculative_rows},
        {"busy_slots_window_ms", window_ms},
        {"busy_slots", busy_slots_over_time(s.result, window_ms)},
    };
    if (s.traced) {
      configuration["cupti_gpu_idle_fraction"] = s.traced->idle_fraction;
      configuration["cupti_kernels_per_step"] = s.traced->kernels_per_step;
      configuration["cupti_graph_launches_per_step"] = s.traced->graph_launches_per_step;
      configuration["cupti_host_api_ms_per_step"] = s.traced->host_api_ms_per_step;
    }
    configurations.push_back(configuration);
  }
  document["configurations"] = configurations;
  return document.dump(2) + "\n";
}

std::string format_request_dump(const std::vector<ServedConfiguration>& served) {
  std::ostringstream out;
  for (std::size_t c = 0; c < served.size(); ++c) {
    const std::vector<RequestRecord>& requests = served[c].result.requests;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      out << c << ' ' << i << ' ' << requests[i].slot;
      for (std::int32_t token : requests[i].tokens) out << ' ' << token;
      out << '\n';
    }
  }
  return out.str();
}

int run_serving_chapter(int argc, char** argv, const ChapterInfo& chapter,
                        const MakeServingBackend& make_backend) {
  return exit_code_reporting_chapter_errors(chapter.folder.c_str(), [&] {
    const ServingOptions options = parse_serving_options(argc, argv);
    if (options.help) {
      std::fputs(serving_usage(chapter.folder).c_str(), stdout);
      return static_cast<int>(kExitSuccess);
    }
    const int value_bytes = chapter.stored == StoredPrecision::bf16 ? 2 : 4;
    const std::string precision = chapter.stored == StoredPrecision::bf16 ? "bf16"
                                  : options.allow_tf32                    ? "tf32"
                                                                          : "fp32";
    if (options.allow_tf32 && chapter.stored == StoredPrecision::bf16)
      throw std::invalid_argument("--tf32: this chapter's step is bf16; TF32 is for fp32 steps");
    const ServingPlan plan = make_serving_plan(options, value_bytes);
    if (chapter.stored == StoredPrecision::bf16) {
      // Refused before the device is touched, as run_chapter refuses it: a model the bf16
      // kernels cannot run is a bad file (exit 1), not a failure half-way.
      const std::string problem = bfloat16_model_problem(plan.config);
      if (!problem.empty())
        throw std::runtime_error("not a model " + chapter.folder +
                                 "'s bf16 kernels can run: " + problem);
    }

    require_cuda_device();
    cudaDeviceProp properties{};
    CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
    const Gpt2Weights random_weights =
        plan.checkpoint ? Gpt2Weights{} : random_gpt2_weights(plan.config, plan.options.seed);
    const Gpt2Weights& weights = plan.checkpoint ? *plan.checkpoint : random_weights;
    if (!plan.options.kv_cache_budget_gib) {
      // The cache must fit beside the weights and the activations: half of what is free
      // now is its budget.
      std::size_t free_bytes = 0;
      std::size_t total_bytes = 0;
      CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
      require_slots_fit(plan.config, plan.options.slots, plan.capacity, value_bytes,
                        0.5 * static_cast<double>(free_bytes));
    }
    std::printf("%s: %s on %s, %s\n", chapter.folder.c_str(), chapter.title.c_str(),
                properties.name, precision.c_str());
    std::printf("trace: %s; %d slots of %d positions; EOS %d\n", plan.trace_description.c_str(),
                plan.options.slots, plan.capacity, plan.eos_token_id);
    const std::unique_ptr<TimedServingBackend> backend = make_backend(weights, plan);

    std::vector<ServedConfiguration> served;
    // The baseline first: static batches of S in arrival order, each waiting for its
    // longest request, with the host one step ahead as in chapters 06-10.
    served.push_back(serve("static batches", plan, *backend, BatchingPolicy::static_batches, 2));
    // Continuous batching, without and with the host one step ahead.
    served.push_back(
        serve("continuous, host waits", plan, *backend, BatchingPolicy::continuous, 1));
    served.push_back(serve("continuous", plan, *backend, BatchingPolicy::continuous, 2));
    std::fputs(format_serving_table(served).c_str(), stdout);
    if (!plan.options.json_file.empty())
      write_file(plan.options.json_file,
                 format_serving_json(chapter.folder, precision, properties.name, plan, served));
    if (!plan.options.dump_requests_file.empty())
      write_file(plan.options.dump_requests_file, format_request_dump(served));
    return static_cast<int>(kExitSuccess);
  });
}

}  // namespace ladder
