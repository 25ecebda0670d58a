// chapters/00_cpu_reference/cpu_reference.cpp - the prologue: GPT-2 decoding on the CPU.
//
// Before any GPU, the model every later chapter runs, decoded by the CPU reference
// (common/reference.cpp) in a loop shaped like the GPU chapters' loops: each row's
// prompt goes into its own KV cache, then every step feeds one token per row, takes
// the argmax of its logits and stops once every row has produced EOS. Plain C++,
// fp32 storage and double sums: the math reads without a kernel in the way, and a
// machine without a GPU runs it with the same flags and the same table as every
// chapter. Its tokens are the ones every later chapter must produce: the CPU test
// "[cpu_reference_chapter]" checks them against reference::generate, and
// tests/gpu/test_chapters.cpp checks every chapter, this one included, against it.
//
// Run:      build/current/chapters/00_cpu_reference --batch 1 --new-tokens 8 --runs 1
//           (GPT-2 small on the CPU: README.md says how slow, measured)
//           build/current/chapters/00_cpu_reference --weights tests/data/golden_model --batch 4
//           (the small model the tests use: milliseconds)
//
// Notation: B rows, L prompt tokens per row, V vocabulary.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/chapter_runner.hpp"
#include "common/cuda_check.hpp"
#include "common/host_threads.hpp"
#include "common/reference.hpp"

namespace {

namespace reference = ladder::reference;

class CpuReferenceDecoder final : public ladder::HostDecoder {
 public:
  CpuReferenceDecoder(const ladder::Gpt2Weights& weights, const ladder::DecoderOptions& options)
      : model_(weights), config_(weights.config), eos_token_id_(options.eos_token_id) {}

  std::string where() const override {
    return "host CPU, " + std::to_string(ladder::host_thread_count()) + " threads (no GPU used)";
  }

  ladder::GenerationOutput generate(const ladder::PromptBatch& prompts, int max_new_tokens,
                                    ladder::LogitsRecorder& logits) override {
    const int B = prompts.batch;
    const int L = prompts.length;
    const int V = config_.vocab_size;
    require_host_memory(B, L + max_new_tokens);

    // Prefill: every prompt token but the last goes through the model one position at
    // a time (reference::Model::step), filling the row's KV cache. The last one is fed
    // by step 0. Rows are independent, so they run on all cores. Every row is computed,
    // identical or not, as a GPU batch computes it.
    std::vector<reference::Model::KvCache> caches(static_cast<std::size_t>(B));
    std::vector<std::int32_t> next_tokens(static_cast<std::size_t>(B));
    ladder::run_on_threads(caches.size(), [&](std::size_t b) {
      const std::int32_t* prompt = prompts.tokens.data() + b * static_cast<std::size_t>(L);
      for (int t = 0; t + 1 < L; ++t) model_.step(caches[b], prompt[t]);
      next_tokens[b] = prompt[L - 1];
    });

    std::vector<std::int32_t> generated(static_cast<std::size_t>(B) * max_new_tokens);
    std::vector<bool> finished(static_cast<std::size_t>(B), false);
    std::vector<float> step_logits(static_cast<std::size_t>(B) * V);
    int steps = 0;
    while (steps < max_new_tokens) {
      // One position per row: the fed token attends over the row's cache, appends its
      // own keys and values to it, and ends in the row's logits [V].
      ladder::run_on_threads(caches.size(), [&](std::size_t b) {
        const std::vector<float> row_logits = model_.step(caches[b], next_tokens[b]);
        std::copy(row_logits.begin(), row_logits.end(), step_logits.begin() + b * V);
      });
      // Greedy: each row takes its largest logit (the tests may force the id instead).
      for (std::size_t b = 0; b < finished.size(); ++b) {
        const std::int32_t token = prompts.forced_tokens.empty()
                                       ? reference::argmax(step_logits.data() + b * V, V)
                                       : prompts.forced_tokens[b * prompts.forced_length + steps];
        generated[b * max_new_tokens + steps] = token;
        next_tokens[b] = token;
        finished[b] = finished[b] || token == eos_token_id_;
      }
      logits.record_host(step_logits.data(), B, V);
      ++steps;
      // The stopping rule of every chapter: after the step at which the last row
      // produced EOS. Finished rows are decoded with the others until then.
      if (std::all_of(finished.begin(), finished.end(), [](bool done) { return done; })) break;
    }

    ladder::GenerationOutput output;
    output.batch = B;
    output.steps = steps;
    for (std::size_t b = 0; b < finished.size(); ++b) {
      const auto row = generated.begin() + static_cast<std::ptrdiff_t>(b * max_new_tokens);
      output.tokens.insert(output.tokens.end(), row, row + steps);
    }
    return output;
  }

 private:
  /// Refuses in one line a batch whose KV caches alone exceed this machine's memory
  /// (each row keeps keys and values of every layer for every position).
  void require_host_memory(int B, int positions) const {
    const double cache_bytes =
        2.0 * config_.n_layer * B * positions * config_.n_embd * static_cast<double>(sizeof(float));
    const double machine_bytes =
        static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    if (machine_bytes > 0 && cache_bytes > machine_bytes)
      throw std::runtime_error("out of host memory: the KV caches of " + std::to_string(B) +
                               " rows of " + std::to_string(positions) + " positions need " +
                               ladder::format_bytes(cache_bytes) + ", this machine has " +
                               ladder::format_bytes(machine_bytes));
  }

  const reference::Model model_;
  const ladder::Gpt2Config config_;
  const int eos_token_id_;
};

}  // namespace

int main(int argc, char** argv) {
  return ladder::run_host_chapter(argc, argv, {"00_cpu_reference", "CPU reference"},
                                  ladder::make_host_decoder<CpuReferenceDecoder>);
}
