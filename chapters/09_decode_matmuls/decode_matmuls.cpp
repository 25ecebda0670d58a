// chapters/09_decode_matmuls/decode_matmuls.cpp - rung 09: the step's 49 matrix products
// on kernels written for decode (M = B <= 64 rows), with their epilogues fused.
//
// After chapter 08 the host is out of the loop, and most of a step is cuBLASLt's
// products at decode shapes: a few rows against a large weight, which a library GEMM
// tiles for square problems and streams at a fraction of the memory bandwidth. Here
// every product runs on the decode matmuls (kernels/decode_matmul.cuh): each weight
// byte read once per step in 16-byte loads, all B rows of x on chip, the grid split
// over the output columns (and the inner dimension, summed in a fixed order) so that
// every multiprocessor streams. The weights are packed once, when the decoder is made,
// into the layout the kernels read (DecodeStepContext). What used to follow a product
// moves into its epilogue: the bias, c_fc's GELU, and for the two projections the
// residual add - they write the residual stream, so chapter 05's residual+LayerNorm
// becomes a LayerNorm of one input - and the LM head leaves, beside (or instead of) the
// logits, each 64-column tile's best (value, index) per row, so the argmax reads 786
// candidates per row instead of 50257 logits. --tf32 selects the TF32 tensor-core
// kernels. The prefill's B x T rows take the same kernels, 64 rows at a time. The graph
// and its WHILE loop are chapter 08's; inside it every product is a programmatic
// dependent launch, streaming its first weight chunks while the kernel before finishes.
//
// Run:      build/native/chapters/09_decode_matmuls        (B = 32; N = 100, 200, 400)
// Profile:  ncu --kernel-name regex:decode_matmul --metrics
//           dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
//           build/native/chapters/09_decode_matmuls --new-tokens 4 --runs 1 --warmup 0
//
// Notation: B rows, T prompt tokens, N new tokens, capacity = T + N cached positions,
// L = p + 1 valid positions at position p, C = n_embd, H heads, D = C / H, V vocabulary.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_graph.hpp"
#include "common/decode_step_context.hpp"
#include "common/greedy_decoding.hpp"
#include "common/nvtx.hpp"
#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/decode_matmul.cuh"
#include "kernels/decode_position.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/sampling.cuh"

namespace {

using namespace ladder;

// The step's precision, in one place: every number it stores between kernels (the
// activations and the KV cache) is a Value, and the step context and the model's layers
// are the ones whose kernels read and write Values. The logits and the argmax's
// candidates stay fp32 whatever Value is.
using Value = float;
using StepContext = DecodeStepContext;
using ModelLayer = DeviceLayer;

// Room for the keys and values of every position the run can reach,
// every layer's in one block, allocated once.
struct StaticKvCache {
  TypedBuffer<Value> keys;         ///< [n_layer, B, H, capacity, D]
  TypedBuffer<Value> values;       ///< [n_layer, B, H, capacity, D]
  int capacity = 0;                ///< T + N positions
  std::size_t layer_elements = 0;  ///< B * capacity * C: one layer's keys (or values)
  // The fused attention's scratch (each split's partial softmax state
  // and a counter per head), zeroed once; every launch leaves the counters at zero
  // again, so the twelve layers and all the steps share it.
  TypedBuffer<char> attention_workspace;

