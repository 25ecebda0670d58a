// chapters/12_continuous_batching/continuous_batching.cpp - rung 12: a stream of requests
// served from 32 slots of a static KV cache, each slot refilled as soon as its request ends,
// beside the same trace served in static batches.
//
// Every chapter before this one serves one batch: the rows start together and the batch
// runs until its slowest row is done. Here the input is a trace of requests with their own
// prompt lengths, output limits and arrival times (common/request_trace.hpp), and the host
// scheduler of common/continuous_batching.hpp decides every step which slot does what:
// a finished request's slot takes the next waiting request at once. The GPU side is this
// file's SlotDecoder, the scheduler's back-end:
//   * the decode step runs all S slots with a position per row: each row embeds its
//     slot's last token at its own position, appends its keys and values at that position
//     of its own slot and attends over its own length (the per-row fused attention,
//     kernels/cache_attention.cuh); a slot that sits the step out has position -1. The
//     step's shape never changes, so it is captured once as a CUDA graph (chapter 07) and
//     replayed; the per-row positions live in device memory.
//   * a newly admitted request's prompt is prefilled into its slot in the step that admits
//     it, before that step's decode, the step's prompts batched into one forward (the
//     products over all their rows at once, attention per prompt): whole prompts, not
//     chunks, since prompts here are short next to outputs (docs/continuous_batching.md).
//   * the host keeps two steps in flight: while the GPU runs step k it plans step k + 1,
//     fills a pinned staging buffer (positions, slots, prompts) and enqueues its
//     asynchronous copy and launches; only each step's tokens come back, one per slot.
// The products and the model are chapter 09's fp32 decode kernels (DecodeStepContext);
// moving to chapter 10's bf16 would change the buffers' element type, not the serving.
//
// Run:      build/current/chapters/12_continuous_batching          (the default trace:
//           512 requests, prompts 4-64, limits 16-256, all at time 0, 32 slots)
//           ... --rate 200                   Poisson arrivals, 200 requests/s
//           ... --trace my_trace.txt         a user's trace (format: common/request_trace.hpp)
//           ... --json out.json              the table and slots-busy series, for the plot
// Profile:  nsys profile -t cuda,nvtx build/current/chapters/12_continuous_batching
//
// Notation: S slots, each of `capacity` positions (the trace's longest prompt + limit - 1);
// C = n_embd, H heads, D = C / H, V vocabulary; a request of P prompt tokens and N new.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/config.hpp"
#include "common/continuous_batching.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_event.hpp"
#include "common/cuda_graph.hpp"
#include "common/decode_step_context.hpp"
#include "common/device_model.hpp"
#include "common/gpu_activity.hpp"
#include "common/nvtx.hpp"
#include "common/pinned_flag.hpp"
#include "common/request_trace.hpp"
#include "common/serving_statistics.hpp"
#include "common/weights.hpp"
#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/decode_matmul.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/sampling.cuh"

