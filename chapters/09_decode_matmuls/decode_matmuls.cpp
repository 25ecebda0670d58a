// chapters/09_decode_matmuls/decode_matmuls.cpp - rung 09: the step's 49 matrix products
// in kernels written for decode (kernels/decode_matmul.cuh) instead of cuBLASLt.
//
// At M = B <= 64 rows a product is a stream of the weight past a few rows of x: its
// time is the weight's bytes over the memory bandwidth, and at B = 32 in fp32 also the
// FMA rate (16 FLOP per weight byte). cuBLASLt's kernels are built for square problems:
// at decode shapes they stream 0.6 - 1.3 TB/s of the ~4.3 TB/s the memory can. The
// decode matmuls read every weight byte once, 16 bytes at a time, from weights packed
// at load time into the order the kernels read them (PackedDecodeModel); they cut the
// grid over columns and, for the narrow products, over K, so that every multiprocessor
// streams, and sum the splits in a fixed order (repeat runs are bit-identical). Their
// epilogues take what chapter 05 fused elsewhere: the attention and MLP projections add
// their output to the residual stream themselves (hidden += x W + b), so the LayerNorm
// after them reads one input; the LM head leaves each 64-column tile's best logit, and
// the argmax reads those 786 candidates per row instead of 50257 logits. The prefill
// (B x T rows) keeps cuBLASLt. Everything else is chapter 06's.
//
// Run:      build/native/chapters/09_decode_matmuls        (B = 32; N = 100, 200, 400)
//           build/native/chapters/09_decode_matmuls --tf32 (tensor cores, TF32 inputs)
// Profile:  nsys profile -t cuda,nvtx build/native/chapters/09_decode_matmuls
//           --new-tokens 20 (decode_matmul_fp32_kernel and decode_matmul_tf32_kernel
//           where cuBLASLt's kernels were; no splitKreduce launches)
//
// Notation: B rows, T prompt tokens, N new tokens, capacity = T + N cached positions,
// L = p + 1 valid positions at position p, C = n_embd, H heads, D = C / H, V vocabulary.
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_event.hpp"
#include "common/cuda_stream.hpp"
#include "common/nvtx.hpp"
#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/decode_matmul.cuh"
#include "kernels/decode_position.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/sampling.cuh"

namespace {

using ladder::DecodeEpilogue;
using ladder::DeviceBuffer;
using ladder::LinearEpilogue;

// How the step's matmuls are timed alone: warm-up repeats, then timed repeats (median).
constexpr int kMatmulWarmupRepeats = 3;
constexpr int kMatmulTimedRepeats = 20;

// NEW in chapter 04: per layer, room for the keys and values of every position the run
// can reach, allocated once.
struct StaticKvCache {
  std::vector<DeviceBuffer> keys;    ///< per layer, [B, H, capacity, D]
  std::vector<DeviceBuffer> values;  ///< per layer, [B, H, capacity, D]
  int capacity = 0;                  ///< T + N positions
};

// NEW in chapter 04: every activation of a step, allocated once, sized for the
// prefill's B x T rows; a decode step uses the first B rows.
struct Activations {
  DeviceBuffer hidden;     ///< [rows, C], the residual stream
  DeviceBuffer normed;     ///< [rows, C], a LayerNorm's output
  DeviceBuffer qkv;        ///< [rows, 3C]
  DeviceBuffer attended;   ///< [rows, C]
  DeviceBuffer projected;  ///< [rows, C], c_proj's output (attention and MLP)
  DeviceBuffer expanded;   ///< [rows, 4C], the MLP's hidden layer, after the GELU
  DeviceBuffer last;       ///< [B, C], each row's last prompt position, after ln_f
  DeviceBuffer logits;     ///< [B, V]
  // NEW in chapter 09: the LM head's best (value, index) per row and 64-column tile.
  DeviceBuffer candidate_values;   ///< [B, ceil(V / 64)]
  DeviceBuffer candidate_indices;  ///< [B, ceil(V / 64)]
};

// NEW in chapter 05: a LayerNorm's parameters, [C] each.
struct LayerNormParameters {
  const float* weight;
  const float* bias;
};

// NEW in chapter 06: one int32 in page-locked (pinned) host memory. A device-to-host
// cudaMemcpyAsync into ordinary, pageable memory returns only once the copy is done;
// into pinned memory it is a DMA the host does not wait for.
class PinnedFlag {
 public:
  PinnedFlag() {
    void* memory = nullptr;
    CUDA_CHECK(cudaHostAlloc(&memory, sizeof(std::int32_t), cudaHostAllocDefault));
    value_ = static_cast<std::int32_t*>(memory);
    *value_ = 0;
  }
  ~PinnedFlag() {
    if (value_ != nullptr && cudaFreeHost(value_) != cudaSuccess)
      std::fprintf(stderr, "warning: cudaFreeHost failed\n");
  }
  PinnedFlag(const PinnedFlag&) = delete;
  PinnedFlag& operator=(const PinnedFlag&) = delete;

