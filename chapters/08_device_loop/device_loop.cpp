// chapters/08_device_loop/device_loop.cpp - rung 08: the whole generation as one CUDA
// graph, whose decode loop runs on the GPU (a conditional WHILE node).
//
// Chapter 07 enqueues a decode step with one launch, but the host still runs the loop:
// one launch per step, and a wait for step i - 1's flag before it may enqueue step
// i + 1. Here the loop itself moves into the graph. The graph holds the prefill and its
// argmax, then a WHILE node whose body is one decode step and its argmax; the body runs
// again as long as the loop's condition is nonzero. No host decides that: the argmax's
// last kernel, which already knows whether every row has finished and advances the
// step on the device, sets the condition with cudaGraphSetConditional - another step
// while some row is unfinished and steps remain. One launch and one wait per
// generation; the stop step is the one every chapter stops at, with no speculative
// step. A WHILE body holds only kernels, memsets, copies of memory the device can reach
// and nested graphs, so everything the host used to do between steps is gone from it: no
// flag is copied out (the host reads the cursor once, at the end) and the logits the
// tests compare are kept on the device, one row per step. One stream suffices. The
// first generation of a shape runs its first two steps plainly (cuBLASLt chooses its
// algorithms for the prefill's and the step's shapes outside any capture), puts back
// the state they changed, and captures. The kernels are chapter 05's.
//
// Run:      build/native/chapters/08_device_loop        (B = 32; N = 100, 200, 400)
// Profile:  nsys profile -t cuda,nvtx --cuda-graph-trace=node build/native/chapters/08_device_loop
//           --new-tokens 20 --batch 1   (on the host one cudaGraphLaunch and one wait per
//           generation; on the GPU the steps follow each other with no host in between)
//
// Notation: B rows, T prompt tokens, N new tokens, capacity = T + N cached positions,
// L = p + 1 valid positions at position p, C = n_embd, H heads, D = C / H, V vocabulary.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_graph.hpp"
#include "common/greedy_decoding.hpp"
#include "common/nvtx.hpp"
#include "common/step_context.hpp"
#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/decode_position.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/sampling.cuh"

namespace {

using namespace ladder;

// Room for the keys and values of every position the run can reach,
// every layer's in one block, allocated once.
struct StaticKvCache {
  TypedBuffer<float> keys;       ///< [n_layer, B, H, capacity, D]
  TypedBuffer<float> values;     ///< [n_layer, B, H, capacity, D]
  int capacity = 0;              ///< T + N positions
  std::size_t layer_floats = 0;  ///< B * capacity * C: one layer's keys (or values)
  // The fused attention's scratch (each split's partial softmax state
  // and a counter per head), zeroed once; every launch leaves the counters at zero
  // again, so the twelve layers and all the steps share it.
  TypedBuffer<char> attention_workspace;

  float* layer_keys(int layer_index) const { return keys + layer_index * layer_floats; }
  float* layer_values(int layer_index) const { return values + layer_index * layer_floats; }
};

// Every activation of a step, allocated once, sized for the
// prefill's B x T rows; a decode step uses the first B rows.
struct Activations {
  TypedBuffer<float> hidden;     ///< [rows, C], the residual stream
  TypedBuffer<float> normed;     ///< [rows, C], a LayerNorm's output
  TypedBuffer<float> qkv;        ///< [rows, 3C]
  TypedBuffer<float> attended;   ///< [rows, C]
  TypedBuffer<float> projected;  ///< [rows, C], c_proj's output (attention and MLP)
  TypedBuffer<float> expanded;   ///< [rows, 4C], the MLP's hidden layer, after the GELU
  TypedBuffer<float> last;       ///< [B, C], each row's last prompt position, after ln_f
  TypedBuffer<float> logits;     ///< [B, V]
};

// A LayerNorm's parameters, [C] each.
struct LayerNormParameters {
  const float* weight;
  const float* bias;
};

class Gpt2Decoder final : public Decoder {
 public:
  Gpt2Decoder(const DeviceModel& model, const DecoderOptions& options)
      : model_(model),
        config_(model.config()),
        eos_token_id_(options.eos_token_id),
        // The default caching allocator: nothing grows and nothing is allocated in
        // the loop, so there is nothing for it to strand.
        allocator_(make_device_allocator("caching")),
        // NEW in chapter 08: one stream again, with its cuBLASLt and workspace: the host no
        // longer runs ahead of a check.
        step_(*allocator_, options.allow_tf32) {
    // NEW in chapter 08: a GPU or driver without conditional graph nodes stops here.
    require_conditional_nodes();
  }