namespace {

using namespace ladder;

// ---------------------------------------------------------------- the command line

constexpr const char* kUsage =
    "usage: 12_continuous_batching [options]\n"
    "Serves a trace of requests with continuous batching and with static batches of the\n"
    "slot count, and prints (and writes, --json) output tokens/s, GPU idle, latency p50/p99.\n"
    "  --trace FILE          replay this trace (format: common/request_trace.hpp)\n"
    "  --requests N          generated trace: N requests (default 512; prompts 4-64 tokens,\n"
    "                        limits 16-256 new tokens)\n"
    "  --trace-seed X        generated trace: its seed (default 0)\n"
    "  --rate R              generated trace: Poisson arrivals, R requests/s (default 0: all\n"
    "                        at time 0)\n"
    "  --prompt-lengths A-B  generated trace: prompt lengths uniform in [A, B] (default 4-64)\n"
    "  --output-limits A-B   generated trace: limits uniform in [A, B] new tokens (default\n"
    "                        16-256)\n"
    "  --slots S             KV-cache slots, rows of the decode step (default 32)\n"
    "  --kv-cache-budget-gib G  refuse more slots than fit in G GiB (default: the device's\n"
    "                        free memory)\n"
    "  --weights DIR         a Hugging Face GPT-2 directory (default: random GPT-2 small)\n"
    "  --config FILE         random weights for this config.json\n"
    "  --seed X              seed of the random weights (default 0)\n"
    "  --eos ID              a request stops after producing this id (default: the config's)\n"
    "  --tf32                TF32 tensor cores in the products\n"
    "  --json FILE           write the results as JSON\n"
    "  --cupti               one more, untimed run of each configuration under CUPTI: the\n"
    "                        GPU's idle time as the profiler sees it, kernels per step\n"
    "  --dump-requests FILE  write each request's slot and tokens, one request a line\n"
    "  --help                this text\n"
    "This chapter serves a trace, not one batch: --batch and --new-tokens belong to\n"
    "chapters 00-10.\n"
    "\nexit codes\n"
    "  0  the table was printed\n"
    "  1  a bad file (trace, config, weights) or a runtime error\n"
    "  2  a bad command line, a trace that breaks the limits, more slots than fit\n"
    "  3  no CUDA device (no NVIDIA GPU or driver)\n";

struct ServingOptions {
  std::string trace_file;
  TraceOptions trace;
  int slots = 32;
  std::optional<double> kv_cache_budget_gib;
  std::string weights_directory;
  std::string config_file;
  std::uint64_t seed = 0;
  std::optional<int> eos_token_id;
  bool allow_tf32 = false;
  std::string json_file;
  std::string dump_requests_file;
  bool cupti = false;
  bool help = false;
};

std::string text_after(int argc, char** argv, int& i) {
  const std::string flag = argv[i];
  if (i + 1 >= argc) throw std::invalid_argument(flag + ": needs a value");
  return argv[++i];
}

/// The range "A-B" after flag argv[i]: whole numbers 1 <= A <= B <= 1e6.
void range_after(int argc, char** argv, int& i, int& low, int& high) {
  const std::string flag = argv[i];
  const std::string text = text_after(argc, argv, i);
  char* end = nullptr;
  const long first = std::strtol(text.c_str(), &end, 10);
  const bool dash = end != text.c_str() && *end == '-';
  char* last_end = nullptr;
  const long last = dash ? std::strtol(end + 1, &last_end, 10) : 0;
  if (!dash || last_end == end + 1 || *last_end != '\0' || first < 1 || last < first ||
      last > 1000000)
    throw std::invalid_argument(flag + ": '" + text + "' is not a range A-B of whole numbers, " +
                                "1 <= A <= B");
  low = static_cast<int>(first);
  high = static_cast<int>(last);
}

ServingOptions parse_serving_options(int argc, char** argv) {
  ServingOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help") {
      options.help = true;
    } else if (flag == "--trace") {
      options.trace_file = text_after(argc, argv, i);
    } else if (flag == "--requests") {
      options.trace.requests = static_cast<int>(number_after_flag(argc, argv, i, 1, 1e7, true));
    } else if (flag == "--trace-seed") {
      options.trace.seed = static_cast<std::uint64_t>(number_after_flag(argc, argv, i, 0, 9e15, true));
    } else if (flag == "--rate") {
      options.trace.arrivals_per_second = number_after_flag(argc, argv, i, 0, 1e9, false);
    } else if (flag == "--prompt-lengths") {
      range_after(argc, argv, i, options.trace.min_prompt_length, options.trace.max_prompt_length);
    } else if (flag == "--output-limits") {
      range_after(argc, argv, i, options.trace.min_new_tokens, options.trace.max_new_tokens);
    } else if (flag == "--slots") {
      options.slots = static_cast<int>(number_after_flag(argc, argv, i, 1, 4096, true));
    } else if (flag == "--kv-cache-budget-gib") {
      options.kv_cache_budget_gib = number_after_flag(argc, argv, i, 0, 1e6, false);
    } else if (flag == "--weights") {
      options.weights_directory = text_after(argc, argv, i);
    } else if (flag == "--config") {
      options.config_file = text_after(argc, argv, i);
    } else if (flag == "--seed") {
      options.seed = static_cast<std::uint64_t>(number_after_flag(argc, argv, i, 0, 9e15, true));
    } else if (flag == "--eos") {
      options.eos_token_id = static_cast<int>(number_after_flag(argc, argv, i, -1, 1e9, true));
    } else if (flag == "--tf32") {
      options.allow_tf32 = true;
    } else if (flag == "--cupti") {
      options.cupti = true;
    } else if (flag == "--json") {
      options.json_file = text_after(argc, argv, i);
    } else if (flag == "--dump-requests") {
      options.dump_requests_file = text_after(argc, argv, i);
    } else {
      throw std::invalid_argument("unknown option '" + flag +
                                  "'; this chapter serves a trace (see --help)");
    }
  }
  if (!options.weights_directory.empty() && !options.config_file.empty())
    throw std::invalid_argument("--weights and --config: give one of them");
  return options;
}

// ---------------------------------------------------------------- the plan (no GPU)

/// Everything decided before the GPU is touched, so bad input is refused on any machine.
struct ServingPlan {
  ServingOptions options;
  Gpt2Config config;
  std::optional<Gpt2Weights> checkpoint;  ///< loaded up front so a bad file is refused anywhere
  int eos_token_id = 0;
  std::vector<Request> trace;
  int capacity = 0;  ///< positions per slot: the trace's longest P + N - 1
  std::string trace_description;
};

