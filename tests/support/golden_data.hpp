// tests/support/golden_data.hpp - the Hugging Face golden data in tests/data/golden_model
// and tests/data/golden_model_bf16.
//
// golden_model/ is made by scripts/make_golden_model.py (torch + transformers) and
// committed. Missing files make the tests that need them fail with a message saying how
// to make them; they are never skipped. golden_model_bf16/ (scripts/make_golden_bf16.py)
// is made later, on a machine with torch; until it exists the one test that reads it is
// reported as skipped (see golden_bf16_present).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "common/weights.hpp"

namespace ladder::testing {

using TokenRows = std::vector<std::vector<std::int32_t>>;

/// tests/data/golden_model
std::string golden_model_directory();

/// One of the golden JSON files; throws std::runtime_error naming the file and the
/// script that makes it when it is missing.
nlohmann::json load_golden_json(const std::string& name);

/// tests/data/golden_model_bf16
std::string golden_bf16_directory();

/// Whether scripts/make_golden_bf16.py has written its data (teacher_forced.json).
bool golden_bf16_present();

/// One of the bf16 golden JSON files; throws std::runtime_error naming the file and the
/// script that makes it when it is missing.
nlohmann::json load_golden_bf16_json(const std::string& name);

/// The small random GPT-2 saved by Hugging Face's save_pretrained.
Gpt2Weights load_golden_model();

/// What the stopping rule predicts from tokens generated without stopping: the step
/// after the last row's first `eos`, or all `steps` when some row never produces it.
int expected_stop_steps(const TokenRows& rows, int eos, int steps);

/// The first `columns` ids of every row, one row after the other.
std::vector<std::int32_t> flatten(const TokenRows& rows, int columns);

/// Writes `rows` as a --prompt-file or --force-tokens file: one row per line.
void write_rows(const std::string& path, const TokenRows& rows);

/// A greedy golden file (greedy_bos.json, greedy_random_prompts.json, greedy_eos.json).
struct GoldenGreedy {
  TokenRows prompts;
  int max_new_tokens = 0;
  int eos = 0;                          ///< the file's eos_override, else the config's EOS id
  int stop_steps = 0;                   ///< where the stopping rule ends Hugging Face's tokens
  std::vector<std::int32_t> hf_tokens;  ///< [rows, stop_steps]
};
GoldenGreedy load_golden_greedy(const std::string& name, const Gpt2Config& config);

/// Teacher forcing of whole sequences: each row's first id is its prompt and the rest
/// is fed in place of the argmax; `eos` is an id the continuations never feed, so no
/// row stops early.
struct TeacherForcing {
  TokenRows first_tokens;
  TokenRows continuations;
  int eos = 0;
};
TeacherForcing teacher_forcing(const TokenRows& sequences, int vocab_size);

}  // namespace ladder::testing
