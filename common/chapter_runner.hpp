// common/chapter_runner.hpp - what every chapter's main() hands its decoder to.
//
// A chapter file holds its decode loop (a Decoder) and a two-line main():
//
//   int main(int argc, char** argv) {
//     return ladder::run_chapter(argc, argv, {"01_naive_decode", "naive decode"},
//                                ladder::make_decoder<Gpt2Decoder>);
//   }
//
// run_chapter does everything that is the same for every rung: the command line,
// the weights, the prompts, the device banner, warm-up and timed runs, the table,
// the JSON, the token and logits dumps, and turning every error into one line and
// a non-zero exit. Nothing in it knows which chapter it runs. run_host_chapter does
// the same for a decode loop that runs on the host alone (a HostDecoder), on any
// machine, GPU or not.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/benchmark.hpp"
#include "common/cli.hpp"  // ExitCode
#include "common/device_allocator.hpp"
#include "common/device_model.hpp"
#include "common/gpu_activity.hpp"
#include "common/prompts.hpp"
#include "common/weights.hpp"

namespace ladder {

/// What a chapter stores its weights, activations and KV cache in: the table's precision
/// column and the bytes its HBM floor counts.
enum class StoredPrecision { fp32, bf16 };

struct ChapterInfo {
  std::string folder;  ///< "01_naive_decode"
  std::string title;   ///< "naive decode"
  StoredPrecision stored = StoredPrecision::fp32;
};

/// What a decoder is built with.
struct DecoderOptions {
  bool allow_tf32 = false;
  int eos_token_id = 0;
  /// The host parameters the DeviceModel was uploaded from (for a decoder that keeps
  /// its own copy in another precision); null where there are none (host chapters).
  const Gpt2Weights* weights = nullptr;
};

/// What one generate() call produced.
struct GenerationOutput {
  int batch = 0;
  int steps = 0;                       ///< new tokens per row actually generated
  std::vector<std::int32_t> tokens;    ///< [batch, steps]
  std::int64_t host_syncs = 0;         ///< times the host waited for the GPU inside the loop
  std::uint64_t loop_allocations = 0;  ///< allocator calls made inside the decode loop
  /// Steps enqueued on the GPU when that is more than `steps` (a pipelined decoder's
  /// speculative step past the stop, which ran but is not kept); 0: exactly `steps`.
  int steps_launched = 0;

  int launched_steps() const { return steps_launched > steps ? steps_launched : steps; }
};

/// Copies each step's logits to the host when a test asks for them (--dump-logits);
/// otherwise record() does nothing. Recording synchronizes, so it runs only in an
/// extra, untimed run.
class LogitsRecorder {
 public:
  explicit LogitsRecorder(bool enabled = false) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }
  /// Appends the [batch, vocab] logits at `device_logits` as the next step.
  void record(const float* device_logits, int batch, int vocab, cudaStream_t stream);
  /// The same for logits already in host memory (a decoder that runs on the host).
  void record_host(const float* host_logits, int batch, int vocab);
  const std::vector<float>& values() const { return values_; }
  int steps() const { return steps_; }

 private:
  bool enabled_;
  int steps_ = 0;
  std::vector<float> values_;
};

/// A rung of the ladder: one decode loop.
class Decoder {
 public:
  virtual ~Decoder() = default;
  /// Greedy decoding of max_new_tokens steps at most, stopping after the step at which
  /// the last row produced EOS.
  virtual GenerationOutput generate(const PromptBatch& prompts, int max_new_tokens,
                                    LogitsRecorder& logits) = 0;
  /// The allocator the decode loop takes its memory from (its statistics fill the table).
  virtual DeviceAllocator& allocator() = 0;
  /// The matrix products of one decode step alone, run back to back with the same
  /// shapes and handles as the loop, in seconds per step (median of several repeats);
  /// chapters with a decode step override this with one call of decode_matmul_seconds
  /// (common/step_context.hpp). Negative: not measured.
  virtual double matmul_seconds_per_step(int batch) {
    static_cast<void>(batch);
    return -1.0;
  }
};