  std::int32_t* get() const { return value_; }

 private:
  std::int32_t* value_ = nullptr;
};

// NEW in chapter 06: what each of the two streams owns. Step i runs on stream i % 2.
struct StepStream {
  StepStream(ladder::DeviceAllocator& allocator, bool allow_tf32)
      : stream(),
        matmul_workspace(allocator, ladder::LtMatmul::kRecommendedWorkspaceBytes, stream.get()),
        matmul(matmul_workspace.as<void>(), matmul_workspace.bytes(), allow_tf32),
        step_done(cudaEventDisableTiming) {}

  ladder::CudaStream stream;
  /// Its own cuBLASLt workspace, set explicitly: cuBLAS results are bitwise reproducible
  /// only when no two streams share one.
  DeviceBuffer matmul_workspace;
  ladder::LtMatmul matmul;
  // NEW in chapter 09: the decode matmuls' scratch for their split sums, one per stream.
  ladder::DecodeMatmulWorkspace decode_workspace;
  /// Recorded at the end of every step this stream runs: the next step, on the other
  /// stream, waits for it, and so does the host before it reads all_finished.
  ladder::CudaEvent step_done;
  /// The "every row finished" flag of the last step this stream ran.
  PinnedFlag all_finished;
};

class DecodeMatmulDecoder final : public ladder::Decoder {
 public:
  DecodeMatmulDecoder(const ladder::DeviceModel& model, const ladder::DecoderOptions& options)
      : model_(model),
        // NEW in chapter 09: the matmul weights packed once, in the order the kernels read.
        packed_(model),
        precision_(options.allow_tf32 ? ladder::DecodePrecision::kTf32
                                      : ladder::DecodePrecision::kFp32),
        config_(model.config()),
        eos_token_id_(options.eos_token_id),
        // NEW in chapter 04: back to the default caching allocator. Nothing grows any more
        // and nothing is allocated in the loop, so there is nothing left for it to strand.
        allocator_(ladder::make_device_allocator("caching")),
        // NEW in chapter 06: two streams, each with its own cuBLASLt and workspace.
        streams_{{{*allocator_, options.allow_tf32}, {*allocator_, options.allow_tf32}}} {}

  ladder::DeviceAllocator& allocator() override { return *allocator_; }

