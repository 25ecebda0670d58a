// chapters/12_continuous_batching/continuous_batching.cpp - rung 12: a stream of requests
// served from 32 slots of a static KV cache, each slot refilled as soon as its request ends,
// beside the same trace served in static batches; the step is chapter 10's bf16 step.
// Built on: chapters/10_mixed_precision
//
// Every chapter before this one serves one batch: the rows start together and the batch
// runs until its slowest row is done. Here the input is a trace of requests with their own
// prompt lengths, output limits and arrival times (common/request_trace.hpp), and the host
// scheduler of common/continuous_batching.hpp decides every step which slot does what:
// a finished request's slot takes the next waiting request at once. The GPU side is this
// file's SlotDecoder, the scheduler's back-end:
//   * the decode step runs all S slots with a slot and a position per row: each row embeds
//     its slot's last token at its own position, appends its keys and values at that
//     position of its own slot and attends over its own length (the per-row bf16
//     attention, kernels/cache_attention_bf16.cuh); a slot that sits the step out has slot
//     -1. The step's shape never changes, so it is captured once as a CUDA graph (chapter
//     07) and replayed; the per-row slots and positions live in device memory.
//   * a newly admitted request's prompt is prefilled into its slot in the step that admits
//     it, before that step's decode, the step's prompts batched into one forward (the
//     products over all their rows at once; the rows position-major, as chapter 10's
//     prefill, and attention one position at a time, each row in its prompt's slot):
//     whole prompts, not chunks, since prompts here are short next to outputs
//     (docs/continuous_batching.md).
//   * the host keeps two steps in flight: while the GPU runs step k it plans step k + 1,
//     fills a pinned staging buffer (slots, positions, prompts) and enqueues its
//     asynchronous copy and launches; only each step's tokens come back, one per slot.
// The model, its products, LayerNorms and precision are chapter 10's (bf16 storage, fp32
// arithmetic; its oracle the CPU reference's bf16 mode): the serving changes which rows a
// step runs and where their keys and values go, not what a row computes.
//
// Run:      build/current/chapters/12_continuous_batching          (the default trace:
//           512 requests, prompts 4-64, limits 16-256, all at time 0, 32 slots)
//           ... --rate 200                   Poisson arrivals, 200 requests/s
//           ... --trace my_trace.txt         a user's trace (format: common/request_trace.hpp)
//           ... --json out.json              the table and slots-busy series, for the plot
// Profile:  nsys profile -t cuda,nvtx build/current/chapters/12_continuous_batching
//
// Notation: S slots, each of `capacity` positions (the trace's longest prompt + limit);
// C = n_embd, H heads, D = C / H, V vocabulary; a request of P prompt tokens and N new.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "common/bfloat16_decode_step_context.hpp"
#include "common/bfloat16_device_model.hpp"
#include "common/continuous_batching.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_event.hpp"
#include "common/cuda_graph.hpp"
#include "common/nvtx.hpp"
#include "common/pinned_flag.hpp"
#include "common/serving_report.hpp"
#include "common/weights.hpp"
#include "kernels/cache_attention_bf16.cuh"
#include "kernels/decode_matmul_bf16.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/sampling.cuh"

namespace {

using namespace ladder;

// The step's precision, in one place: every number it stores between kernels (the
// activations and the KV cache) is a Value, and the step context and the model's layers
// are the ones whose kernels read and write Values. The logits and the argmax's
// candidates stay fp32 whatever Value is.
// Value is bf16; the step context and the model are the bf16 ones (chapter 10).
using Value = __nv_bfloat16;
using StepContext = BfloatDecodeStepContext;
using ModelLayer = BfloatDeviceLayer;

// NEW in chapter 12: a static KV cache of S slots: every layer's keys (and values) for
// every slot, [n_layer, S, H, capacity, D]; slot s of layer l is one [H, capacity, D]
// block, which the per-row attention picks by each row's slot. In bf16, exact copies of
// the rounded qkv (R4), as chapter 10's cache.
struct SlotKvCache {
  TypedBuffer<Value> keys;
  TypedBuffer<Value> values;
  int capacity = 0;
  std::size_t layer_elements = 0;  ///< S * capacity * C: one layer's keys (or values)

