// bench/kernel_history.hpp - what the kernel-history benches share (attention_history,
// layernorm_history): the command line `program [VERSION] [--batch B]`, fresh random
// inputs, the GPU time of one launch, and the printed row.
//
// Timing: a CUDA graph of kLaunchesPerGraph launches of the version, replayed
// kWarmupGraphs times and then kTimedGraphs times with CUDA events between replays; the
// median replay divided by kLaunchesPerGraph. In a graph the host's launch cost (~5 us
// a call on the H200, results/micro/host_overhead.b32.txt) does not hide a kernel that
// is shorter than it, so the figure is close to the kernel's own GPU time.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/cuda_event.hpp"

namespace ladder::bench {

/// `program [VERSION] [--batch B] [--new-tokens N]`: version 0 means every version;
/// --new-tokens (where the bench takes it) sizes a KV cache as the chapters do for a
/// BOS prompt and N new tokens.
struct HistoryArguments {
  int version = 0;
  int batch = 32;
  int new_tokens = 100;
};

inline HistoryArguments parse_history_arguments(int argc, char** argv, const char* program,
                                                int versions, bool takes_new_tokens) {
  const std::string usage = std::string("usage: ") + program + " [VERSION 1.." +
                            std::to_string(versions) + "] [--batch B]" +
                            (takes_new_tokens ? " [--new-tokens N], 2 <= N <= 1023" : "") +
                            ", 1 <= B <= 4096";
  const auto number = [&](const char* text, long low, long high) {
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || value < low || value > high)
      throw std::invalid_argument(usage);
    return static_cast<int>(value);
  };
  HistoryArguments arguments;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--batch" && i + 1 < argc) {
      arguments.batch = number(argv[++i], 1, 4096);
    } else if (takes_new_tokens && argument == "--new-tokens" && i + 1 < argc) {
      arguments.new_tokens = number(argv[++i], 2, 1023);
    } else if (arguments.version == 0 && argument.rfind("--", 0) != 0) {
      arguments.version = number(argv[i], 1, versions);
    } else {
      throw std::invalid_argument(usage);
    }
  }
  return arguments;
}

/// `count` floats uniform in [-1, 1) from a fixed seed: the same inputs on every run.
inline std::vector<float> random_floats(std::size_t count, unsigned int seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = uniform(generator);
  return values;
}

inline void copy_to_device(float* device, const std::vector<float>& host) {
  CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
}

inline std::vector<float> copy_to_host(const float* device, std::size_t count) {
  std::vector<float> host(count);
  CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

/// Fills `count` floats of device memory with NaN, so an output the kernel does not
/// write fails the check.
inline void poison(float* device, std::size_t count) {
  CUDA_CHECK(cudaMemset(device, 0xff, count * sizeof(float)));
}

constexpr int kLaunchesPerGraph = 20;
constexpr int kWarmupGraphs = 5;
constexpr int kTimedGraphs = 50;

/// Median GPU microseconds of one `launch(i)`, which enqueues one kernel on `stream`;
/// i = 0 .. kLaunchesPerGraph - 1 is the launch's place in the graph (a bench can walk
/// several copies of its inputs with it, as a step walks its layers).
inline double microseconds_per_launch(cudaStream_t stream, const std::function<void(int)>& launch) {
#ifndef NDEBUG
  (void)stream;
  (void)launch;
  throw std::runtime_error(
      "a debug build synchronizes after every launch, which a CUDA graph cannot capture: "
      "time a release build (cmake --preset native)");
#else
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kLaunchesPerGraph; ++i) launch(i);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t instance = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&instance, graph, 0);
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(instantiated);
  double seconds = 0.0;
  try {
    seconds = median_stream_seconds(stream, kWarmupGraphs, kTimedGraphs,
                                    [&] { CUDA_CHECK(cudaGraphLaunch(instance, stream)); });
  } catch (...) {
    cudaGraphExecDestroy(instance);
    throw;
  }
  CUDA_CHECK(cudaGraphExecDestroy(instance));
  return seconds * 1e6 / kLaunchesPerGraph;
#endif
}

/// Throws unless a version's output is within `tolerance` of the CPU reference
/// (relative error as the tests measure it): a wrong version is never timed.
inline void require_close(int version, double error, double tolerance) {
  if (!(error <= tolerance))
    throw std::runtime_error("version " + std::to_string(version) + ": relative error " +
                             std::to_string(error) + " against the CPU reference exceeds " +
                             std::to_string(tolerance));
}

/// One version's line, once checked and timed; bytes is what the version must read and
/// write per launch.
inline void print_version_row(int version, const char* name, double error, double microseconds,
                              double bytes) {
  std::printf("%d  %-56s  error %.1e  %8.2f us  %7.1f GB/s\n", version, name, error, microseconds,
              bytes / (microseconds * 1e3));
}

}  // namespace ladder::bench