  DeviceAllocator& allocator() override { return *allocator_; }

  GenerationOutput generate(const PromptBatch& prompts, int max_new_tokens,
                            LogitsRecorder& logits) override {
    const int B = prompts.batch;
    const int T = prompts.length;
    const int V = config_.vocab_size;
    const cudaStream_t stream = step_.stream();

    // The prompts, [B, T]; only the prefill reads them.
    const TypedBuffer<std::int32_t> sequence = upload_prompt_tokens(*allocator_, prompts, stream);
    const GreedyBuffers greedy(*allocator_, prompts, max_new_tokens, eos_token_id_, stream);
    // Everything the loop touches is allocated here, once, for the
    // longest the run can get (Hugging Face's StaticCache: max_cache_len = T + N).
    const StaticKvCache cache = allocate_kv_cache(B, T + max_new_tokens, stream);
    const Activations activations = allocate_activations(B, T);
    const TypedBuffer<std::int32_t> next_tokens = allocate<std::int32_t>(B);
    // Where the loop stands lives on the device. Step 0 (the prefill)
    // predicts from the prompt's last token, at position T - 1; every argmax advances it.
    const TypedBuffer<DecodePosition> cursor = allocate<DecodePosition>(1);
    const DecodePosition start{/*step=*/0, /*position=*/T - 1};
    CUDA_CHECK(cudaMemcpyAsync(cursor, &start, sizeof(start), cudaMemcpyHostToDevice, stream));

    // NEW in chapter 08: the loop runs on the GPU, so the logits the tests compare
    // (--dump-logits) stay there until it ends, one row of [N, B, V] per step.
    const TypedBuffer<float> logits_history =
        logits.enabled() ? allocate<float>(static_cast<std::size_t>(max_new_tokens) * B * V)
                         : TypedBuffer<float>();
    // What a captured generation froze and may differ between
    // generations; equal to what the last capture froze, the graph is replayed.
    const GraphKey frozen = generation_graph_key(B, T, sequence, cache, activations, greedy, cursor,
                                                 next_tokens, logits_history);

    GenerationOutput output;
    output.batch = B;
    const std::uint64_t allocations_before_loop = allocator_->stats().allocations;
    // NEW in chapter 08: one step's forward pass - the prefill at step 0 - and, for the
    // tests, its logits kept in the step's row.
    const auto forward = [&](bool prefill_step) -> const float* {
      const float* step_logits =
          prefill_step ? prefill(step_, sequence, B, T, cache, activations)
                       : decode_step(step_, next_tokens, cursor, B, cache, activations);
      if (logits.enabled())
        launch_store_step_logits(step_logits, logits_history, cursor, B, V, max_new_tokens, stream);
      return step_logits;
    };
    CudaGraphExec* generation = generation_graph_.find(frozen);
    if (generation == nullptr) {
      // NEW in chapter 08: the first generation of this shape runs its first two steps
      // plainly (the prefill's products and the decode step's get their cuBLASLt plans,
      // every kernel is loaded), then puts back what the generation starts from: no row
      // finished, the cursor at the prompt's last token. The rest they wrote, the graph
      // writes again before reading it.
      for (const bool prefill_step : {true, false})
        launch_argmax_step(forward(prefill_step), next_tokens, greedy.state(), cursor, B, V,
                           stream);
      CUDA_CHECK(cudaMemsetAsync(greedy.state().finished, 0, sizeof(std::int32_t) * B, stream));
      CUDA_CHECK(cudaMemcpyAsync(cursor, &start, sizeof(start), cudaMemcpyHostToDevice, stream));

      // NEW in chapter 08: the generation graph. The condition starts every launch at 0;
      // the prefill's argmax sets it, then the WHILE node runs its body - a decode step
      // and its argmax, which sets it again - until it is 0.
      CudaGraph graph = CudaGraph::create();
      const cudaGraphConditionalHandle another_step = create_condition(graph, /*initial=*/0);
      cudaGraph_t loop_body = nullptr;
      capture_into_graph(
          graph.get(), stream,
          [&] {
            launch_argmax_step_in_graph_loop(forward(true), next_tokens, greedy.state(), cursor, B,
                                             V, another_step, stream);
            loop_body = add_while_node(stream, another_step);
          },
          "generation");
      capture_into_graph(
          loop_body, stream,
          [&] {
            launch_argmax_step_in_graph_loop(forward(false), next_tokens, greedy.state(), cursor, B,
                                             V, another_step, stream);
          },
          "decode loop body");
      generation = &generation_graph_.store(frozen, CudaGraphExec(graph, "generation"));
    }

    // NEW in chapter 08: the whole generation is one launch and one wait. A fault in any
    // step surfaces at the wait, named.
    generation->launch(stream);
    synchronize_stage(stream, "the generation graph");
    ++output.host_syncs;
    // The cursor says how many steps ran: every row finished at step s leaves it at s + 1.
    DecodePosition end{};
    CUDA_CHECK(cudaMemcpyAsync(&end, cursor, sizeof(end), cudaMemcpyDeviceToHost, stream));
    const int steps = end.step;
    if (logits.enabled()) {
      for (int step = 0; step < steps; ++step)
        logits.record(logits_history + static_cast<std::size_t>(step) * B * V, B, V, stream);
    }

    output.loop_allocations = allocator_->stats().allocations - allocations_before_loop;
    output.steps = steps;
    output.tokens = greedy.download_tokens(steps, stream);
    return output;
  }

