// chapters/11_persistent_kernel/persistent_kernel.cpp - rung 11: chapter 10's bf16 model
// and arithmetic, with every decode step of a generation in one kernel launch.
//
// After chapter 10 a step is ~90 dependent kernels, each moving 0.1-5 MB of weights and
// each paying a kernel boundary (its launch inside the graph, its ramp-up, its drain):
// at small batches the boundaries, not the bytes, are the step. Here the boundaries go.
// One persistent kernel (kernels/persistent_decode.cu), every block resident, interprets
// a schedule built once on the host (common/persistent_schedule.hpp, proved on the CPU by
// common/persistent_schedule_simulator.hpp): the blocks of chapter 10's kernels become
// instructions, each run by the same device function as in chapter 10 (so the tokens and
// the logits are chapter 10's, bit for bit), and each kernel boundary becomes counters:
// an instruction signals one when its outputs are written, and its consumers wait for
// exactly the counters they read (attention for a head waits for that head's qkv tiles,
// not for the whole product). A product requests its weight before it waits, so the
// weights stream while the dependencies resolve. The stop decision is made on the device,
// between steps, as chapter 08's WHILE loop made it.
//
// The prefill (the prompt's T positions, once per generation) runs chapter 10's kernels;
// the persistent kernel takes every decode step after it: one launch and one wait.
//
// Run:      build/native/chapters/11_persistent_kernel        (B = 32; N = 100, 200, 400)
// Profile:  nsys profile --trace=cuda build/native/chapters/11_persistent_kernel --runs 1
//           ncu --kernel-name regex:persistent --set full
//           build/native/chapters/11_persistent_kernel
//               --new-tokens 8 --runs 1 --warmup 0
// Timeline: LADDER_PERSISTENT_TIMELINE=FILE writes when each instruction of the middle step
// was taken up, ready and done (CSV; scripts/render_persistent_timeline.py draws it).
// Fault injection (tests): LADDER_PERSISTENT_DROP_SIGNAL=I removes instruction I's signal,
// so a consumer waits for ever; LADDER_PERSISTENT_WATCHDOG_MS (default 20000) bounds every
// wait: the kernel stops and the chapter exits 1 naming the instruction and the counter.
//
// Notation: B rows, T prompt tokens, N new tokens, capacity = T + N cached positions,
// L = p + 1 valid positions at position p, C = n_embd, H heads, D = C / H, V vocabulary.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/bfloat16_decode_step_context.hpp"
#include "common/bfloat16_device_model.hpp"
#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_graph.hpp"  // synchronize_stage
#include "common/greedy_decoding.hpp"
#include "common/nvtx.hpp"
#include "common/persistent_schedule.hpp"
#include "common/persistent_schedule_upload.hpp"
#include "kernels/cache_attention_bf16.cuh"
#include "kernels/decode_matmul_bf16.cuh"
#include "kernels/decode_position.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/persistent_decode.cuh"
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

// Room for the keys and values of every position the run can reach,
// every layer's in one block, allocated once.
// In bf16, exact copies of the rounded qkv (R4).
struct StaticKvCache {
  TypedBuffer<Value> keys;         ///< [n_layer, B, H, capacity, D]
  TypedBuffer<Value> values;       ///< [n_layer, B, H, capacity, D]
  int capacity = 0;                ///< T + N positions
  std::size_t layer_elements = 0;  ///< B * capacity * C: one layer's keys (or values)

  Value* layer_keys(int layer_index) const { return keys + layer_index * layer_elements; }
  Value* layer_values(int layer_index) const { return values + layer_index * layer_elements; }
};

