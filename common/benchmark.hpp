// common/benchmark.hpp - the numbers every chapter reports, and how they are printed.
//
// One row per (batch, new tokens) configuration: mean, std, min,
// max and median seconds of the timed runs (warm-up excluded); ms per step; tokens/s;
// peak allocated, peak reserved and fragmentation at peak; steps actually run; plus
// what the later chapters change (allocations and host synchronizations per step),
// the HBM floor, and a short hash of the generated tokens so outputs compare at a glance.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/config.hpp"
#include "common/device_allocator.hpp"

namespace ladder {

/// mean, population std, min, max, median of a sample.
struct Summary {
  double mean = 0, std = 0, min = 0, max = 0, median = 0;
};
Summary summarize(std::vector<double> values);

/// FNV-1a over the ids: equal outputs give equal hashes on every machine.
std::uint64_t hash_tokens(const std::vector<std::int32_t>& tokens);
/// The hash as 16 hex digits.
std::string hash_string(std::uint64_t hash);

/// Bytes that must cross HBM to generate `steps` tokens per row after a prompt of
/// `prompt_length`: per step, every weight once (of the embedding tables only
/// the rows looked up, which is negligible), the token embedding again, whole, for the
/// tied LM head, the KV cache up to the current position, and the logits.
/// value_bytes: the bytes of one stored weight or cache value (4 in fp32, 2 in bf16);
/// the logits count as fp32 either way.
double floor_bytes(const Gpt2Config& config, int batch, int prompt_length, int steps,
                   int value_bytes = sizeof(float));

/// One CUDA runtime or driver call's share of a traced run, per step.
struct HostCallPerStep {
  std::string name;
  double calls = 0;
  double seconds = 0;  ///< host time inside the call (a runtime call's driver calls included)
  bool waits_for_the_gpu = false;
};

/// How many calls a row keeps: those that take the most host time.
constexpr std::size_t kHostCallsKept = 12;

/// One configuration's results.
struct BenchmarkRow {
  int batch = 0;
  int new_tokens = 0;  ///< asked for
  int prompt_length = 0;
  int steps = 0;                ///< actually run (early stop once every row produced EOS)
  std::vector<double> seconds;  ///< one per timed run
  Summary time;
  AllocatorStats memory;            ///< of the last timed run
  double allocations_per_step = 0;  ///< allocator calls inside the decode loop, per step
  /// false for a decoder that runs on the host: it has no device allocator, so the
  /// memory and allocation columns print "-" (null in the JSON)
  bool device_memory_measured = true;
  double host_syncs_per_step = 0;
  double kernels_per_step = 0;         ///< from one more, untimed run traced with CUPTI
  double graph_launches_per_step = 0;  ///< cudaGraphLaunch calls per step, same run
  /// seconds per step the host spent inside CUDA calls that do not wait for the GPU
  /// (enqueueing work), same run; tracing makes every call slower
  double host_seconds_per_step = 0;
  /// the calls that time is made of, most host time first (at most kHostCallsKept), same
  /// run; the waiting calls are listed too, though host_seconds_per_step leaves them out
  std::vector<HostCallPerStep> host_calls_per_step;
  double copies_per_step = 0;    ///< memcpy and memset operations per step, same run
  double gpu_idle_per_step = 0;  ///< seconds the GPU sat idle per step, same run
  /// seconds the GPU sat idle between the end of one step and the next one's first
  /// kernel, per step boundary, same run (part of gpu_idle_per_step)
  double gpu_idle_between_steps = 0;
  double matmul_seconds_per_step = -1;  ///< the step's matmuls alone; negative: not measured
  double floor_seconds = 0;  ///< floor_bytes / measured copy bandwidth; negative: no GPU, no floor
  std::string token_hash;

  double milliseconds_per_step() const { return steps > 0 ? time.median * 1e3 / steps : 0; }
  double tokens_per_second() const {
    return time.median > 0 ? static_cast<double>(batch) * steps / time.median : 0;
  }
};

/// What the table's title line says.
struct ReportHeader {
  std::string chapter;        ///< folder name, e.g. "01_naive_decode"
  std::string title;          ///< e.g. "naive decode"
  std::string device;         ///< the banner
  std::string precision;      ///< "fp32" or "tf32"
  std::string weights;        ///< "random (seed 0)" or the checkpoint directory
  std::string prompts;        ///< "BOS only", "random, length 8", ...
  std::string allocator;      ///< the chapter allocator's name
  double copy_bandwidth = 0;  ///< bytes/s, measured in the same run; 0: not measured (no GPU)
};

/// The table, in configuration order.
std::string format_table(const ReportHeader& header, const std::vector<BenchmarkRow>& rows);

/// The same as JSON (one object: header fields and a "configurations" array).
std::string format_json(const ReportHeader& header, const std::vector<BenchmarkRow>& rows);

/// ms per step of a run, by (batch, new tokens).
using StepTimes = std::map<std::pair<int, int>, double>;

/// The ms per step of every configuration of a format_json() document. Throws
/// std::runtime_error naming `source` when it is not one (a bad file).
StepTimes parse_step_times(const std::string& json_text, const std::string& source);

/// parse_step_times() of the file at `path`; throws std::runtime_error when it cannot be read.
StepTimes read_step_times(const std::string& path);

/// The table for a projector, at most 100 columns: one title line (chapter, precision,
/// prompts), then per configuration batch, new tokens, ms/step, tokens/s, x floor ("-"
/// without a floor), x prev (this ms/step over `previous`'s for the same batch and new
/// tokens; "-" where `previous` has none) and the tokens hash.
std::string format_compact_table(const ReportHeader& header, const std::vector<BenchmarkRow>& rows,
                                 const StepTimes& previous = {});

}  // namespace ladder