ServingPlan make_serving_plan(const ServingOptions& options) {
  ServingPlan plan;
  plan.options = options;
  if (!options.weights_directory.empty()) {
    plan.checkpoint = load_gpt2_checkpoint(options.weights_directory);
    plan.config = plan.checkpoint->config;
  } else if (!options.config_file.empty()) {
    plan.config = Gpt2Config::from_json_file(options.config_file);
  }
  plan.config.validate();
  const Gpt2Config& config = plan.config;
  plan.eos_token_id = options.eos_token_id.value_or(config.eos_token_id);
  if (plan.eos_token_id >= config.vocab_size)
    throw std::invalid_argument("--eos: id " + std::to_string(plan.eos_token_id) +
                                " is outside the vocabulary of " +
                                std::to_string(config.vocab_size));

  const TraceLimits limits{config.vocab_size, config.n_positions};
  if (!options.trace_file.empty()) {
    plan.trace = read_trace(options.trace_file, limits);
    plan.trace_description = options.trace_file;
  } else {
    TraceOptions trace = options.trace;
    trace.vocab_size = config.vocab_size;
    trace.excluded_id = config.eos_token_id;
    plan.trace = generate_trace(trace);
    validate_trace(plan.trace, limits);
    char description[160];
    char arrivals[64] = "all at time 0";
    if (trace.arrivals_per_second > 0)
      std::snprintf(arrivals, sizeof(arrivals), "Poisson arrivals (%g/s)",
                    trace.arrivals_per_second);
    std::snprintf(description, sizeof(description),
                  "%d requests (seed %llu), prompts %d-%d tokens, limits %d-%d, %s", trace.requests,
                  static_cast<unsigned long long>(trace.seed), trace.min_prompt_length,
                  trace.max_prompt_length, trace.min_new_tokens, trace.max_new_tokens, arrivals);
    plan.trace_description = description;
  }
  for (const Request& request : plan.trace)
    plan.capacity = std::max(plan.capacity,
                             static_cast<int>(request.prompt.size()) + request.max_new_tokens - 1);
  if (options.kv_cache_budget_gib)
    require_slots_fit(config, options.slots, plan.capacity, sizeof(float),
                      *options.kv_cache_budget_gib * (1 << 30));
  return plan;
}

// ---------------------------------------------------------------- the GPU back-end

// NEW in chapter 12: a static KV cache of S slots: every layer's keys (and values) for
// every slot, [n_layer, S, H, capacity, D]; slot s of layer l is one [H, capacity, D] block.
struct SlotKvCache {
  TypedBuffer<float> keys;
  TypedBuffer<float> values;
  int capacity = 0;
  std::size_t slot_floats = 0;   ///< H * capacity * D = capacity * C
  std::size_t layer_floats = 0;  ///< S * slot_floats
  TypedBuffer<char> attention_workspace;

  float* slot_keys(int layer_index, int slot) const {
    return keys + layer_index * layer_floats + slot * slot_floats;
  }
  float* slot_values(int layer_index, int slot) const {
    return values + layer_index * layer_floats + slot * slot_floats;
  }
};

// Activations for the largest step: the prefill's rows (up to prefill_rows) or S.
struct Activations {
  TypedBuffer<float> hidden;    ///< [rows, C]
  TypedBuffer<float> normed;    ///< [rows, C]
  TypedBuffer<float> qkv;       ///< [rows, 3C]
  TypedBuffer<float> attended;  ///< [rows, C]
  TypedBuffer<float> expanded;  ///< [rows, 4C]
  TypedBuffer<float> last;      ///< [S, C], each prefilled prompt's last position, after ln_f
  TypedBuffer<float> candidate_values;  ///< [max(S, prefills), ceil(V / 64)]
  TypedBuffer<std::int32_t> candidate_indices;
};

// NEW in chapter 12: what one step needs from the host, in one int32 array copied with one
// cudaMemcpyAsync from pinned memory. The first three parts have fixed places, read by
// the captured decode step; the prefill parts follow, as long as the step's prompts.
struct StagingLayout {
  int slots = 0;
  int attention_positions() const { return 0; }      ///< [S]: a row's position, -1 idle
  int embedding_positions() const { return slots; }  ///< [S]: the same, idle rows at 0
  int decode_slots() const { return 2 * slots; }     ///< [S]: row b's slot b, -1 idle
  int prefill_slots() const { return 3 * slots; }    ///< [prefills], then tokens, positions
  std::size_t capacity_ints(int capacity) const {
    return static_cast<std::size_t>(4 * slots) + 2 * static_cast<std::size_t>(slots) * capacity;
  }
};

/// GPU time of the steps, from events recorded around each one on the stream.
struct GpuTimeline {
  int steps = 0;
  double busy_ms = 0;         ///< sum over steps of (end - start)
  double idle_ms = 0;         ///< sum of the gaps between a step's end and the next one's start
  double span_ms = 0;         ///< first step's start to last step's end
  double host_launch_ms = 0;  ///< host time inside launch_step (planning is the scheduler's)
  double host_wait_ms = 0;    ///< host time waiting in finish_step for a step's tokens
};