  Value* layer_keys(int layer_index) const { return keys + layer_index * layer_elements; }
  Value* layer_values(int layer_index) const { return values + layer_index * layer_elements; }
};

// Every activation of a step, allocated once, sized for the
// prefill's B x T rows; a decode step uses the first B rows.
struct Activations {
  TypedBuffer<Value> hidden;    ///< [rows, C], the residual stream
  TypedBuffer<Value> normed;    ///< [rows, C], a LayerNorm's output
  TypedBuffer<Value> qkv;       ///< [rows, 3C]
  TypedBuffer<Value> attended;  ///< [rows, C]
  TypedBuffer<Value> expanded;  ///< [rows, 4C], the MLP's hidden layer, after the GELU
  TypedBuffer<Value> last;      ///< [B, C], each row's last prompt position, after ln_f
  // NEW in chapter 09: the logits only when the tests ask for them (--dump-logits); the
  // argmax reads the LM head's candidates, [B, ceil(V / 64)].
  TypedBuffer<float> logits;  ///< [B, V] fp32, or empty
  TypedBuffer<float> candidate_values;
  TypedBuffer<std::int32_t> candidate_indices;
};

// A LayerNorm's parameters, [C] each.
struct LayerNormParameters {
  const Value* weight;
  const Value* bias;
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
        // NEW in chapter 09: the step's products on the decode kernels, every matrix
        // weight packed once, here, into the layout they stream; --tf32 picks the TF32 ones.
        // Each is a programmatic dependent launch: it streams its first weight chunks
        // while the kernel before it finishes, and waits for it before reading x.
        step_(model, options.allow_tf32, DecodeLaunch::kProgrammatic) {
    // A GPU or driver without conditional graph nodes stops here.
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
    const Activations activations = allocate_activations(B, T, logits.enabled());
    const TypedBuffer<std::int32_t> next_tokens = allocate<std::int32_t>(B);
    // Where the loop stands lives on the device. Step 0 (the prefill)
    // predicts from the prompt's last token, at position T - 1; every argmax advances it.
    const TypedBuffer<DecodePosition> cursor = allocate<DecodePosition>(1);
    const DecodePosition start{/*step=*/0, /*position=*/T - 1};
    CUDA_CHECK(cudaMemcpyAsync(cursor, &start, sizeof(start), cudaMemcpyHostToDevice, stream));

    // The loop runs on the GPU, so the logits the tests compare
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
    // One step's forward pass - the prefill at step 0 - and, for the
    // tests, its logits kept in the step's row.
    // NEW in chapter 09: it returns the LM head's argmax candidates.
    const auto forward = [&](bool prefill_step) -> ArgmaxCandidates {
      const ArgmaxCandidates candidates =
          prefill_step ? prefill(step_, sequence, B, T, cache, activations)
                       : decode_step(step_, next_tokens, cursor, B, cache, activations);
      if (logits.enabled())
        launch_store_step_logits(activations.logits, logits_history, cursor, B, V, max_new_tokens,
                                 stream);
      return candidates;
    };
    CudaGraphExec* generation = generation_graph_.find(frozen);
    if (generation == nullptr) {
      // The first generation of this shape runs its first two steps
      // plainly (every kernel is loaded), then puts back what the generation starts
      // from: no row finished, the cursor at the prompt's last token. The rest they
      // wrote, the graph writes again before reading it.
      for (const bool prefill_step : {true, false})
        launch_argmax_step_from_candidates(forward(prefill_step), next_tokens, greedy.state(),
                                           cursor, B, stream);
      CUDA_CHECK(cudaMemsetAsync(greedy.state().finished, 0, sizeof(std::int32_t) * B, stream));
      CUDA_CHECK(cudaMemcpyAsync(cursor, &start, sizeof(start), cudaMemcpyHostToDevice, stream));

      // The generation graph. The condition starts every launch at 0;
      // the prefill's argmax sets it, then the WHILE node runs its body - a decode step
      // and its argmax, which sets it again - until it is 0.
      CudaGraph graph = CudaGraph::create();
      const cudaGraphConditionalHandle another_step = create_condition(graph, /*initial=*/0);
      cudaGraph_t loop_body = nullptr;
      capture_into_graph(
          graph.get(), stream,
          [&] {
            launch_argmax_step_from_candidates_in_graph_loop(
                forward(true), next_tokens, greedy.state(), cursor, B, another_step, stream);
            loop_body = add_while_node(stream, another_step);
          },
          "generation");
      capture_into_graph(
          loop_body, stream,
          [&] {
            launch_argmax_step_from_candidates_in_graph_loop(
                forward(false), next_tokens, greedy.state(), cursor, B, another_step, stream);
          },
          "decode loop body");
      generation = &generation_graph_.store(frozen, CudaGraphExec(graph, "generation"));
    }

    // The whole generation is one launch and one wait. A fault in any
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

  // The table's yardstick: this step's 49 products alone.
  // NEW in chapter 09: the decode kernels' products (common/decode_step_context.hpp).
  double matmul_seconds_per_step(int batch) override {
    return packed_decode_matmul_seconds(model_, step_, *allocator_, batch);
  }

 private:
  template <typename T>
  TypedBuffer<T> allocate(std::size_t count) {
    return TypedBuffer<T>(*allocator_, count, step_.stream());
  }

  // Everything a captured generation froze that can change from one
  // generation to the next: the sizes, and the address of every buffer it touches (the
  // weights and the matmul workspace stay for the decoder's life). Every generation
  // allocates its buffers anew, and the caching allocator hands back the same addresses
  // for the same requests, so the next generation of a shape replays; any other shape,
  // or a buffer that moved, means a new capture.
  // That includes the prefill's buffers and the logits kept for the tests.
  static GraphKey generation_graph_key(int B, int T, const std::int32_t* sequence,
                                       const StaticKvCache& cache, const Activations& activations,
                                       const GreedyBuffers& greedy, const DecodePosition* cursor,
                                       const std::int32_t* next_tokens,
                                       const float* logits_history) {
    const GreedyState& state = greedy.state();
    GraphKey key;
    key.add_size(B).add_size(T).add_size(cache.capacity).add_size(state.max_steps);
    key.add_size(state.eos_id);
    key.add_addresses({sequence,
                       cursor,
                       next_tokens,
                       cache.keys,
                       cache.values,
                       cache.attention_workspace,
                       activations.hidden,
                       activations.normed,
                       activations.qkv,
                       activations.attended,
                       activations.expanded,
                       activations.last,
                       activations.logits,
                       activations.candidate_values,
                       activations.candidate_indices,
                       state.forced_tokens,
                       state.finished,
                       state.all_finished,
                       state.output_tokens,
                       logits_history});
    return key;
  }

  // The cache is not zeroed: the fused attention never reads a position that
  // has not been written.
  StaticKvCache allocate_kv_cache(int B, int capacity, cudaStream_t stream) {
    StaticKvCache cache;
    cache.capacity = capacity;
    cache.layer_elements = static_cast<std::size_t>(B) * capacity * config_.n_embd;
    cache.keys = allocate<Value>(config_.n_layer * cache.layer_elements);
    cache.values = allocate<Value>(config_.n_layer * cache.layer_elements);
    cache.attention_workspace = allocate<char>(
        fused_decode_attention_workspace_bytes(B, config_.n_head, config_.n_embd, capacity));
    CUDA_CHECK(
        cudaMemsetAsync(cache.attention_workspace, 0, cache.attention_workspace.bytes(), stream));
    return cache;
  }

  // One buffer per kind of activation, big enough for the prefill.
  Activations allocate_activations(int B, int T, bool keep_logits) {
    const std::size_t rows = static_cast<std::size_t>(B) * T;
    const std::size_t C = static_cast<std::size_t>(config_.n_embd);
    Activations activations;
    activations.hidden = allocate<Value>(rows * C);
    activations.normed = allocate<Value>(rows * C);
    activations.qkv = allocate<Value>(rows * 3 * C);
    activations.attended = allocate<Value>(rows * C);
    activations.expanded = allocate<Value>(rows * 4 * C);
    activations.last = allocate<Value>(static_cast<std::size_t>(B) * C);
    // NEW in chapter 09: the LM head's candidates, and the logits only when kept.
    const std::size_t candidates =
        static_cast<std::size_t>(B) * decode_lm_head_candidates(config_.vocab_size);
    if (keep_logits)
      activations.logits = allocate<float>(static_cast<std::size_t>(B) * config_.vocab_size);
    activations.candidate_values = allocate<float>(candidates);
    activations.candidate_indices = allocate<std::int32_t>(candidates);
    return activations;
  }

  /// GPT-2 over the prompts [B, T]: returns the LM head's argmax candidates for each row's
  /// last position (and its logits [B, V] in activations.logits when kept), and leaves
  /// every layer's keys and values of the T positions in cache positions 0 .. T - 1. Its
  /// attention stays chapter 04's: the fused attention is for one query per row.
  ArgmaxCandidates prefill(StepContext& step, const std::int32_t* tokens, int B, int T,
                           const StaticKvCache& cache, const Activations& activations) {
    NvtxRange prefill_range("prefill");
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    launch_sequence_embedding(tokens, model_.token_embedding(), model_.position_embedding(),
                              activations.hidden, B, T, /*first_position=*/0, C, stream);
    layers(step, activations, B * T, [&](int layer_index, const Value* qkv, Value* attended) {
      // This layer's keys and values of positions 0 .. T - 1 stay, in the static cache.
      launch_store_kv_sequence(qkv, cache.layer_keys(layer_index), cache.layer_values(layer_index),
                               /*first_position=*/0, T, cache.capacity, B, H, C, stream);
      launch_causal_attention(qkv, attended, B, T, H, C, stream);
    });
    return lm_head(step, activations, B, T);
  }

  /// GPT-2 over tokens [B], which sit at position p = cursor->position: every layer
  /// writes their keys and values at p of the static cache and attends over positions
  /// 0 .. p. Returns the LM head's argmax candidates (logits: as prefill).
  ArgmaxCandidates decode_step(StepContext& step, const std::int32_t* tokens,
                               const DecodePosition* cursor, int B, const StaticKvCache& cache,
                               const Activations& activations) {
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    launch_embedding_at_cursor(tokens, cursor, model_.token_embedding(),
                               model_.position_embedding(), activations.hidden, B, C, stream);
    layers(step, activations, B, [&](int layer_index, const Value* qkv, Value* attended) {
      Value* keys = cache.layer_keys(layer_index);
      Value* values = cache.layer_values(layer_index);
      // Append k, v at p and attend over the L = p + 1 valid positions
      // only, in one kernel; positions after p are never read.
      // NEW in chapter 09: launched as the products are (step.launch()), so its blocks
      // are resident, waiting for c_attn, before c_attn has finished.
      launch_fused_decode_attention(qkv, keys, values, cursor, cache.capacity, attended,
                                    cache.attention_workspace, B, H, C, stream,
                                    LaunchDependents::kAtStart, step.launch());
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
    Value* hidden = activations.hidden;
    Value* normed = activations.normed;
    Value* qkv = activations.qkv;
    Value* attended = activations.attended;
    Value* expanded = activations.expanded;
    // The first LayerNorm; every later one follows a product whose epilogue already added
    // its output to the residual stream.
    // NEW in chapter 09: every LayerNorm launches as the products do (step.launch()): its
    // blocks load its weight and bias while the kernel before finishes.
    const LaunchDependents dependents = LaunchDependents::kAtStart;
    const ModelLayer first_layer = model_.layer(0);
    launch_layernorm(hidden, first_layer.ln_1_weight, first_layer.ln_1_bias, normed, rows, C, eps,
                     stream, dependents, step.launch());
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const ModelLayer layer = model_.layer(layer_index);
      // NEW in chapter 09: the matrices come packed; the biases stay in the model.
      const PackedDecodeModel::Layer packed = step.layer(layer_index);
      {
        NvtxRange range("attention block");
        step.linear(normed, packed.qkv_weight, layer.qkv_bias, qkv, rows, C, 3 * C,
                    DecodeEpilogue::kBias);
        attend(layer_index, qkv, attended);
        // NEW in chapter 09: hidden += attended W + b in the product's epilogue, so what
        // follows is a LayerNorm of one input.
        step.linear(attended, packed.attn_proj_weight, layer.attn_proj_bias, hidden, rows, C, C,
                    DecodeEpilogue::kBiasResidual);
        launch_layernorm(hidden, layer.ln_2_weight, layer.ln_2_bias, normed, rows, C, eps, stream,
                         dependents, step.launch());
      }
      {
        NvtxRange range("mlp block");
        // gelu(x W + b) in the product's epilogue, no GELU launch.
        step.linear(normed, packed.fc_weight, layer.fc_bias, expanded, rows, C, 4 * C,
                    DecodeEpilogue::kBiasGelu);
        // NEW in chapter 09: hidden += expanded W + b, then normalized for what comes next.
        step.linear(expanded, packed.mlp_proj_weight, layer.mlp_proj_bias, hidden, rows, 4 * C, C,
                    DecodeEpilogue::kBiasResidual);
        const LayerNormParameters next = layernorm_after(layer_index);
        launch_layernorm(hidden, next.weight, next.bias, normed, rows, C, eps, stream, dependents,
                         step.launch());
      }
    }
  }

  /// The tied LM head over each row's last position of ln_f(residual stream)
  /// (activations.normed, [B, T, C]): returns the argmax candidates (in
  /// activations.candidate_values and candidate_indices), and writes the logits [B, V]
  /// to activations.logits when they are kept.
  ArgmaxCandidates lm_head(StepContext& step, const Activations& activations, int B, int T) {
    NvtxRange range("lm head");
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    // ln_f already ran, after the last residual add (in the prefill
    // over every position, a negligible cost once per generation); only each row's last
    // position predicts the next token.
    const Value* last = activations.normed;
    if (T > 1) {
      CUDA_CHECK(cudaMemcpy2DAsync(activations.last, sizeof(Value) * C,
                                   activations.normed + static_cast<std::size_t>(T - 1) * C,
                                   sizeof(Value) * C * T, sizeof(Value) * C, B,
                                   cudaMemcpyDeviceToDevice, stream));
      last = activations.last;
    }
    // NEW in chapter 09: logits = x wte^T and each 64-column tile's best (value, index)
    // per row, the argmax's first pass, in one kernel.
    return step.lm_head(last, activations.logits, activations.candidate_values,
                        activations.candidate_indices, B, C, config_.vocab_size);
  }

  // The LayerNorm that follows layer `layer_index`'s MLP and its
  // residual add: the next layer's ln_1, or ln_f after the last layer.
  LayerNormParameters layernorm_after(int layer_index) const {
    if (layer_index + 1 == config_.n_layer) return {model_.ln_f_weight(), model_.ln_f_bias()};
    const ModelLayer next_layer = model_.layer(layer_index + 1);
    return {next_layer.ln_1_weight, next_layer.ln_1_bias};
  }

  const DeviceModel& model_;
  const Gpt2Config config_;
  const int eos_token_id_;
  std::unique_ptr<DeviceAllocator> allocator_;
  StepContext step_;
  // The generation as a graph, kept while the shape holds.
  GraphCache<CudaGraphExec> generation_graph_;
};

}  // namespace

int main(int argc, char** argv) {
  return run_chapter(argc, argv, {"09_decode_matmuls", "decode matmuls"},
                     make_decoder<Gpt2Decoder>);
}
