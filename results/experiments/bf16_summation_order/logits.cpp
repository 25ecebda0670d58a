// results/experiments/bf16_summation_order/logits.cpp - the bf16 reference's logits of one
// teacher-forced sequence of GPT-2 small (see run.sh beside it), written as raw floats.
#include <cstdio>
#include <fstream>
#include "common/config.hpp"
#include "common/prompts.hpp"
#include "common/reference.hpp"
#include "common/weights.hpp"
#include "common/benchmark.hpp"
int main(int argc, char** argv) {
  const ladder::Gpt2Config config;
  const ladder::Gpt2Weights weights = ladder::random_gpt2_weights(config, 0);
  const auto sequences = ladder::random_prompts(2, 160, config.vocab_size, config.eos_token_id, 77).rows();
  const ladder::reference::Model model(weights, ladder::reference::Precision::bf16);
  const std::vector<float> logits = model.forward(sequences[0]);
  std::ofstream out(argv[1], std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float));
  std::printf("wrote %zu floats\n", logits.size());
}