class SlotDecoder final : public ServingBackend {
 public:
  SlotDecoder(const DeviceModel& model, int slots, int capacity, bool allow_tf32)
      : model_(model),
        config_(model.config()),
        slots_(slots),
        capacity_(capacity),
        prefill_rows_(std::max(capacity, 2048)),
        allocator_(make_device_allocator("caching")),
        // Chapter 09's products: programmatic dependent launches, in the prefill's plain
        // launches and in the decode step's graph alike.
        step_(model, allow_tf32, DecodeLaunch::kProgrammatic),
        layout_{slots} {
    const cudaStream_t stream = step_.stream();
    const int C = config_.n_embd;
    const std::size_t rows = static_cast<std::size_t>(std::max(prefill_rows_, slots));
    cache_.capacity = capacity;
    cache_.slot_floats = static_cast<std::size_t>(capacity) * C;
    cache_.layer_floats = static_cast<std::size_t>(slots) * cache_.slot_floats;
    cache_.keys = allocate<float>(config_.n_layer * cache_.layer_floats);
    cache_.values = allocate<float>(config_.n_layer * cache_.layer_floats);
    cache_.attention_workspace =
        allocate<char>(fused_decode_attention_workspace_bytes(slots, config_.n_head, C, capacity));
    CUDA_CHECK(
        cudaMemsetAsync(cache_.attention_workspace, 0, cache_.attention_workspace.bytes(), stream));
    activations_.hidden = allocate<float>(rows * C);
    activations_.normed = allocate<float>(rows * C);
    activations_.qkv = allocate<float>(rows * 3 * C);
    activations_.attended = allocate<float>(rows * C);
    activations_.expanded = allocate<float>(rows * 4 * C);
    activations_.last = allocate<float>(static_cast<std::size_t>(slots) * C);
    const std::size_t candidates =
        static_cast<std::size_t>(slots) * decode_lm_head_candidates(config_.vocab_size);
    activations_.candidate_values = allocate<float>(candidates);
    activations_.candidate_indices = allocate<std::int32_t>(candidates);
    // Every slot's last token starts as id 0, so an idle row always embeds a real id.
    last_tokens_ = allocate<std::int32_t>(static_cast<std::size_t>(slots));
    CUDA_CHECK(cudaMemsetAsync(last_tokens_, 0, sizeof(std::int32_t) * slots, stream));
    staging_ = allocate<std::int32_t>(layout_.capacity_ints(capacity));
    for (int ring = 0; ring < kRing; ++ring) {
      host_staging_.push_back(
          std::make_unique<PinnedArray<std::int32_t>>(layout_.capacity_ints(capacity)));
      host_tokens_.push_back(std::make_unique<PinnedArray<std::int32_t>>(slots));
      step_started_.emplace_back();
      step_done_.emplace_back();
    }
    // Every row idle (position -1, no slot), embedding at position 0: the decode step run
    // on this writes nothing, so running it once plainly (loading every kernel) and then
    // capturing it leaves the slots as they were.
    CUDA_CHECK(cudaMemsetAsync(staging_, 0xff, sizeof(std::int32_t) * 3 * slots, stream));
    CUDA_CHECK(cudaMemsetAsync(staging_ + layout_.embedding_positions(), 0,
                               sizeof(std::int32_t) * slots, stream));
    decode_step();
    decode_graph_.emplace(capture_graph(
                              stream, [&] { decode_step(); }, "decode step"),
                          "decode step");
    synchronize_stage(stream, "the decoder's set-up");
  }

  int slot_count() const override { return slots_; }
  int slot_capacity() const override { return capacity_; }
  const GpuTimeline& timeline() const { return timeline_; }
  void reset_timeline() {
    timeline_ = GpuTimeline{};
    have_previous_end_ = false;
  }

  // NEW in chapter 12: one step of the plan, enqueued without waiting: stage, copy,
  // prefill the admitted prompts, replay the decode step, copy the slots' tokens back.
  void launch_step(const StepPlan& plan) override {
    NvtxRange range("launch step");
    const auto host_start = std::chrono::steady_clock::now();
    // A plan outside the slots would write another slot's cache: refused before any launch.
    check_step_plan(plan, slots_, capacity_);
    const cudaStream_t stream = step_.stream();
    const int ring = static_cast<int>(launched_ % kRing);
    // The pinned buffers of this ring entry were last used kRing steps ago; the scheduler
    // keeps at most two in flight, so that step has finished (this returns at once).
    CUDA_CHECK(cudaEventSynchronize(step_done_[ring].get()));

    PinnedArray<std::int32_t>& staged = *host_staging_[ring];
    const std::size_t staged_ints = stage(plan, staged);
    CUDA_CHECK(cudaEventRecord(step_started_[ring].get(), stream));
    CUDA_CHECK(cudaMemcpyAsync(staging_, staged.get(), staged_ints * sizeof(std::int32_t),
                               cudaMemcpyHostToDevice, stream));
    if (!plan.prefills.empty()) prefill(plan.prefills);
    if (!plan.decodes.empty()) decode_graph_->launch(stream);
    CUDA_CHECK(cudaMemcpyAsync(host_tokens_[ring]->get(), last_tokens_,
                               sizeof(std::int32_t) * slots_, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaEventRecord(step_done_[ring].get(), stream));

    std::vector<int> row_slots;
    row_slots.reserve(plan.rows());
    for (const PrefillRow& row : plan.prefills) row_slots.push_back(row.slot);
    for (const DecodeRow& row : plan.decodes) row_slots.push_back(row.slot);
    in_flight_.push_back(InFlightStep{ring, std::move(row_slots)});
    ++launched_;
    timeline_.host_launch_ms += elapsed_ms_since(host_start);
  }

  std::vector<std::int32_t> finish_step() override {
    if (in_flight_.empty()) throw std::logic_error("finish_step: no step was launched");
    const InFlightStep step = std::move(in_flight_.front());
    in_flight_.pop_front();
    const auto host_start = std::chrono::steady_clock::now();
    synchronize_stage(step_done_[step.ring].get(), "a serving step");
    timeline_.host_wait_ms += elapsed_ms_since(host_start);

    // NEW in chapter 12: the GPU's own clock says how long the step ran and how long the
    // GPU sat idle before it (the host had not enqueued it yet).
    const float busy_ms = elapsed_event_ms(step_started_[step.ring], step_done_[step.ring]);
    timeline_.busy_ms += busy_ms;
    if (have_previous_end_) {
      const float gap_ms = elapsed_event_ms(step_done_[previous_ring_], step_started_[step.ring]);
      timeline_.idle_ms += std::max(0.0f, gap_ms);
      timeline_.span_ms += std::max(0.0f, gap_ms) + busy_ms;
    } else {
      timeline_.span_ms += busy_ms;
    }
    have_previous_end_ = true;
    previous_ring_ = step.ring;
    ++timeline_.steps;

    const PinnedArray<std::int32_t>& tokens_by_slot = *host_tokens_[step.ring];
    std::vector<std::int32_t> tokens;
    tokens.reserve(step.row_slots.size());
    for (int slot : step.row_slots) tokens.push_back(tokens_by_slot[slot]);
    return tokens;
  }

 private:
  static constexpr int kRing = 4;  ///< staging buffers and events: > 2 steps in flight + 1

  struct InFlightStep {
    int ring = 0;
    std::vector<int> row_slots;  ///< per plan row, prefills then decodes
  };

  template <typename T>
  TypedBuffer<T> allocate(std::size_t count) {
    return TypedBuffer<T>(*allocator_, count, step_.stream());
  }

  static double elapsed_ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  }