// Every activation of a step, allocated once, sized for the
// prefill's B x T rows; a decode step uses the first B rows.
// In bf16, the prefill's rows position-major (row t B + b).
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
        // The decoder's own copy of the weights, every parameter rounded to bf16
        // once, the matrices packed for the bf16 decode kernels.
        model_(*options.weights),
        step_(DecodeLaunch::kProgrammatic),
        watchdog_ns_(watchdog_from_environment()),
        // NEW in chapter 11: the layers' parameters, which the persistent kernel's launch
        // passes as one kernel parameter.
        layers_(model_.layers()) {}

  DeviceAllocator& allocator() override { return *allocator_; }

  GenerationOutput generate(const PromptBatch& prompts, int max_new_tokens,
                            LogitsRecorder& logits) override {
    const int B = prompts.batch;
    const int T = prompts.length;
    const int V = config_.vocab_size;
    const cudaStream_t stream = step_.stream();

    // The prompts; only the prefill reads them.
    // position-major, [T, B], with each position's cursor.
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
    // NEW in chapter 11: what the persistent kernel needs beside chapter 10's buffers:
    // its schedule (built and uploaded once per batch size), each product's split-sum
    // workspace, the per-step stop decisions, and the watchdog's fault record.
    const PersistentScheduleOnDevice& schedule = schedule_for(B);
    const PersistentWorkspaces workspaces = allocate_workspaces(B);
    const TypedBuffer<std::int32_t> decisions = allocate<std::int32_t>(max_new_tokens);
    const TypedBuffer<PersistentFault> fault = allocate<PersistentFault>(1);
    const TypedBuffer<unsigned char> argument_tables =
        allocate<unsigned char>(persistent_decode_table_bytes(max_new_tokens, logits.enabled()));
    CUDA_CHECK(cudaMemsetAsync(fault, 0, sizeof(PersistentFault), stream));

    GenerationOutput output;
    output.batch = B;
    const std::uint64_t allocations_before_loop = allocator_->stats().allocations;
    // The prefill, chapter 10's kernels once per generation, and its argmax: step 0's
    // token, the finished flags, and the cursor at step 1, position T.
    {
      const ArgmaxCandidates candidates = prefill(step_, sequence, B, T, cache, activations);
      if (logits.enabled())
        launch_store_step_logits(activations.logits, logits_history, cursor, B, V, max_new_tokens,
                                 stream);
      launch_argmax_step_from_candidates(candidates, next_tokens, greedy.state(), cursor, B,
                                         stream);
    }

    // NEW in chapter 11: every decode step in one launch. The counters start at zero; the
    // kernel reads the prefill's decision (all_finished, the cursor's step) first.
    PersistentDecodeLaunch launch;
    launch.schedule = schedule.view();
    launch.layers = layers_.data();
    launch.token_embedding = model_.token_embedding();
    launch.position_embedding = model_.position_embedding();
    launch.ln_f_weight = model_.ln_f_weight();
    launch.ln_f_bias = model_.ln_f_bias();
    launch.lm_head_weight = model_.lm_head_weight();
    launch.n_layer = config_.n_layer;
    launch.C = config_.n_embd;
    launch.H = config_.n_head;
    launch.V = V;
    launch.eps = config_.layer_norm_epsilon;
    launch.B = B;
    launch.hidden = activations.hidden;
    launch.normed = activations.normed;
    launch.qkv = activations.qkv;
    launch.attended = activations.attended;
    launch.expanded = activations.expanded;
    launch.keys = cache.keys;
    launch.values = cache.values;
    launch.capacity = cache.capacity;
    launch.layer_elements = cache.layer_elements;
    launch.candidate_values = activations.candidate_values;
    launch.candidate_indices = activations.candidate_indices;
    launch.logits_history = logits_history;
    for (int product = 0; product < kPersistentProducts; ++product)
      launch.products[product] = workspaces.plans[static_cast<std::size_t>(product)];
    launch.next_tokens = next_tokens;
    launch.state = greedy.state();
    launch.cursor = cursor;
    launch.decisions = decisions;
    launch.first_step = 1;
    launch.first_position = T;
    launch.watchdog_ns = watchdog_ns_;
    launch.fault = fault;
    launch.argument_tables = argument_tables;
    // NEW in chapter 11: the timeline of the generation's middle step, for the profiler's
    // picture (LADDER_PERSISTENT_TIMELINE=FILE; none by default).
    const char* timeline_file = std::getenv("LADDER_PERSISTENT_TIMELINE");
    const std::size_t stamps = 3 * schedule.schedule().instructions.size();
    const TypedBuffer<unsigned long long> timeline = timeline_file != nullptr
                                                         ? allocate<unsigned long long>(stamps)
                                                         : TypedBuffer<unsigned long long>();
    if (timeline_file != nullptr) {
      CUDA_CHECK(cudaMemsetAsync(timeline, 0, timeline.bytes(), stream));
      launch.timeline = timeline;
      launch.timeline_step = std::max(0, max_new_tokens / 2 - 1);
    }
    schedule.reset_counters(stream);
    launch_persistent_decode(launch, stream);

    // One wait for the whole generation. A wait that timed out stops the kernel; the
    // fault record says where.
    synchronize_stage(stream, "the persistent decode kernel");
    ++output.host_syncs;
    PersistentFault recorded{};
    CUDA_CHECK(cudaMemcpyAsync(&recorded, fault, sizeof(recorded), cudaMemcpyDeviceToHost, stream));
    // The cursor says how many steps ran: every row finished at step s leaves it at s + 1.
    DecodePosition end{};
    CUDA_CHECK(cudaMemcpyAsync(&end, cursor, sizeof(end), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (recorded.raised != 0)
      throw std::runtime_error(describe_fault(schedule.schedule(), recorded));
    if (timeline_file != nullptr)
      write_timeline(timeline_file, schedule.schedule(), timeline, stream);
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

  // The table's yardstick: this step's 49 products alone, as chapter 10 launches them.
  double matmul_seconds_per_step(int batch) override {
    return bfloat16_decode_matmul_seconds(model_, step_, *allocator_, batch);
  }

 private:
  template <typename T>
  TypedBuffer<T> allocate(std::size_t count) {
    return TypedBuffer<T>(*allocator_, count, step_.stream());
  }

  // NEW in chapter 11: the watchdog's bound on every wait, in nanoseconds
  // (LADDER_PERSISTENT_WATCHDOG_MS milliseconds, 20 s by default: a step takes well under
  // a millisecond, so only a dependency that never arrives, or a debugger, reaches it).
  static unsigned long long watchdog_from_environment() {
    const char* text = std::getenv("LADDER_PERSISTENT_WATCHDOG_MS");
    long long milliseconds = 20000;
    if (text != nullptr && *text != '\0') {
      char* end = nullptr;
      milliseconds = std::strtoll(text, &end, 10);
      if (*end != '\0' || milliseconds <= 0)
        throw std::invalid_argument(
            "LADDER_PERSISTENT_WATCHDOG_MS must be a positive number of "
            "milliseconds, not '" +
            std::string(text) + "'");
    }
    return static_cast<unsigned long long>(milliseconds) * 1000000ull;
  }

  // NEW in chapter 11: the schedule of a batch of B rows: chapter 10's plan for each
  // product (the same blocks, so the same sums), on a grid of every block the device
  // holds at once. Built and uploaded once per B.
  const PersistentScheduleOnDevice& schedule_for(int B) {
    if (schedule_ && schedule_->schedule().shape.batch == B) return *schedule_;
    if (B > kDecodeMaxRows)
      throw std::invalid_argument("chapter 11 decodes at most " + std::to_string(kDecodeMaxRows) +
                                  " rows in one persistent kernel, not " + std::to_string(B));
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    int multiprocessors = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
    PersistentShape shape;
    shape.n_layer = config_.n_layer;
    shape.n_embd = config_.n_embd;
    shape.n_head = config_.n_head;
    shape.vocab_size = config_.vocab_size;
    shape.batch = B;
    for (int product = 0; product < kPersistentProducts; ++product) {
      const DecodeMatmulPlan plan = plan_of(B, static_cast<PersistentProduct>(product));
      shape.products[product] = {plan.splits, plan.column_tiles, plan.chunks,
                                 plan.chunks_per_split};
    }
    shape.blocks = persistent_decode_blocks_per_multiprocessor(B) * multiprocessors;
    if (shape.blocks <= 0)
      throw std::runtime_error(
          "the persistent decode kernel does not fit on this GPU's "
          "multiprocessors (occupancy 0)");
    PersistentSchedule schedule = build_persistent_schedule(shape);
    // The fault injection of the watchdog's test: one instruction never signals.
    if (const char* text = std::getenv("LADDER_PERSISTENT_DROP_SIGNAL"); text && *text) {
      const long long index = std::strtoll(text, nullptr, 10);
      if (index < 0 || index >= static_cast<long long>(schedule.instructions.size()))
        throw std::invalid_argument("LADDER_PERSISTENT_DROP_SIGNAL: no instruction " +
                                    std::string(text));
      schedule.instructions[static_cast<std::size_t>(index)].signal = -1;
    }
    schedule_.reset();
    schedule_.emplace(std::move(schedule));
    return *schedule_;
  }

  // NEW in chapter 11: chapter 10's plan of `product` for B rows.
  DecodeMatmulPlan plan_of(int B, PersistentProduct product) {
    const ProductSize size = persistent_product_size(product, config_.n_embd, config_.vocab_size);
    return step_.plan(B, size.K, size.N);
  }

  // NEW in chapter 11: one split-sum workspace per product, since two products can be
  // in flight at once (c_fc's last tiles beside the MLP projection's first splits): the
  // partials [S][T][B][64] and the tiles' arrival counters [T], zero.
  struct PersistentWorkspaces {
    std::vector<PersistentProductPlan> plans;
    std::vector<TypedBuffer<float>> partials;
    std::vector<TypedBuffer<unsigned int>> tile_counters;
  };
  PersistentWorkspaces allocate_workspaces(int B) {
    PersistentWorkspaces workspaces;
    for (int product = 0; product < kPersistentProducts; ++product) {
      PersistentProductPlan plan;
      plan.plan = plan_of(B, static_cast<PersistentProduct>(product));
      if (plan.plan.splits > 1) {
        workspaces.partials.push_back(allocate<float>(plan.plan.partial_floats));
        workspaces.tile_counters.push_back(
            allocate<unsigned int>(static_cast<std::size_t>(plan.plan.column_tiles)));
        CUDA_CHECK(cudaMemsetAsync(workspaces.tile_counters.back(), 0,
                                   workspaces.tile_counters.back().bytes(), step_.stream()));
        plan.partials = workspaces.partials.back();
        plan.tile_counters = workspaces.tile_counters.back();
      }
      workspaces.plans.push_back(plan);
    }
    return workspaces;
  }

  // NEW in chapter 11: the timeline as CSV, one instruction a line: its block, what it
  // is, and when (ns from the step's first stamp) it was taken up, ready and done.
  static void write_timeline(const std::string& path, const PersistentSchedule& schedule,
                             const unsigned long long* device_stamps, cudaStream_t stream) {
    std::vector<unsigned long long> stamps(3 * schedule.instructions.size());
    CUDA_CHECK(cudaMemcpyAsync(stamps.data(), device_stamps, stamps.size() * sizeof(stamps[0]),
                               cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    unsigned long long first = ~0ull;
    for (std::size_t i = 0; i < schedule.instructions.size(); ++i)
      if (stamps[3 * i] != 0) first = std::min(first, stamps[3 * i]);
    std::ofstream file(path);
    if (!file) throw std::runtime_error("LADDER_PERSISTENT_TIMELINE: cannot write " + path);
    file << "instruction,block,op,layer,what,taken_up_ns,ready_ns,done_ns\n";
    for (std::size_t i = 0; i < schedule.instructions.size(); ++i) {
      const PersistentInstruction& instruction = schedule.instructions[i];
      if (stamps[3 * i] == 0) continue;  // the step did not run (the generation stopped)
      file << i << ',' << i % static_cast<std::size_t>(schedule.shape.blocks) << ','
           << instruction.op << ',' << instruction.layer << ",\"" << describe(schedule, instruction)
           << "\"," << stamps[3 * i] - first << ',' << stamps[3 * i + 1] - first << ','
           << stamps[3 * i + 2] - first << '\n';
    }
  }

  // NEW in chapter 11: the watchdog's record as one line a reader can act on.
  static std::string describe_fault(const PersistentSchedule& schedule,
                                    const PersistentFault& fault) {
    const std::string where =
        fault.instruction >= 0 && fault.instruction < static_cast<int>(schedule.instructions.size())
            ? describe(schedule, schedule.instructions[static_cast<std::size_t>(fault.instruction)])
            : std::string("the start of the step");
    return "the persistent decode kernel stopped: block " + std::to_string(fault.block) +
           " waited past the watchdog at " + where + " (decode step " + std::to_string(fault.step) +
           ") for counter " + std::to_string(fault.counter) + " to reach " +
           std::to_string(fault.target) + ", which held " + std::to_string(fault.value) +
           ": a dependency that is never signalled (the schedule's simulator should have "
           "caught it: tests/cpu/test_persistent_schedule.cpp)";
  }

  // The cache is not zeroed: the fused attention never reads a position that
  // has not been written.
  // the bf16 attention is one block per (b, h): no workspace.
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
  ArgmaxCandidates prefill(StepContext& step, const PositionMajorPrompts& sequence, int B, int T,
                           const StaticKvCache& cache, const Activations& activations) {
    NvtxRange prefill_range("prefill");
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const int H = config_.n_head;
    launch_embedding_bf16(sequence.tokens, sequence.positions, model_.token_embedding(),
                          model_.position_embedding(), activations.hidden, B * T, C, stream);
    layers(step, activations, B * T, [&](int layer_index, const Value* qkv, Value* attended) {
      // position t's B rows append their keys and values at t and
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
      // the matrices come packed with the biases, all in bf16.
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
  ArgmaxCandidates lm_head(StepContext& step, const Activations& activations, int B, int T) {
    NvtxRange range("lm head");
    const int C = config_.n_embd;
    // ln_f already ran, after the last residual add (in the prefill
    // over every position, a negligible cost once per generation); only each row's last
    // position predicts the next token.
    // position-major, the last position's B rows are the last B rows.
    const Value* last = activations.normed + row_offset((T - 1) * B, C);
    // logits = x wte^T and each 64-column tile's best (value, index)
    // per row, the argmax's first pass, in one kernel.
    // bf16 inputs, fp32 sums, fp32 logits: the argmax compares fp32.
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
  const unsigned long long watchdog_ns_;
  // NEW in chapter 11: the layers' parameters for the kernel, and the schedule of the
  // last batch size.
  const std::vector<PersistentLayer> layers_;
  std::optional<PersistentScheduleOnDevice> schedule_;
};

}  // namespace

int main(int argc, char** argv) {
  return run_chapter(argc, argv,
                     {"11_persistent_kernel", "one persistent kernel", StoredPrecision::bf16},
                     make_decoder<Gpt2Decoder>);
}