  // The table's yardstick: this step's 49 products alone (common/step_context.hpp).
  double matmul_seconds_per_step(int batch) override {
    return decode_matmul_seconds(model_, step_, *allocator_, batch, LinearEpilogue::kBiasGelu);
  }

 private:
  template <typename T>
  TypedBuffer<T> allocate(std::size_t count) {
    return TypedBuffer<T>(*allocator_, count, step_.stream());
  }

  // Everything a captured generation froze that can change from one
  // generation to the next: the sizes, and the address of every buffer it touches (the
  // weights and the cuBLASLt workspace stay for the decoder's life). Every generation
  // allocates its buffers anew, and the caching allocator hands back the same addresses
  // for the same requests, so the next generation of a shape replays; any other shape,
  // or a buffer that moved, means a new capture.
  // NEW in chapter 08: the prefill's buffers and the logits kept for the tests too.
  static GraphKey generation_graph_key(int B, int T, const std::int32_t* sequence,
                                       const StaticKvCache& cache, const Activations& activations,
                                       const GreedyBuffers& greedy, const DecodePosition* cursor,
                                       const std::int32_t* next_tokens,
                                       const float* logits_history) {
    const GreedyState& state = greedy.state();
    GraphKey key;
    key.add_size(B).add_size(T).add_size(cache.capacity).add_size(state.max_steps);
    key.add_size(state.eos_id);
    key.add_addresses({sequence, cursor, next_tokens, cache.keys, cache.values,
                       cache.attention_workspace, activations.hidden, activations.normed,
                       activations.qkv, activations.attended, activations.projected,
                       activations.expanded, activations.last, activations.logits,
                       state.forced_tokens, state.finished, state.all_finished, state.output_tokens,
                       logits_history});
    return key;
  }