  static float elapsed_event_ms(const CudaEvent& from, const CudaEvent& to) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, from.get(), to.get()));
    return ms;
  }

  // NEW in chapter 12: the host's share of a step, done while the GPU runs the step
  // before: every slot's position (or -1), its slot for the argmax, the prompts.
  std::size_t stage(const StepPlan& plan, PinnedArray<std::int32_t>& staged) const {
    for (int slot = 0; slot < slots_; ++slot) {
      staged[layout_.attention_positions() + slot] = -1;
      staged[layout_.embedding_positions() + slot] = 0;
      staged[layout_.decode_slots() + slot] = -1;
    }
    for (const DecodeRow& row : plan.decodes) {
      staged[layout_.attention_positions() + row.slot] = row.position;
      staged[layout_.embedding_positions() + row.slot] = row.position;
      staged[layout_.decode_slots() + row.slot] = row.slot;
    }
    std::size_t next = static_cast<std::size_t>(layout_.prefill_slots());
    for (const PrefillRow& row : plan.prefills) staged[next++] = row.slot;
    for (const PrefillRow& row : plan.prefills)
      for (std::int32_t token : row.prompt) staged[next++] = token;
    for (const PrefillRow& row : plan.prefills)
      for (int t = 0; t < static_cast<int>(row.prompt.size()); ++t) staged[next++] = t;
    return next;
  }

  // NEW in chapter 12: the step's admitted prompts, batched: the products run over all
  // their rows at once (each weight read once per group of up to prefill_rows_ rows),
  // attention and the cache store per prompt, into the prompt's own slot, at positions
  // 0 .. P - 1. Each prompt's last position predicts its first token, left in its slot's
  // last token for the decode steps to feed. The other slots are not touched.
  void prefill(const std::vector<PrefillRow>& prefills) {
    NvtxRange range("prefill");
    const cudaStream_t stream = step_.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    const std::int32_t* slots_of = staging_ + layout_.prefill_slots();
    const std::int32_t* tokens = slots_of + prefills.size();
    std::size_t total_rows = 0;
    for (const PrefillRow& row : prefills) total_rows += row.prompt.size();
    const std::int32_t* positions = tokens + total_rows;

    std::size_t first = 0;      // this group's first prompt
    std::size_t first_row = 0;  // and its first row
    while (first < prefills.size()) {
      std::size_t end = first;
      std::size_t rows = 0;
      while (end < prefills.size() &&
             rows + prefills[end].prompt.size() <= static_cast<std::size_t>(prefill_rows_))
        rows += prefills[end++].prompt.size();
      launch_embedding(tokens + first_row, positions + first_row, model_.token_embedding(),
                       model_.position_embedding(), activations_.hidden, static_cast<int>(rows), C,
                       stream);
      layers(activations_, static_cast<int>(rows),
             [&](int layer_index, const float* qkv, float* attended) {
               std::size_t row = 0;
               for (std::size_t p = first; p < end; ++p) {
                 const int T = static_cast<int>(prefills[p].prompt.size());
                 const int slot = prefills[p].slot;
                 launch_store_kv_sequence(qkv + row * 3 * C, cache_.slot_keys(layer_index, slot),
                                          cache_.slot_values(layer_index, slot),
                                          /*first_position=*/0, T, cache_.capacity, /*B=*/1, H, C,
                                          stream);
                 launch_causal_attention(qkv + row * 3 * C, attended + row * C, /*B=*/1, T, H, C,
                                         stream);
                 row += static_cast<std::size_t>(T);
               }
             });
      // Each prompt's last position, after ln_f, for the LM head.
      std::size_t row = 0;
      for (std::size_t p = first; p < end; ++p) {
        row += prefills[p].prompt.size();
        CUDA_CHECK(cudaMemcpyAsync(activations_.last + (p - first) * C,
                                   activations_.normed + (row - 1) * C, sizeof(float) * C,
                                   cudaMemcpyDeviceToDevice, stream));
      }
      const int group = static_cast<int>(end - first);
      const ArgmaxCandidates candidates =
          step_.lm_head(activations_.last, nullptr, activations_.candidate_values,
                        activations_.candidate_indices, group, C, config_.vocab_size);
      launch_argmax_into_slots(candidates, slots_of + first, last_tokens_, group, stream);
      first = end;
      first_row += rows;
    }
  }

  // NEW in chapter 12: chapter 09's decode step over all S slots, each row at its own
  // position (staged); captured once, replayed every step.
  void decode_step() {
    const cudaStream_t stream = step_.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    const std::int32_t* attention_positions = staging_ + layout_.attention_positions();
    launch_embedding(last_tokens_, staging_ + layout_.embedding_positions(),
                     model_.token_embedding(), model_.position_embedding(), activations_.hidden,
                     slots_, C, stream);
    layers(activations_, slots_, [&](int layer_index, const float* qkv, float* attended) {
      launch_fused_decode_attention_per_row(qkv, cache_.slot_keys(layer_index, 0),
                                            cache_.slot_values(layer_index, 0), attention_positions,
                                            cache_.capacity, attended, cache_.attention_workspace,
                                            slots_, H, C, stream);
    });
    const ArgmaxCandidates candidates =
        step_.lm_head(activations_.normed, nullptr, activations_.candidate_values,
                      activations_.candidate_indices, slots_, C, config_.vocab_size);
    launch_argmax_into_slots(candidates, staging_ + layout_.decode_slots(), last_tokens_, slots_,
                             stream);
  }

  /// GPT-2's layers over `rows` rows of activations.hidden, ending in ln_f's output in
  /// activations.normed (chapter 09's); `attend(layer_index, qkv, attended)` is attention.
  template <typename Attention>
  void layers(const Activations& activations, int rows, const Attention& attend) {
    const cudaStream_t stream = step_.stream();
    const int C = config_.n_embd;
    const float eps = config_.layer_norm_epsilon;
    float* hidden = activations.hidden;
    float* normed = activations.normed;
    float* qkv = activations.qkv;
    float* attended = activations.attended;
    float* expanded = activations.expanded;
    const DeviceLayer first_layer = model_.layer(0);
    launch_layernorm(hidden, first_layer.ln_1_weight, first_layer.ln_1_bias, normed, rows, C, eps,
                     stream);
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const DeviceLayer layer = model_.layer(layer_index);
      const PackedDecodeModel::Layer packed = step_.layer(layer_index);
      {
        NvtxRange range("attention block");
        step_.linear(normed, packed.qkv_weight, layer.qkv_bias, qkv, rows, C, 3 * C,
                     DecodeEpilogue::kBias);
        attend(layer_index, qkv, attended);
        step_.linear(attended, packed.attn_proj_weight, layer.attn_proj_bias, hidden, rows, C, C,
                     DecodeEpilogue::kBiasResidual);
        launch_layernorm(hidden, layer.ln_2_weight, layer.ln_2_bias, normed, rows, C, eps, stream);
      }
      {
        NvtxRange range("mlp block");
        step_.linear(normed, packed.fc_weight, layer.fc_bias, expanded, rows, C, 4 * C,
                     DecodeEpilogue::kBiasGelu);
        step_.linear(expanded, packed.mlp_proj_weight, layer.mlp_proj_bias, hidden, rows, 4 * C, C,
                     DecodeEpilogue::kBiasResidual);
        const bool last = layer_index + 1 == config_.n_layer;
        const DeviceLayer next = last ? layer : model_.layer(layer_index + 1);
        launch_layernorm(hidden, last ? model_.ln_f_weight() : next.ln_1_weight,
                         last ? model_.ln_f_bias() : next.ln_1_bias, normed, rows, C, eps, stream);
      }
    }
  }

  const DeviceModel& model_;
  const Gpt2Config config_;
  const int slots_;
  const int capacity_;
  const int prefill_rows_;  ///< rows of one prefill forward, at least one whole prompt
  std::unique_ptr<DeviceAllocator> allocator_;
  DecodeStepContext step_;
  StagingLayout layout_;
  SlotKvCache cache_;
  Activations activations_;
  TypedBuffer<std::int32_t> last_tokens_;  ///< [S]: each slot's last output token
  TypedBuffer<std::int32_t> staging_;      ///< the step's StagingLayout, on the device
  std::vector<std::unique_ptr<PinnedArray<std::int32_t>>> host_staging_;  ///< [kRing]
  std::vector<std::unique_ptr<PinnedArray<std::int32_t>>> host_tokens_;   ///< [kRing][S]
  std::vector<CudaEvent> step_started_;
  std::vector<CudaEvent> step_done_;
  std::optional<CudaGraphExec> decode_graph_;
  std::deque<InFlightStep> in_flight_;
  long long launched_ = 0;
  GpuTimeline timeline_;
  bool have_previous_end_ = false;
  int previous_ring_ = 0;
};