  Value* layer_keys(int layer_index) const { return keys + layer_index * layer_elements; }
  Value* layer_values(int layer_index) const { return values + layer_index * layer_elements; }
};

// Activations for the largest step: the prefill's rows (up to prefill_rows) or S.
// The prefill's rows position-major (every prompt's position 0, then position 1, ...).
struct Activations {
  TypedBuffer<Value> hidden;    ///< [rows, C], the residual stream
  TypedBuffer<Value> normed;    ///< [rows, C], a LayerNorm's output
  TypedBuffer<Value> qkv;       ///< [rows, 3C]
  TypedBuffer<Value> attended;  ///< [rows, C]
  TypedBuffer<Value> expanded;  ///< [rows, 4C], the MLP's hidden layer, after the GELU
  TypedBuffer<Value> last;      ///< [S, C], each prefilled prompt's last position, after ln_f
  TypedBuffer<float> candidate_values;  ///< [S, ceil(V / 64)]
  TypedBuffer<std::int32_t> candidate_indices;
};

// A LayerNorm's parameters, [C] each.
struct LayerNormParameters {
  const Value* weight;
  const Value* bias;
};

// NEW in chapter 12: what one step needs from the host, in one int32 array copied with one
// cudaMemcpyAsync from pinned memory. The first two parts have fixed places, read by the
// captured decode step; the prefill parts follow, as long as the step's prompts.
struct StagingLayout {
  int slots = 0;
  int decode_positions() const { return 0; }  ///< [S]: row b's position (0 when idle)
  int decode_slots() const { return slots; }  ///< [S]: row b's slot b, -1 idle
  int prefill_slots() const {
    return 2 * slots;
  }  ///< [prefills], then per row: tokens,
     ///< positions, slots (position-major)
  std::size_t capacity_ints(int capacity) const {
    return static_cast<std::size_t>(3 * slots) + 3 * static_cast<std::size_t>(slots) * capacity;
  }
};

// NEW in chapter 12: the admitted prompts of a step, in groups of at most prefill_rows
// rows, each group one forward with its rows position-major: position t holds the rows of
// the group's prompts longer than t, in prompt order.
struct PrefillGroup {
  std::size_t first = 0;     ///< the group's first prompt
  std::size_t end = 0;       ///< one past its last
  int rows = 0;              ///< its prompts' tokens
  std::vector<int> rows_at;  ///< [longest prompt]: how many rows position t holds
};

class SlotDecoder final : public TimedServingBackend {
 public:
  SlotDecoder(const Gpt2Weights& weights, int slots, int capacity)
      : model_(weights),
        config_(model_.config()),
        slots_(slots),
        capacity_(capacity),
        prefill_rows_(std::max(capacity, 2048)),
        allocator_(make_device_allocator("caching")),
        // Chapter 10's products: programmatic dependent launches, in the prefill's plain
        // launches and in the decode step's graph alike.
        step_(DecodeLaunch::kProgrammatic),
        layout_{slots} {
    const cudaStream_t stream = step_.stream();
    const int C = config_.n_embd;
    const std::size_t rows = static_cast<std::size_t>(std::max(prefill_rows_, slots));
    // The cache is not zeroed: the attention never reads a position that has not been
    // written.
    cache_.capacity = capacity;
    cache_.layer_elements = static_cast<std::size_t>(slots) * capacity * C;
    cache_.keys = allocate<Value>(config_.n_layer * cache_.layer_elements);
    cache_.values = allocate<Value>(config_.n_layer * cache_.layer_elements);
    activations_.hidden = allocate<Value>(rows * C);
    activations_.normed = allocate<Value>(rows * C);
    activations_.qkv = allocate<Value>(rows * 3 * C);
    activations_.attended = allocate<Value>(rows * C);
    activations_.expanded = allocate<Value>(rows * 4 * C);
    activations_.last = allocate<Value>(static_cast<std::size_t>(slots) * C);
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
    // Every row idle (no slot), embedding at position 0: the decode step run on this
    // writes nothing, so running it once plainly (loading every kernel) and then
    // capturing it leaves the slots as they were.
    CUDA_CHECK(cudaMemsetAsync(staging_ + layout_.decode_positions(), 0,
                               sizeof(std::int32_t) * slots, stream));
    CUDA_CHECK(cudaMemsetAsync(staging_ + layout_.decode_slots(), 0xff,
                               sizeof(std::int32_t) * slots, stream));
    decode_step(step_);
    decode_graph_.emplace(capture_graph(
                              stream, [&] { decode_step(step_); }, "decode step"),
                          "decode step");
    synchronize_stage(stream, "the decoder's set-up");
  }

