// chapters/10_mixed_precision/mixed_precision.cpp - rung 10: chapter 09's step with every
// stored number in bf16 - weights, embeddings, the KV cache and the activations between
// kernels - and the arithmetic kept in fp32.
//
// After chapter 09 a step is mostly the weights streaming past the decode matmuls, so
// the bytes are the time. bf16 keeps fp32's 8 exponent bits and 7 of its 23 mantissa
// bits: half the bytes, the same range, about three significant decimal digits. The
// weights are rounded once, at load (round to nearest even), and packed for the bf16
// decode matmuls (common/bfloat16_device_model.hpp), which multiply on the tensor cores
// (mma.sync m16n8k16, bf16 inputs, fp32 accumulation) with chapter 09's fused epilogues
// and fixed order of sums, and round each product's output once. The embedding, the
// LayerNorms (statistics in fp32), the attention (scores, softmax and weighted sum in
// fp32, reading the bf16 cache in 16-byte pieces) and the argmax (on the LM head's fp32
// logits) read and write bf16 at exactly the points where the CPU reference's bf16 mode
// rounds (common/reference.hpp, R1-R7): that mode is this chapter's oracle, not the
// fp32 chapters. No bf16 kernel attends over a whole prompt, so the prefill runs its
// rows position-major and attends one position at a time with the decode attention.
// The graph and its WHILE loop are chapter 08's.
//
// Run:      build/native/chapters/10_mixed_precision        (B = 32; N = 100, 200, 400)
// Profile:  ncu --kernel-name regex:bf16 --metrics
//           dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
//           build/native/chapters/10_mixed_precision --new-tokens 4 --runs 1 --warmup 0
//
// Notation: B rows, T prompt tokens, N new tokens, capacity = T + N cached positions,
// L = p + 1 valid positions at position p, C = n_embd, H heads, D = C / H, V vocabulary.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/bfloat16_decode_step_context.hpp"
#include "common/bfloat16_device_model.hpp"
#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_graph.hpp"
#include "common/greedy_decoding.hpp"
#include "common/nvtx.hpp"
#include "kernels/cache_attention_bf16.cuh"
#include "kernels/decode_matmul_bf16.cuh"
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
// NEW in chapter 10: Value is bf16; the step context and the model are the bf16 ones.
using Value = __nv_bfloat16;
using StepContext = BfloatDecodeStepContext;
using ModelLayer = BfloatDeviceLayer;

// Room for the keys and values of every position the run can reach,
// every layer's in one block, allocated once.
// NEW in chapter 10: in bf16, exact copies of the rounded qkv (R4): half the bytes
// every step reads back.
struct StaticKvCache {
  TypedBuffer<Value> keys;          ///< [n_layer, B, H, capacity, D]
  TypedBuffer<Value> values;        ///< [n_layer, B, H, capacity, D]
  int capacity = 0;                ///< T + N positions
  std::size_t layer_elements = 0;  ///< B * capacity * C: one layer's keys (or values)

  Value* layer_keys(int layer_index) const { return keys + layer_index * layer_elements; }
  Value* layer_values(int layer_index) const { return values + layer_index * layer_elements; }
};