  ladder::GenerationOutput generate(const ladder::PromptBatch& prompts, int max_new_tokens,
                                    ladder::LogitsRecorder& logits) override {
    const int B = prompts.batch;
    // NEW in chapter 09: the decode matmuls take at most 64 rows.
    if (B > ladder::kDecodeMaxRows)
      throw std::invalid_argument("--batch: the decode matmuls take at most " +
                                  std::to_string(ladder::kDecodeMaxRows) + " rows (got " +
                                  std::to_string(B) + ")");
    // The setup runs on the first stream, which step 0 runs on too.
    const cudaStream_t first_stream = streams_[0].stream.get();
    const int T = prompts.length;

    // The prompts, [B, T]; only the prefill reads them.
    DeviceBuffer sequence = allocate<std::int32_t>(static_cast<std::size_t>(B) * T);
    CUDA_CHECK(cudaMemcpyAsync(sequence.as<void>(), prompts.tokens.data(),
                               prompts.tokens.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                               first_stream));
    DeviceBuffer finished = allocate<std::int32_t>(B);
    DeviceBuffer all_finished = allocate<std::int32_t>(1);
    DeviceBuffer generated = allocate<std::int32_t>(static_cast<std::size_t>(B) * max_new_tokens);
    CUDA_CHECK(cudaMemsetAsync(finished.as<void>(), 0, finished.bytes(), first_stream));
    // Teacher forcing, for the tests only: ids to feed instead of the argmax, or null.
    const DeviceBuffer forced =
        ladder::upload_forced_tokens(*allocator_, prompts, max_new_tokens, first_stream);
    // NEW in chapter 04: everything the loop touches is allocated here, once, for the
    // longest the run can get (Hugging Face's StaticCache: max_cache_len = T + N).
    StaticKvCache cache = allocate_kv_cache(B, T + max_new_tokens);
    Activations activations = allocate_activations(B, T);
    DeviceBuffer next_tokens = allocate<std::int32_t>(B);
    // NEW in chapter 05: the fused attention's scratch (each split's partial softmax
    // state and a counter per head), allocated and zeroed once; every launch leaves the
    // counters at zero again, so the twelve layers and all the steps share it.
    DeviceBuffer attention_workspace =
        allocate<char>(ladder::fused_decode_attention_workspace_bytes(
            B, config_.n_head, config_.n_embd, cache.capacity));
    CUDA_CHECK(cudaMemsetAsync(attention_workspace.as<void>(), 0, attention_workspace.bytes(),
                               first_stream));
    // NEW in chapter 04: where the loop stands lives on the device. Step 0 (the prefill)
    // predicts from the prompt's last token, at position T - 1; every argmax advances it.
    DeviceBuffer cursor = allocate<ladder::DecodePosition>(1);
    const ladder::DecodePosition start{/*step=*/0, /*position=*/T - 1};
    CUDA_CHECK(cudaMemcpyAsync(cursor.as<void>(), &start, sizeof(start), cudaMemcpyHostToDevice,
                               first_stream));

    ladder::GenerationOutput output;
    output.batch = B;
    const std::uint64_t allocations_before_loop = allocator_->stats().allocations;
    // NEW in chapter 06: the host stays one step ahead of its check. Step i is enqueued
    // before the host waits for step i - 1, so the GPU always has a step queued.
    int steps = max_new_tokens;  // unless a flag stops the loop sooner
    int last_enqueued = 0;
    for (int step = 0; step < max_new_tokens; ++step) {
      StepStream& current = streams_[step % 2];
      const StepStream& previous = streams_[(step + 1) % 2];
      {
        ladder::NvtxRange step_range("step");
        const cudaStream_t stream = current.stream.get();
        // NEW in chapter 06: step i starts when step i - 1, on the other stream, has ended.
        // Both streams use the same buffers (cache, activations, cursor, flags, the
        // attention workspace), which is safe only because of this wait: no two steps
        // ever run at the same time, and each sees everything the one before wrote.
        if (step > 0) CUDA_CHECK(cudaStreamWaitEvent(stream, previous.step_done.get(), 0));
        // NEW in chapter 02: step 0 runs the whole prompt once and fills the cache; every
        // later step feeds only the tokens the step before chose, one per row.
        const float* step_logits = nullptr;
        if (step == 0) {
          step_logits = prefill(current, sequence.as<std::int32_t>(), B, T, cache, activations);
          // NEW in chapter 04: the argmax takes the step from the cursor and advances it.
          ladder::launch_argmax_step(step_logits, forced.as<std::int32_t>(),
                                     next_tokens.as<std::int32_t>(), finished.as<std::int32_t>(),
                                     all_finished.as<std::int32_t>(), generated.as<std::int32_t>(),
                                     cursor.as<ladder::DecodePosition>(), B, config_.vocab_size,
                                     max_new_tokens, eos_token_id_, stream);
        } else {
          step_logits = decode_step(current, next_tokens.as<std::int32_t>(),
                                    cursor.as<ladder::DecodePosition>(), B, cache, activations,
                                    attention_workspace.as<void>(), logits.enabled());
          // NEW in chapter 09: the argmax's second pass, over the LM head's candidates.
          ladder::launch_argmax_step_from_candidates(
              activations.candidate_values.as<float>(),
              activations.candidate_indices.as<std::int32_t>(),
              ladder::decode_lm_head_candidates(config_.vocab_size), forced.as<std::int32_t>(),
              next_tokens.as<std::int32_t>(), finished.as<std::int32_t>(),
              all_finished.as<std::int32_t>(), generated.as<std::int32_t>(),
              cursor.as<ladder::DecodePosition>(), B, max_new_tokens, eos_token_id_, stream);
        }
        // Every enqueued step is recorded, in step order; the runner keeps the first `steps`.
        logits.record(step_logits, B, config_.vocab_size, stream);
        // NEW in chapter 06: the flag goes to this stream's pinned slot, and the event marks
        // the end of the step; the host does not wait for either here.
        CUDA_CHECK(cudaMemcpyAsync(current.all_finished.get(), all_finished.as<void>(),
                                   sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaEventRecord(current.step_done.get(), stream));
        last_enqueued = step;
      }
      if (step == 0) continue;

      // NEW in chapter 06: only now, with step i queued behind it, the host waits for step
      // i - 1 and reads its flag. Set: step i - 1 was the last, and step i, which ran
      // ahead, is discarded. Step i + 1 reuses this slot, and is not enqueued yet.
      ladder::NvtxRange check_range("check previous step");
      CUDA_CHECK(cudaEventSynchronize(previous.step_done.get()));
      ++output.host_syncs;
      if (*previous.all_finished.get() != 0) {
        steps = step;
        break;
      }
    }

    output.loop_allocations = allocator_->stats().allocations - allocations_before_loop;
    output.steps = steps;
    // NEW in chapter 06: the last step enqueued (the speculative one, after an early stop)
    // must end before the tokens are read and the buffers go back to the allocator. Only
    // the `steps` real columns are read; the speculative step's column stays on the device.
    CUDA_CHECK(cudaStreamWaitEvent(first_stream, streams_[last_enqueued % 2].step_done.get(), 0));
    output.tokens = ladder::download_generated_tokens(generated.as<std::int32_t>(), B,
                                                      max_new_tokens, steps, first_stream);
    return output;
  }

  // NEW in chapter 05: the yardstick for everything that is not a matmul. The 49
  // products of one decode step (four per layer and the LM head), with the same
  // kernels, epilogues, weights and shapes as decode_step(), on scratch
  // activations, back to back on the loop's stream: nothing else runs between them.
  // NEW in chapter 06: on the first stream.
  // NEW in chapter 09: the decode matmuls, on the packed weights.
  double matmul_seconds_per_step(int batch) override {
    StepStream& first = streams_[0];
    const cudaStream_t stream = first.stream.get();
    const int C = config_.n_embd;
    const Activations scratch = allocate_activations(batch, /*T=*/1);
    // The products' inputs, zeroed so that they read defined numbers.
    for (const DeviceBuffer* input :
         {&scratch.normed, &scratch.attended, &scratch.expanded, &scratch.hidden})
      CUDA_CHECK(cudaMemsetAsync(input->as<void>(), 0, input->bytes(), stream));
    const auto step_matmuls = [&] {
      for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
        const ladder::DeviceLayer layer = model_.layer(layer_index);
        const ladder::PackedDecodeModel::Layer packed = packed_.layer(layer_index);
        decode_linear(first, scratch.normed.as<float>(), packed.qkv_weight, layer.qkv_bias,
                      scratch.qkv.as<float>(), batch, C, 3 * C, DecodeEpilogue::kBias);
        decode_linear(first, scratch.attended.as<float>(), packed.attn_proj_weight,
                      layer.attn_proj_bias, scratch.hidden.as<float>(), batch, C, C,
                      DecodeEpilogue::kBiasResidual);
        decode_linear(first, scratch.normed.as<float>(), packed.fc_weight, layer.fc_bias,
                      scratch.expanded.as<float>(), batch, C, 4 * C, DecodeEpilogue::kBiasGelu);
        decode_linear(first, scratch.expanded.as<float>(), packed.mlp_proj_weight,
                      layer.mlp_proj_bias, scratch.hidden.as<float>(), batch, 4 * C, C,
                      DecodeEpilogue::kBiasResidual);
      }
      lm_head(first, scratch.normed.as<float>(), scratch, batch, /*with_logits=*/false);
    };
    return ladder::median_stream_seconds(stream, kMatmulWarmupRepeats, kMatmulTimedRepeats,
                                         step_matmuls);
  }