  int slot_count() const override { return slots_; }
  int slot_capacity() const override { return capacity_; }
  const GpuTimeline& timeline() const override { return timeline_; }
  void reset_timeline() override {
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
    if (!plan.prefills.empty()) prefill(step_, plan.prefills);
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

  // NEW in chapter 12: the step's prompts in groups of at most prefill_rows_ rows (a
  // prompt never split), each group's rows position-major.
  std::vector<PrefillGroup> group_prefills(const std::vector<PrefillRow>& prefills) const {
    std::vector<PrefillGroup> groups;
    std::size_t first = 0;
    while (first < prefills.size()) {
      PrefillGroup group;
      group.first = first;
      group.end = first;
      while (group.end < prefills.size() &&
             group.rows + static_cast<int>(prefills[group.end].prompt.size()) <= prefill_rows_) {
        const int T = static_cast<int>(prefills[group.end++].prompt.size());
        group.rows += T;
        if (static_cast<int>(group.rows_at.size()) < T) group.rows_at.resize(T, 0);
        for (int t = 0; t < T; ++t) ++group.rows_at[t];
      }
      first = group.end;
      groups.push_back(std::move(group));
    }
    return groups;
  }

  // NEW in chapter 12: the host's share of a step, done while the GPU runs the step
  // before: every slot's position and slot (or -1) for the decode step, the prompts'
  // slots, and per prefill row (position-major) its token, position and slot.
  std::size_t stage(const StepPlan& plan, PinnedArray<std::int32_t>& staged) const {
    for (int slot = 0; slot < slots_; ++slot) {
      staged[layout_.decode_positions() + slot] = 0;
      staged[layout_.decode_slots() + slot] = -1;
    }
    for (const DecodeRow& row : plan.decodes) {
      staged[layout_.decode_positions() + row.slot] = row.position;
      staged[layout_.decode_slots() + row.slot] = row.slot;
    }
    std::size_t next = static_cast<std::size_t>(layout_.prefill_slots());
    for (const PrefillRow& row : plan.prefills) staged[next++] = row.slot;
    std::size_t total_rows = 0;
    for (const PrefillRow& row : plan.prefills) total_rows += row.prompt.size();
    std::size_t token_at = next;
    std::size_t position_at = next + total_rows;
    std::size_t slot_at = next + 2 * total_rows;
    for (const PrefillGroup& group : group_prefills(plan.prefills)) {
      for (int t = 0; t < static_cast<int>(group.rows_at.size()); ++t) {
        for (std::size_t p = group.first; p < group.end; ++p) {
          const PrefillRow& row = plan.prefills[p];
          if (t >= static_cast<int>(row.prompt.size())) continue;
          staged[token_at++] = row.prompt[t];
          staged[position_at++] = t;
          staged[slot_at++] = row.slot;
        }
      }
    }
    return slot_at;
  }

  // NEW in chapter 12: the step's admitted prompts, batched: the products run over all
  // their rows at once (each weight read once per group of up to prefill_rows_ rows), and
  // attention one position at a time over the rows that reach it, each row appending its
  // keys and values at its position of its prompt's own slot (as chapter 10's prefill,
  // with a slot per row). Each prompt's last position predicts its first token, left in
  // its slot's last token for the decode steps to feed. The other slots are not touched.
  void prefill(StepContext& step, const std::vector<PrefillRow>& prefills) {
    NvtxRange range("prefill");
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    const std::int32_t* slots_of = staging_ + layout_.prefill_slots();
    const std::int32_t* tokens = slots_of + prefills.size();
    std::size_t total_rows = 0;
    for (const PrefillRow& row : prefills) total_rows += row.prompt.size();
    const std::int32_t* positions = tokens + total_rows;
    const std::int32_t* row_slots = positions + total_rows;

    std::size_t first_row = 0;  // the group's first row
    for (const PrefillGroup& group : group_prefills(prefills)) {
      launch_embedding_bf16(tokens + first_row, positions + first_row, model_.token_embedding(),
                            model_.position_embedding(), activations_.hidden, group.rows, C,
                            stream);
      layers(step, activations_, group.rows,
             [&](int layer_index, const Value* qkv, Value* attended) {
               // Position t's rows append their keys and values at t and attend over 0 .. t, one
               // launch per position, in order, so each reads what the launches before it wrote.
               std::size_t row = 0;
               for (const int count : group.rows_at) {
                 launch_decode_attention_bf16_per_row(
                     qkv + row * 3 * C, cache_.layer_keys(layer_index),
                     cache_.layer_values(layer_index), row_slots + first_row + row,
                     positions + first_row + row, slots_, cache_.capacity, attended + row * C,
                     count, H, C, stream);
                 row += static_cast<std::size_t>(count);
               }
             });
      // Each prompt's last position, after ln_f, for the LM head: prompt p's row at
      // position T_p - 1 (the rows before it at that position are the prompts before p
      // that reach it).
      std::vector<std::size_t> position_start(group.rows_at.size(), 0);
      for (std::size_t t = 1; t < group.rows_at.size(); ++t)
        position_start[t] = position_start[t - 1] + static_cast<std::size_t>(group.rows_at[t - 1]);
      std::vector<std::size_t> taken(group.rows_at.size(), 0);
      for (std::size_t p = group.first; p < group.end; ++p) {
        const std::size_t last_position = prefills[p].prompt.size() - 1;
        for (std::size_t t = 0; t <= last_position; ++t) ++taken[t];
        const std::size_t row = position_start[last_position] + taken[last_position] - 1;
        CUDA_CHECK(cudaMemcpyAsync(activations_.last + (p - group.first) * C,
                                   activations_.normed + row * C, sizeof(Value) * C,
                                   cudaMemcpyDeviceToDevice, stream));
      }
      const int count = static_cast<int>(group.end - group.first);
      const ArgmaxCandidates candidates = step.lm_head(
          activations_.last, model_.lm_head_weight(), nullptr, activations_.candidate_values,
          activations_.candidate_indices, count, C, config_.vocab_size);
      launch_argmax_into_slots(candidates, slots_of + group.first, last_tokens_, count, stream);
      first_row += static_cast<std::size_t>(group.rows);
    }
  }

  // NEW in chapter 12: chapter 10's decode step over all S slots, each row at its own
  // slot and position (staged); captured once, replayed every step.
  void decode_step(StepContext& step) {
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    const std::int32_t* positions = staging_ + layout_.decode_positions();
    const std::int32_t* slots = staging_ + layout_.decode_slots();
    launch_embedding_bf16(last_tokens_, positions, model_.token_embedding(),
                          model_.position_embedding(), activations_.hidden, slots_, C, stream);
    layers(step, activations_, slots_, [&](int layer_index, const Value* qkv, Value* attended) {
      // Append k, v at each row's position of its slot and attend over its valid length;
      // launched as the products are (step.launch()), as in chapter 10.
      launch_decode_attention_bf16_per_row(qkv, cache_.layer_keys(layer_index),
                                           cache_.layer_values(layer_index), slots, positions,
                                           slots_, cache_.capacity, attended, slots_, H, C, stream,
                                           LaunchDependents::kAtStart, step.launch());
    });
    const ArgmaxCandidates candidates = step.lm_head(
        activations_.normed, model_.lm_head_weight(), nullptr, activations_.candidate_values,
        activations_.candidate_indices, slots_, C, config_.vocab_size);
    launch_argmax_into_slots(candidates, slots, last_tokens_, slots_, stream);
  }

  /// GPT-2's layers over `rows` rows of the residual stream (activations.hidden,
  /// [rows, C]), the same for the prefill and a decode step but for attention:
  /// `attend(layer_index, qkv, attended)` turns the layer's qkv [rows, 3C] into its
  /// attention output [rows, C].
  template <typename Attention>
  void layers(StepContext& step, const Activations& activations, int rows,
              const Attention& attend) {
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const float eps = config_.layer_norm_epsilon;
    Value* hidden = activations.hidden;
    Value* normed = activations.normed;
    Value* qkv = activations.qkv;
    Value* attended = activations.attended;
    Value* expanded = activations.expanded;
    // The first LayerNorm; every later one follows a product whose epilogue already added
    // its output to the residual stream.
    // Every LayerNorm launches as the products do (step.launch()): its
    // blocks load its weight and bias while the kernel before finishes.
    const LaunchDependents dependents = LaunchDependents::kAtStart;
    const ModelLayer first_layer = model_.layer(0);
    launch_layernorm_bf16(hidden, first_layer.ln_1_weight, first_layer.ln_1_bias, normed, rows, C,
                          eps, stream, dependents, step.launch());
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      // The matrices come packed with the biases, all in bf16 (chapter 10).
      const ModelLayer layer = model_.layer(layer_index);
      {
        NvtxRange range("attention block");
        step.linear(normed, layer.qkv_weight, layer.qkv_bias, qkv, rows, C, 3 * C,
                    DecodeEpilogue::kBias);
        attend(layer_index, qkv, attended);
        // hidden += attended W + b in the product's epilogue, so what
        // follows is a LayerNorm of one input.
        step.linear(attended, layer.attn_proj_weight, layer.attn_proj_bias, hidden, rows, C, C,
                    DecodeEpilogue::kBiasResidual);
        launch_layernorm_bf16(hidden, layer.ln_2_weight, layer.ln_2_bias, normed, rows, C, eps,
                              stream, dependents, step.launch());
      }
      {
        NvtxRange range("mlp block");
        // gelu(x W + b) in the product's epilogue, no GELU launch.
        step.linear(normed, layer.fc_weight, layer.fc_bias, expanded, rows, C, 4 * C,
                    DecodeEpilogue::kBiasGelu);
        // hidden += expanded W + b, then normalized for what comes next.
        step.linear(expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, hidden, rows, 4 * C, C,
                    DecodeEpilogue::kBiasResidual);
        const LayerNormParameters next = layernorm_after(layer_index);
        launch_layernorm_bf16(hidden, next.weight, next.bias, normed, rows, C, eps, stream,
                              dependents, step.launch());
      }
    }
  }