// Every activation of a step, allocated once, sized for the
// prefill's B x T rows; a decode step uses the first B rows.
// NEW in chapter 10: in bf16, the prefill's rows position-major (row t B + b).
struct Activations {
  TypedBuffer<Value> hidden;    ///< [rows, C], the residual stream
  TypedBuffer<Value> normed;    ///< [rows, C], a LayerNorm's output
  TypedBuffer<Value> qkv;       ///< [rows, 3C]
  TypedBuffer<Value> attended;  ///< [rows, C]
  TypedBuffer<Value> expanded;  ///< [rows, 4C], the MLP's hidden layer, after the GELU
  // The logits only when the tests ask for them (--dump-logits); the
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
      : config_(model.config()),
        eos_token_id_(options.eos_token_id),
        // The default caching allocator: nothing grows and nothing is allocated in
        // the loop, so there is nothing for it to strand.
        allocator_(make_device_allocator("caching")),
        // NEW in chapter 10: the decoder's own copy of the weights, every parameter
        // rounded to bf16 once, here, the matrices packed for the bf16 decode kernels.
        model_(*options.weights),
        step_(DecodeLaunch::kProgrammatic) {
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

    // The prompts; only the prefill reads them.
    // NEW in chapter 10: position-major, [T, B], with each position's cursor.
    const PositionMajorPrompts sequence =
        upload_position_major_prompts(*allocator_, prompts, stream);
    const GreedyBuffers greedy(*allocator_, prompts, max_new_tokens, eos_token_id_, stream);
    // Everything the loop touches is allocated here, once, for the
    // longest the run can get (Hugging Face's StaticCache: max_cache_len = T + N).
    const StaticKvCache cache = allocate_kv_cache(B, T + max_new_tokens);
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
    // It returns the LM head's argmax candidates.
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
  // NEW in chapter 10: the bf16 products (common/bfloat16_decode_step_context.hpp).
  double matmul_seconds_per_step(int batch) override {
    return bfloat16_decode_matmul_seconds(model_, step_, *allocator_, batch);
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
  static GraphKey generation_graph_key(int B, int T, const PositionMajorPrompts& sequence,
                                       const StaticKvCache& cache, const Activations& activations,
                                       const GreedyBuffers& greedy, const DecodePosition* cursor,
                                       const std::int32_t* next_tokens,
                                       const float* logits_history) {
    const GreedyState& state = greedy.state();
    GraphKey key;
    key.add_size(B).add_size(T).add_size(cache.capacity).add_size(state.max_steps);
    key.add_size(state.eos_id);
    key.add_addresses({sequence.tokens,
                       sequence.positions,
                       sequence.cursors,
                       cursor,
                       next_tokens,
                       cache.keys,
                       cache.values,
                       activations.hidden,
                       activations.normed,
                       activations.qkv,
                       activations.attended,
                       activations.expanded,
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
  // NEW in chapter 10: the bf16 attention is one block per (b, h): no workspace.
  StaticKvCache allocate_kv_cache(int B, int capacity) {
    StaticKvCache cache;
    cache.capacity = capacity;
    cache.layer_elements = static_cast<std::size_t>(B) * capacity * config_.n_embd;
    cache.keys = allocate<Value>(config_.n_layer * cache.layer_elements);
    cache.values = allocate<Value>(config_.n_layer * cache.layer_elements);
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
    // The LM head's candidates, and the logits only when kept.
    const std::size_t candidates =
        static_cast<std::size_t>(B) * decode_lm_head_candidates(config_.vocab_size);
    if (keep_logits)
      activations.logits = allocate<float>(static_cast<std::size_t>(B) * config_.vocab_size);
    activations.candidate_values = allocate<float>(candidates);
    activations.candidate_indices = allocate<std::int32_t>(candidates);
    return activations;
  }

  /// GPT-2 over the prompts (position-major, [T, B]): returns the LM head's argmax
  /// candidates for each row's last position (and its logits [B, V] in
  /// activations.logits when kept), and leaves every layer's keys and values of the T
  /// positions in cache positions 0 .. T - 1.
  ArgmaxCandidates prefill(StepContext& step, const PositionMajorPrompts& sequence,
                           int B, int T, const StaticKvCache& cache,
                           const Activations& activations) {
    NvtxRange prefill_range("prefill");
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    launch_embedding_bf16(sequence.tokens, sequence.positions, model_.token_embedding(),
                          model_.position_embedding(), activations.hidden, B * T, C, stream);
    layers(step, activations, B * T, [&](int layer_index, const Value* qkv, Value* attended) {
      // NEW in chapter 10: position t's B rows append their keys and values at t and
      // attend over 0 .. t, one launch per position, in order, so each reads what the
      // launches before it wrote.
      for (int t = 0; t < T; ++t)
        launch_decode_attention_bf16(qkv + row_offset(t * B, 3 * C), cache.layer_keys(layer_index),
                                     cache.layer_values(layer_index), sequence.cursors + t,
                                     cache.capacity, attended + row_offset(t * B, C), B, H, C,
                                     stream);
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
    launch_embedding_at_cursor_bf16(tokens, cursor, model_.token_embedding(),
                                    model_.position_embedding(), activations.hidden, B, C, stream);
    layers(step, activations, B, [&](int layer_index, const Value* qkv, Value* attended) {
      Value* keys = cache.layer_keys(layer_index);
      Value* values = cache.layer_values(layer_index);
      // Append k, v at p and attend over the L = p + 1 valid positions
      // only, in one kernel; positions after p are never read.
      // NEW in chapter 10: the bf16 cache read in 16-byte pieces, the softmax in fp32.
      // Launched as the products are (step.launch()), so its blocks
      // are resident, waiting for c_attn, before c_attn has finished.
      launch_decode_attention_bf16(qkv, keys, values, cursor, cache.capacity, attended, B, H, C,
                                   stream, LaunchDependents::kAtStart, step.launch());
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
    // Every LayerNorm launches as the products do (step.launch()): its
    // blocks load its weight and bias while the kernel before finishes.
    const LaunchDependents dependents = LaunchDependents::kAtStart;
    const ModelLayer first_layer = model_.layer(0);
    launch_layernorm_bf16(hidden, first_layer.ln_1_weight, first_layer.ln_1_bias, normed, rows, C,
                          eps, stream, dependents, step.launch());
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      // NEW in chapter 10: the matrices come packed with the biases, all in bf16.
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

  /// The tied LM head over each row's last position of ln_f(residual stream)
  /// (activations.normed, [T, B, C]): returns the argmax candidates (in
  /// activations.candidate_values and candidate_indices), and writes the logits [B, V]
  /// to activations.logits when they are kept.
  ArgmaxCandidates lm_head(StepContext& step, const Activations& activations, int B,
                           int T) {
    NvtxRange range("lm head");
    const int C = config_.n_embd;
    // ln_f already ran, after the last residual add (in the prefill
    // over every position, a negligible cost once per generation); only each row's last
    // position predicts the next token.
    // NEW in chapter 10: position-major, the last position's B rows are the last B rows.
    const Value* last = activations.normed + row_offset((T - 1) * B, C);
    // logits = x wte^T and each 64-column tile's best (value, index)
    // per row, the argmax's first pass, in one kernel.
    // NEW in chapter 10: bf16 inputs, fp32 sums, fp32 logits: the argmax compares fp32.
    return step.lm_head(last, model_.lm_head_weight(), activations.logits,
                        activations.candidate_values, activations.candidate_indices, B, C,
                        config_.vocab_size);
  }

  static std::size_t row_offset(int row, int columns) {
    return static_cast<std::size_t>(row) * static_cast<std::size_t>(columns);
  }

  // The LayerNorm that follows layer `layer_index`'s MLP and its
  // residual add: the next layer's ln_1, or ln_f after the last layer.
  LayerNormParameters layernorm_after(int layer_index) const {
    if (layer_index + 1 == config_.n_layer) return {model_.ln_f_weight(), model_.ln_f_bias()};
    const ModelLayer next_layer = model_.layer(layer_index + 1);
    return {next_layer.ln_1_weight, next_layer.ln_1_bias};
  }

  const Gpt2Config config_;
  const int eos_token_id_;
  std::unique_ptr<DeviceAllocator> allocator_;
  const BfloatDeviceModel model_;
  StepContext step_;
  // The generation as a graph, kept while the shape holds.
  GraphCache<CudaGraphExec> generation_graph_;
};

}  // namespace

int main(int argc, char** argv) {
  // NEW in chapter 10: a bf16 chapter: its table says so, and its floor counts 2-byte values.
  return run_chapter(argc, argv, {"10_mixed_precision", "mixed precision", StoredPrecision::bf16},
                     make_decoder<Gpt2Decoder>);
}