  // The cache is not zeroed: the fused attention never reads a position that
  // has not been written.
  StaticKvCache allocate_kv_cache(int B, int capacity, cudaStream_t stream) {
    StaticKvCache cache;
    cache.capacity = capacity;
    cache.layer_floats = static_cast<std::size_t>(B) * capacity * config_.n_embd;
    cache.keys = allocate<float>(config_.n_layer * cache.layer_floats);
    cache.values = allocate<float>(config_.n_layer * cache.layer_floats);
    cache.attention_workspace = allocate<char>(
        fused_decode_attention_workspace_bytes(B, config_.n_head, config_.n_embd, capacity));
    CUDA_CHECK(
        cudaMemsetAsync(cache.attention_workspace, 0, cache.attention_workspace.bytes(), stream));
    return cache;
  }

  // One buffer per kind of activation, big enough for the prefill.
  Activations allocate_activations(int B, int T) {
    const std::size_t rows = static_cast<std::size_t>(B) * T;
    const std::size_t C = static_cast<std::size_t>(config_.n_embd);
    Activations activations;
    activations.hidden = allocate<float>(rows * C);
    activations.normed = allocate<float>(rows * C);
    activations.qkv = allocate<float>(rows * 3 * C);
    activations.attended = allocate<float>(rows * C);
    activations.projected = allocate<float>(rows * C);
    activations.expanded = allocate<float>(rows * 4 * C);
    activations.last = allocate<float>(static_cast<std::size_t>(B) * C);
    activations.logits = allocate<float>(static_cast<std::size_t>(B) * config_.vocab_size);
    return activations;
  }

  /// GPT-2 over the prompts [B, T]: returns the logits of each row's last position, [B, V]
  /// (in activations.logits), and leaves every layer's keys and values of the T positions
  /// in cache positions 0 .. T - 1. Its attention stays chapter 04's: the fused attention
  /// is for one query per row.
  float* prefill(StepContext& step, const std::int32_t* tokens, int B, int T,
                 const StaticKvCache& cache, const Activations& activations) {
    NvtxRange prefill_range("prefill");
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    launch_sequence_embedding(tokens, model_.token_embedding(), model_.position_embedding(),
                              activations.hidden, B, T, /*first_position=*/0, C, stream);
    layers(step, activations, B * T, [&](int layer_index, const float* qkv, float* attended) {
      // This layer's keys and values of positions 0 .. T - 1 stay, in the static cache.
      launch_store_kv_sequence(qkv, cache.layer_keys(layer_index), cache.layer_values(layer_index),
                               /*first_position=*/0, T, cache.capacity, B, H, C, stream);
      launch_causal_attention(qkv, attended, B, T, H, C, stream);
    });
    return lm_head(step, activations, B, T);
  }