  // The LayerNorm that follows layer `layer_index`'s MLP and its
  // residual add: the next layer's ln_1, or ln_f after the last layer.
  LayerNormParameters layernorm_after(int layer_index) const {
    if (layer_index + 1 == config_.n_layer) return {model_.ln_f_weight(), model_.ln_f_bias()};
    const ModelLayer next_layer = model_.layer(layer_index + 1);
    return {next_layer.ln_1_weight, next_layer.ln_1_bias};
  }

  const BfloatDeviceModel model_;
  const Gpt2Config config_;
  const int slots_;
  const int capacity_;
  const int prefill_rows_;  ///< rows of one prefill forward, at least one whole prompt
  std::unique_ptr<DeviceAllocator> allocator_;
  StepContext step_;
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

/// The scheduler's back-end for a plan: this file's SlotDecoder.
std::unique_ptr<TimedServingBackend> make_slot_decoder(const Gpt2Weights& weights,
                                                       const ServingPlan& plan) {
  return std::make_unique<SlotDecoder>(weights, plan.options.slots, plan.capacity);
}

}  // namespace

int main(int argc, char** argv) {
  // A bf16 chapter, as chapter 10: its table says so, and its cache counts 2-byte values.
  return run_serving_chapter(
      argc, argv, {"12_continuous_batching", "continuous batching", StoredPrecision::bf16},
      make_slot_decoder);
}
