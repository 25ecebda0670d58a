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
// Notation: S slots, each of `capacity` positions (the trace's longest prompt + limit);
// C = n_embd, H heads, D = C / H, V vocabulary; a request of P prompt tokens and N new.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "common/continuous_batching.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_event.hpp"
#include "common/cuda_graph.hpp"
#include "common/decode_step_context.hpp"
#include "common/device_model.hpp"
#include "common/nvtx.hpp"
#include "common/pinned_flag.hpp"
#include "common/serving_report.hpp"
#include "common/weights.hpp"
#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/decode_matmul.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/sampling.cuh"

namespace {

using namespace ladder;

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

class SlotDecoder final : public TimedServingBackend {
 public:
  SlotDecoder(const Gpt2Weights& weights, int slots, int capacity, bool allow_tf32)
      : model_(weights),
        config_(model_.config()),
        slots_(slots),
        capacity_(capacity),
        prefill_rows_(std::max(capacity, 2048)),
        allocator_(make_device_allocator("caching")),
        // Chapter 09's products: programmatic dependent launches, in the prefill's plain
        // launches and in the decode step's graph alike.
        step_(model_, allow_tf32, DecodeLaunch::kProgrammatic),
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

  const DeviceModel model_;
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

/// The scheduler's back-end for a plan: this file's SlotDecoder.
std::unique_ptr<TimedServingBackend> make_slot_decoder(const Gpt2Weights& weights,
                                                       const ServingPlan& plan) {
  return std::make_unique<SlotDecoder>(weights, plan.options.slots, plan.capacity,
                                       plan.options.allow_tf32);
}

}  // namespace

int main(int argc, char** argv) {
  return run_serving_chapter(argc, argv, {"12_continuous_batching", "continuous batching"},
                             make_slot_decoder);
}
