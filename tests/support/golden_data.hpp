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

}  // namespace ladder::testing