// ---------------------------------------------------------------- serving and reporting

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

// NEW in chapter 12: the profiler's view of the same serving (its own run: CUPTI's
// bookkeeping slows the host, so the timed run is the one without it). Empty when a
// tool already holds CUPTI.
std::optional<TracedServing> trace_serving(const ServingPlan& plan, SlotDecoder& decoder,
                                           const SchedulerOptions& scheduler) {
  std::optional<GpuActivityTrace> trace;
  try {
    trace.emplace();
  } catch (const CudaError& error) {
    std::fprintf(stderr, "note: no GPU activity trace (%s)\n", error.what());
    return std::nullopt;
  }
  SteadyClock clock;
  const ServingResult result = serve_requests(plan.trace, decoder, scheduler, clock);
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

ServedConfiguration serve(const std::string& name, const ServingPlan& plan, SlotDecoder& decoder,
                          BatchingPolicy policy, int steps_in_flight) {
  ServedConfiguration served;
  served.name = name;
  served.scheduler.policy = policy;
  served.scheduler.eos_token_id = plan.eos_token_id;
  served.scheduler.steps_in_flight = steps_in_flight;
  // Warm-up, not timed: the slot count's first requests, two tokens each.
  std::vector<Request> warmup(
      plan.trace.begin(),
      plan.trace.begin() + std::min<std::size_t>(plan.trace.size(), decoder.slot_count()));
  for (Request& request : warmup) {
    request.arrival_ms = 0;
    request.max_new_tokens = std::min(request.max_new_tokens, 2);
  }
  SimulatedClock warmup_clock(1.0);
  serve_requests(warmup, decoder, served.scheduler, warmup_clock);

  NvtxRange range(name.c_str());
  decoder.reset_timeline();
  SteadyClock clock;
  served.result = serve_requests(plan.trace, decoder, served.scheduler, clock);
  served.summary = summarize_serving(served.result);
  served.timeline = decoder.timeline();
  if (plan.options.cupti) served.traced = trace_serving(plan, decoder, served.scheduler);
  return served;
}

double idle_fraction(const GpuTimeline& timeline) {
  return timeline.span_ms > 0 ? timeline.idle_ms / timeline.span_ms : 0;
}

void print_table(const std::vector<ServedConfiguration>& served) {
  std::printf(
      "\n| serving | output tokens/s | steps | GPU busy ms/step | GPU idle | host launch "
      "ms/step | latency p50 ms | latency p99 ms | first token p99 ms | slot use |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const ServedConfiguration& s : served) {
    const double steps = std::max(1, s.timeline.steps);
    std::printf("| %s | %.0f | %d | %.3f | %.1f%% | %.3f | %.1f | %.1f | %.1f | %.1f%% |\n",
                s.name.c_str(), s.summary.output_tokens_per_second, s.summary.steps,
                s.timeline.busy_ms / steps, 100 * idle_fraction(s.timeline),
                s.timeline.host_launch_ms / steps, s.summary.latency_p50_ms,
                s.summary.latency_p99_ms, s.summary.first_token_p99_ms, 100 * s.summary.slot_use);
  }
  for (const ServedConfiguration& s : served) {
    if (!s.traced) continue;
    std::printf(
        "CUPTI, %s: GPU idle %.2f%%, %.1f kernels and %.2f graph launches per step, host "
        "inside CUDA calls %.3f ms per step\n",
        s.name.c_str(), 100 * s.traced->idle_fraction, s.traced->kernels_per_step,
        s.traced->graph_launches_per_step, s.traced->host_api_ms_per_step);
  }
  const ServedConfiguration& baseline = served.front();
  for (std::size_t i = 1; i < served.size(); ++i)
    std::printf(
        "%s / %s: %.2fx the output tokens/s\n", served[i].name.c_str(), baseline.name.c_str(),
        served[i].summary.output_tokens_per_second / baseline.summary.output_tokens_per_second);
}

void write_json(const std::string& path, const ServingPlan& plan, const std::string& device,
                const std::vector<ServedConfiguration>& served) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error(path + ": cannot be written; check the folder exists");
  char buffer[512];
  out << "{\n  \"chapter\": \"12_continuous_batching\",\n  \"device\": \"" << device
      << "\",\n  \"trace\": \"" << plan.trace_description
      << "\",\n  \"requests\": " << plan.trace.size() << ",\n  \"slots\": " << plan.options.slots
      << ",\n  \"capacity\": " << plan.capacity << ",\n  \"configurations\": [\n";
  for (std::size_t i = 0; i < served.size(); ++i) {
    const ServedConfiguration& s = served[i];
    const ServingSummary& m = s.summary;
    const double window_ms = std::max(m.elapsed_ms / 200.0, 1e-3);
    std::snprintf(
        buffer, sizeof(buffer),
        "    {\"name\": \"%s\", \"policy\": \"%s\", \"steps_in_flight\": %d,\n"
        "     \"output_tokens\": %lld, \"elapsed_ms\": %.3f, \"output_tokens_per_second\": "
        "%.1f, \"steps\": %d,\n",
        s.name.c_str(), s.scheduler.policy == BatchingPolicy::continuous ? "continuous" : "static",
        s.scheduler.steps_in_flight, m.output_tokens, m.elapsed_ms, m.output_tokens_per_second,
        m.steps);
    out << buffer;
    std::snprintf(buffer, sizeof(buffer),
                  "     \"gpu_busy_ms\": %.3f, \"gpu_idle_ms\": %.3f, \"gpu_span_ms\": %.3f, "
                  "\"gpu_idle_fraction\": %.5f, \"host_launch_ms\": %.3f, \"host_wait_ms\": "
                  "%.3f, \"waiting_for_arrivals_ms\": %.3f,\n",
                  s.timeline.busy_ms, s.timeline.idle_ms, s.timeline.span_ms,
                  idle_fraction(s.timeline), s.timeline.host_launch_ms, s.timeline.host_wait_ms,
                  m.waiting_ms);
    out << buffer;
    std::snprintf(buffer, sizeof(buffer),
                  "     \"latency_p50_ms\": %.3f, \"latency_p99_ms\": %.3f, "
                  "\"first_token_p50_ms\": %.3f, \"first_token_p99_ms\": %.3f, \"slot_use\": "
                  "%.5f, \"mean_busy_slots\": %.3f, \"padding_rows\": %lld, "
                  "\"speculative_rows\": %lld,\n",
                  m.latency_p50_ms, m.latency_p99_ms, m.first_token_p50_ms, m.first_token_p99_ms,
                  m.slot_use, m.mean_busy_slots, m.padding_rows, m.speculative_rows);
    out << buffer;
    if (s.traced) {
      std::snprintf(buffer, sizeof(buffer),
                    "     \"cupti_gpu_idle_fraction\": %.5f, \"cupti_kernels_per_step\": %.2f, "
                    "\"cupti_graph_launches_per_step\": %.3f, \"cupti_host_api_ms_per_step\": "
                    "%.4f,\n",
                    s.traced->idle_fraction, s.traced->kernels_per_step,
                    s.traced->graph_launches_per_step, s.traced->host_api_ms_per_step);
      out << buffer;
    }
    out << "     \"busy_slots_window_ms\": " << window_ms << ", \"busy_slots\": [";
    const std::vector<double> busy = busy_slots_over_time(s.result, window_ms);
    for (std::size_t w = 0; w < busy.size(); ++w) {
      std::snprintf(buffer, sizeof(buffer), "%s%.2f", w == 0 ? "" : ", ", busy[w]);
      out << buffer;
    }
    out << "]}" << (i + 1 < served.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
}

/// One line per request of every configuration, in trace order, for the tests:
/// "configuration request slot token ...", the configuration counted from 0 in the
/// table's order.
void dump_requests(const std::string& path, const std::vector<ServedConfiguration>& served) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error(path + ": cannot be written; check the folder exists");
  for (std::size_t c = 0; c < served.size(); ++c) {
    const std::vector<RequestRecord>& requests = served[c].result.requests;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      out << c << ' ' << i << ' ' << requests[i].slot;
      for (std::int32_t token : requests[i].tokens) out << ' ' << token;
      out << '\n';
    }
  }
}