  /// GPT-2 over tokens [B], which sit at position p = cursor->position: every layer
  /// writes their keys and values at p of the static cache and attends over positions
  /// 0 .. p. Returns the logits, [B, V] (in activations.logits).
  float* decode_step(StepContext& step, const std::int32_t* tokens, const DecodePosition* cursor,
                     int B, const StaticKvCache& cache, const Activations& activations) {
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    launch_embedding_at_cursor(tokens, cursor, model_.token_embedding(),
                               model_.position_embedding(), activations.hidden, B, C, stream);
    layers(step, activations, B, [&](int layer_index, const float* qkv, float* attended) {
      float* keys = cache.layer_keys(layer_index);
      float* values = cache.layer_values(layer_index);
      // Append k, v at p and attend over the L = p + 1 valid positions
      // only, in one kernel; positions after p are never read.
      launch_fused_decode_attention(qkv, keys, values, cursor, cache.capacity, attended,
                                    cache.attention_workspace, B, H, C, stream);
    });
    return lm_head(step, activations, B, /*T=*/1);
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
    float* hidden = activations.hidden;
    float* normed = activations.normed;
    float* qkv = activations.qkv;
    float* attended = activations.attended;
    float* projected = activations.projected;
    float* expanded = activations.expanded;
    // Only the first LayerNorm stands alone; every later one is fused
    // with the residual add before it.
    const DeviceLayer first_layer = model_.layer(0);
    launch_layernorm(hidden, first_layer.ln_1_weight, first_layer.ln_1_bias, normed, rows, C, eps,
                     stream);
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const DeviceLayer layer = model_.layer(layer_index);
      {
        NvtxRange range("attention block");
        step.linear(normed, layer.qkv_weight, layer.qkv_bias, qkv, rows, C, 3 * C,
                    LinearEpilogue::kBias);
        attend(layer_index, qkv, attended);
        step.linear(attended, layer.attn_proj_weight, layer.attn_proj_bias, projected, rows, C, C,
                    LinearEpilogue::kBias);
        // hidden += projected and normed = ln_2(hidden), one kernel.
        launch_residual_layernorm(hidden, projected, layer.ln_2_weight, layer.ln_2_bias, normed,
                                  rows, C, eps, stream);
      }
      {
        NvtxRange range("mlp block");
        // gelu(x W + b) in the matmul's epilogue, no GELU launch.
        step.linear(normed, layer.fc_weight, layer.fc_bias, expanded, rows, C, 4 * C,
                    LinearEpilogue::kBiasGelu);
        step.linear(expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, projected, rows, 4 * C, C,
                    LinearEpilogue::kBias);
        // hidden += projected, normalized for what comes next.
        const LayerNormParameters next = layernorm_after(layer_index);
        launch_residual_layernorm(hidden, projected, next.weight, next.bias, normed, rows, C, eps,
                                  stream);
      }
    }
  }

  /// The tied LM head over each row's last position of ln_f(residual stream)
  /// (activations.normed, [B, T, C]): returns the logits, [B, V] (in activations.logits).
  float* lm_head(StepContext& step, const Activations& activations, int B, int T) {
    NvtxRange range("lm head");
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    // ln_f already ran, fused with the last residual add (in the
    // prefill over every position, a negligible cost once per generation); only each
    // row's last position predicts the next token.
    const float* last = activations.normed;
    if (T > 1) {
      CUDA_CHECK(cudaMemcpy2DAsync(activations.last, sizeof(float) * C,
                                   activations.normed + static_cast<std::size_t>(T - 1) * C,
                                   sizeof(float) * C * T, sizeof(float) * C, B,
                                   cudaMemcpyDeviceToDevice, stream));
      last = activations.last;
    }
    step.lm_head(last, model_.token_embedding(), activations.logits, B, C, config_.vocab_size);
    return activations.logits;
  }

  // The LayerNorm that follows layer `layer_index`'s MLP, fused with
  // its residual add: the next layer's ln_1, or ln_f after the last layer.
  LayerNormParameters layernorm_after(int layer_index) const {
    if (layer_index + 1 == config_.n_layer) return {model_.ln_f_weight(), model_.ln_f_bias()};
    const DeviceLayer next_layer = model_.layer(layer_index + 1);
    return {next_layer.ln_1_weight, next_layer.ln_1_bias};
  }

  const DeviceModel& model_;
  const Gpt2Config config_;
  const int eos_token_id_;
  std::unique_ptr<DeviceAllocator> allocator_;
  StepContext step_;
  // NEW in chapter 08: the generation as a graph, kept while the shape holds.
  GraphCache<CudaGraphExec> generation_graph_;
};

}  // namespace

int main(int argc, char** argv) {
  return run_chapter(argc, argv, {"08_device_loop", "the loop on the GPU"},
                     make_decoder<Gpt2Decoder>);
}