/// Copies the first `steps` columns of the device's generated ids [batch, capacity]
/// to the host as [batch, steps] (synchronizes `stream`).
std::vector<std::int32_t> download_generated_tokens(const std::int32_t* device_generated, int batch,
                                                    int capacity, int steps, cudaStream_t stream);

/// The teacher-forced ids of `prompts` as [batch, max_new_tokens] on the device, or an
/// empty buffer (a null pointer) when the prompts force nothing.
DeviceBuffer upload_forced_tokens(DeviceAllocator& allocator, const PromptBatch& prompts,
                                  int max_new_tokens, cudaStream_t stream);

/// Before a configuration's warm-up: the memory earlier configurations of this process
/// left cached goes back to the driver and the peaks restart, so the memory columns say
/// what this configuration takes from an empty cache, as in a fresh process (the PyTorch
/// baseline empties its cache the same way).
void start_from_empty_cache(DeviceAllocator& allocator);

/// The traced run's per-step columns (kernels, copies, GPU idle): what the trace
/// counted divided by the steps `traced` launched, since the trace also saw the work of
/// a speculative step that was not kept.
void fill_traced_columns(const GpuActivitySummary& activity, const GenerationOutput& traced,
                         BenchmarkRow& row);

using DecoderFactory =
    std::function<std::unique_ptr<Decoder>(const DeviceModel&, const DecoderOptions&)>;

template <typename ConcreteDecoder>
std::unique_ptr<Decoder> make_decoder(const DeviceModel& model, const DecoderOptions& options) {
  return std::make_unique<ConcreteDecoder>(model, options);
}

/// exit_code_reporting_errors (common/cli.hpp) as every chapter uses it: each error
/// becomes one line on stderr and its ExitCode, with one exception to the mapping: a
/// launcher's refused check (launch_checks::LaunchCheckFailure, kernels/launch_checks.hpp)
/// means the chapter's own code broke an invariant after the command line was accepted,
/// so it exits with kExitRuntimeError (1), not the kExitUsageError (2) that its
/// std::invalid_argument base would give.
int exit_code_reporting_chapter_errors(const char* program, const std::function<int()>& run);

/// Runs a chapter: parses argv, runs every configuration, prints the table.
/// Returns an ExitCode; never throws.
int run_chapter(int argc, char** argv, const ChapterInfo& chapter, const DecoderFactory& factory);

/// A decode loop that runs on the host alone (the CPU reference as a chapter): it
/// needs no GPU and no driver, and makes no CUDA call.
class HostDecoder {
 public:
  virtual ~HostDecoder() = default;
  /// The same contract as Decoder::generate; logits go to LogitsRecorder::record_host.
  virtual GenerationOutput generate(const PromptBatch& prompts, int max_new_tokens,
                                    LogitsRecorder& logits) = 0;
  /// Where it runs, for the banner and the table, e.g. "host CPU, 2 threads".
  virtual std::string where() const = 0;
};

using HostDecoderFactory =
    std::function<std::unique_ptr<HostDecoder>(const Gpt2Weights&, const DecoderOptions&)>;

template <typename ConcreteDecoder>
std::unique_ptr<HostDecoder> make_host_decoder(const Gpt2Weights& weights,
                                               const DecoderOptions& options) {
  return std::make_unique<ConcreteDecoder>(weights, options);
}

/// run_chapter for a HostDecoder: the same command line, table, JSON and dumps, on any
/// machine. What only a GPU has is not made up: the device memory, HBM floor and traced
/// columns print "-" (null in the JSON), and --tf32 and --kernel-profile are refused.
int run_host_chapter(int argc, char** argv, const ChapterInfo& chapter,
                     const HostDecoderFactory& factory);

}  // namespace ladder