int serve_trace(const ServingPlan& plan) {
  require_cuda_device();
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  const Gpt2Weights random_weights =
      plan.checkpoint ? Gpt2Weights{} : random_gpt2_weights(plan.config, plan.options.seed);
  const DeviceModel model(plan.checkpoint ? *plan.checkpoint : random_weights);
  if (!plan.options.kv_cache_budget_gib) {
    // The cache must fit beside the packed weights and the activations: half of what is
    // free now is its budget.
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    require_slots_fit(plan.config, plan.options.slots, plan.capacity, sizeof(float),
                      0.5 * static_cast<double>(free_bytes));
  }
  std::printf("12_continuous_batching: continuous batching on %s\n", properties.name);
  std::printf("trace: %s; %d slots of %d positions; EOS %d\n", plan.trace_description.c_str(),
              plan.options.slots, plan.capacity, plan.eos_token_id);
  SlotDecoder decoder(model, plan.options.slots, plan.capacity, plan.options.allow_tf32);

  std::vector<ServedConfiguration> served;
  // The baseline first: static batches of S in arrival order, each waiting for its
  // longest request, with the host one step ahead as in chapters 06-10.
  served.push_back(serve("static batches", plan, decoder, BatchingPolicy::static_batches, 2));
  // NEW in chapter 12: continuous batching, without and with the host one step ahead.
  served.push_back(serve("continuous, host waits", plan, decoder, BatchingPolicy::continuous, 1));
  served.push_back(serve("continuous", plan, decoder, BatchingPolicy::continuous, 2));
  print_table(served);
  if (!plan.options.json_file.empty())
    write_json(plan.options.json_file, plan, properties.name, served);
  if (!plan.options.dump_requests_file.empty())
    dump_requests(plan.options.dump_requests_file, served);
  return kExitSuccess;
}

}  // namespace

int main(int argc, char** argv) {
  return exit_code_reporting_errors("12_continuous_batching", [&] {
    const ServingOptions options = parse_serving_options(argc, argv);
    if (options.help) {
      std::fputs(kUsage, stdout);
      return static_cast<int>(kExitSuccess);
    }
    return serve_trace(make_serving_plan(options));
  });
}