 private:
  template <typename T>
  DeviceBuffer allocate(std::size_t count) {
    // NEW in chapter 06: every buffer is taken on the first stream and used by both.
    return DeviceBuffer(*allocator_, count * sizeof(T), streams_[0].stream.get());
  }

  // NEW in chapter 05: the cache is no longer zeroed. Chapter 04's attention read every
  // position, so the unused ones had to hold finite numbers; the fused attention never
  // reads a position that has not been written.
  StaticKvCache allocate_kv_cache(int B, int capacity) {
    StaticKvCache cache;
    cache.capacity = capacity;
    const std::size_t size = static_cast<std::size_t>(B) * capacity * config_.n_embd;
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      cache.keys.push_back(allocate<float>(size));
      cache.values.push_back(allocate<float>(size));
    }
    return cache;
  }

  // NEW in chapter 04: one buffer per kind of activation, big enough for the prefill.
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
    const std::size_t candidates =
        static_cast<std::size_t>(B) * ladder::decode_lm_head_candidates(config_.vocab_size);
    activations.candidate_values = allocate<float>(candidates);
    activations.candidate_indices = allocate<std::int32_t>(candidates);
    return activations;
  }

  /// GPT-2 over the prompts [B, T]: returns the logits of each row's last position, [B, V]
  /// (in activations.logits), and leaves every layer's keys and values of the T positions
  /// in cache positions 0 .. T - 1. The fused epilogues and residual + LayerNorm kernels
  /// serve any number of rows; attention over the prompt stays chapter 04's (the fused
  /// attention is for one query per row).
  // NEW in chapter 06: on the stream it is given, with that stream's cuBLASLt.
  float* prefill(StepStream& current, const std::int32_t* tokens, int B, int T,
                 StaticKvCache& cache, const Activations& activations) {
    ladder::NvtxRange prefill_range("prefill");
    const cudaStream_t stream = current.stream.get();
    const int C = config_.n_embd;
    const int rows = B * T;
    const float eps = config_.layer_norm_epsilon;
    float* hidden = activations.hidden.as<float>();
    float* normed = activations.normed.as<float>();
    float* qkv = activations.qkv.as<float>();
    float* attended = activations.attended.as<float>();
    float* projected = activations.projected.as<float>();
    float* expanded = activations.expanded.as<float>();

    ladder::launch_sequence_embedding(tokens, model_.token_embedding(), model_.position_embedding(),
                                      hidden, B, T, /*first_position=*/0, C, stream);
    // NEW in chapter 05: only the first LayerNorm stands alone; every later one is fused
    // with the residual add before it.
    const ladder::DeviceLayer first_layer = model_.layer(0);
    ladder::launch_layernorm(hidden, first_layer.ln_1_weight, first_layer.ln_1_bias, normed, rows,
                             C, eps, stream);
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const ladder::DeviceLayer layer = model_.layer(layer_index);
      {
        ladder::NvtxRange range("attention block");
        linear(current, normed, layer.qkv_weight, layer.qkv_bias, qkv, rows, C, 3 * C,
               LinearEpilogue::kBias);
        // This layer's keys and values of positions 0 .. T - 1 stay, in the static cache.
        ladder::launch_store_kv_sequence(
            qkv, cache.keys[layer_index].as<float>(), cache.values[layer_index].as<float>(),
            /*first_position=*/0, T, cache.capacity, B, config_.n_head, C, stream);
        ladder::launch_causal_attention(qkv, attended, B, T, config_.n_head, C, stream);
        linear(current, attended, layer.attn_proj_weight, layer.attn_proj_bias, projected, rows, C,
               C, LinearEpilogue::kBias);
        // NEW in chapter 05: hidden += projected and normed = ln_2(hidden), one kernel.
        ladder::launch_residual_layernorm(hidden, projected, layer.ln_2_weight, layer.ln_2_bias,
                                          normed, rows, C, eps, stream);
      }
      {
        ladder::NvtxRange range("mlp block");
        // NEW in chapter 05: gelu(x W + b) in the matmul's epilogue, no GELU launch.
        linear(current, normed, layer.fc_weight, layer.fc_bias, expanded, rows, C, 4 * C,
               LinearEpilogue::kBiasGelu);
        linear(current, expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, projected, rows,
               4 * C, C, LinearEpilogue::kBias);
        // NEW in chapter 05: hidden += projected, normalized for what comes next.
        const LayerNormParameters next = layernorm_after(layer_index);
        ladder::launch_residual_layernorm(hidden, projected, next.weight, next.bias, normed, rows,
                                          C, eps, stream);
      }
    }

    ladder::NvtxRange range("lm head");
    // NEW in chapter 05: ln_f already ran, fused with the last residual add, over every
    // position (B x T rows, a negligible cost once per generation); only each row's last
    // position predicts the next token.
    float* last = activations.last.as<float>();
    CUDA_CHECK(cudaMemcpy2DAsync(
        last, sizeof(float) * C, normed + static_cast<std::size_t>(T - 1) * C,
        sizeof(float) * C * T, sizeof(float) * C, B, cudaMemcpyDeviceToDevice, stream));
    float* logits = activations.logits.as<float>();
    current.matmul.lm_head(last, model_.token_embedding(), logits, B, C, config_.vocab_size,
                           stream);
    return logits;
  }

  // NEW in chapter 04: the decode step reads its position from the cursor on the device.
  /// GPT-2 over tokens [B], which sit at position p = cursor->position: every layer
  /// writes their keys and values at p of the static cache and attends over positions
  /// 0 .. p. Leaves the LM head's candidates in activations and returns the logits,
  /// [B, V] (in activations.logits, written only when with_logits).
  // NEW in chapter 06: on the stream it is given, with that stream's cuBLASLt.
  // NEW in chapter 09: and its decode-matmul workspace.
  float* decode_step(StepStream& current, const std::int32_t* tokens,
                     const ladder::DecodePosition* cursor, int B, StaticKvCache& cache,
                     const Activations& activations, void* attention_workspace, bool with_logits) {
    const cudaStream_t stream = current.stream.get();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    const float eps = config_.layer_norm_epsilon;
    float* hidden = activations.hidden.as<float>();
    float* normed = activations.normed.as<float>();
    float* qkv = activations.qkv.as<float>();
    float* attended = activations.attended.as<float>();
    float* expanded = activations.expanded.as<float>();

    ladder::launch_embedding_at_cursor(tokens, cursor, model_.token_embedding(),
                                       model_.position_embedding(), hidden, B, C, stream);
    // NEW in chapter 05: only the first LayerNorm stands alone.
    const ladder::DeviceLayer first_layer = model_.layer(0);
    ladder::launch_layernorm(hidden, first_layer.ln_1_weight, first_layer.ln_1_bias, normed, B, C,
                             eps, stream);
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const ladder::DeviceLayer layer = model_.layer(layer_index);
      // NEW in chapter 09: the products read the packed weights; the biases stay.
      const ladder::PackedDecodeModel::Layer packed = packed_.layer(layer_index);
      float* keys = cache.keys[layer_index].as<float>();
      float* values = cache.values[layer_index].as<float>();
      {
        ladder::NvtxRange range("attention block");
        decode_linear(current, normed, packed.qkv_weight, layer.qkv_bias, qkv, B, C, 3 * C,
                      DecodeEpilogue::kBias);
        // NEW in chapter 05: append k, v at p and attend over the L = p + 1 valid positions
        // only, in one kernel; positions after p are never read.
        ladder::launch_fused_decode_attention(qkv, keys, values, cursor, cache.capacity, attended,
                                              attention_workspace, B, H, C, stream);
        // NEW in chapter 09: hidden += attended W + b in the product's epilogue, so the
        // LayerNorm after it reads one input.
        decode_linear(current, attended, packed.attn_proj_weight, layer.attn_proj_bias, hidden, B,
                      C, C, DecodeEpilogue::kBiasResidual);
        ladder::launch_layernorm(hidden, layer.ln_2_weight, layer.ln_2_bias, normed, B, C, eps,
                                 stream);
      }
      {
        ladder::NvtxRange range("mlp block");
        // NEW in chapter 05: gelu(x W + b) in the matmul's epilogue, no GELU launch.
        decode_linear(current, normed, packed.fc_weight, layer.fc_bias, expanded, B, C, 4 * C,
                      DecodeEpilogue::kBiasGelu);
        // NEW in chapter 09: hidden += expanded W + b, then the next LayerNorm alone.
        decode_linear(current, expanded, packed.mlp_proj_weight, layer.mlp_proj_bias, hidden, B,
                      4 * C, C, DecodeEpilogue::kBiasResidual);
        const LayerNormParameters next = layernorm_after(layer_index);
        ladder::launch_layernorm(hidden, next.weight, next.bias, normed, B, C, eps, stream);
      }
    }

    ladder::NvtxRange range("lm head");
    // NEW in chapter 05: normed already holds ln_f(hidden), fused with the last residual add.
    // NEW in chapter 09: the LM head leaves the argmax's candidates (and the logits when
    // they are recorded).
    lm_head(current, normed, activations, B, with_logits);
    return activations.logits.as<float>();
  }

  // NEW in chapter 05: the epilogue is the caller's choice, so that c_fc can take the GELU.
  /// out = x W + b (kBias) or gelu(x W + b) (kBiasGelu), one cuBLASLt call: the epilogue
  /// is applied in registers before the product is stored.
  void linear(StepStream& on, const float* x, const float* weight, const float* bias, float* out,
              int rows, int in_features, int out_features, LinearEpilogue epilogue) {
    on.matmul.linear(x, weight, bias, out, rows, in_features, out_features, epilogue,
                     on.stream.get());
  }

  // NEW in chapter 09: a decode matmul on the packed weight, on the stream's workspace.
  void decode_linear(StepStream& on, const float* x, const float* packed_weight, const float* bias,
                     float* out, int rows, int in_features, int out_features,
                     DecodeEpilogue epilogue) {
    ladder::launch_decode_matmul(x, packed_weight, bias, out, rows, in_features, out_features,
                                 epilogue, precision_, on.decode_workspace, on.stream.get());
  }

  // NEW in chapter 09: logits = x wte^T (when with_logits) and the argmax's first pass.
  void lm_head(StepStream& on, const float* x, const Activations& activations, int rows,
               bool with_logits) {
    ladder::launch_decode_lm_head(
        x, packed_.lm_head_weight(), with_logits ? activations.logits.as<float>() : nullptr,
        activations.candidate_values.as<float>(), activations.candidate_indices.as<std::int32_t>(),
        rows, config_.n_embd, config_.vocab_size, precision_, on.decode_workspace, on.stream.get());
  }

  // NEW in chapter 05: the LayerNorm that follows layer `layer_index`'s MLP, fused with
  // its residual add: the next layer's ln_1, or ln_f after the last layer.
  LayerNormParameters layernorm_after(int layer_index) const {
    if (layer_index + 1 == config_.n_layer) return {model_.ln_f_weight(), model_.ln_f_bias()};
    const ladder::DeviceLayer next_layer = model_.layer(layer_index + 1);
    return {next_layer.ln_1_weight, next_layer.ln_1_bias};
  }

  const ladder::DeviceModel& model_;
  const ladder::PackedDecodeModel packed_;
  const ladder::DecodePrecision precision_;
  const ladder::Gpt2Config config_;
  const int eos_token_id_;
  std::unique_ptr<ladder::DeviceAllocator> allocator_;
  std::array<StepStream, 2> streams_;
};

}  // namespace

int main(int argc, char** argv) {
  return ladder::run_chapter(argc, argv, {"09_decode_matmuls", "decode matmuls"},
                             ladder::make_decoder<DecodeMatmulDecoder>);
}
