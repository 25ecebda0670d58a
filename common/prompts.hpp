// common/prompts.hpp - the batch of prompts a chapter decodes from.
//
// All rows of a batch have the same length: there is no padding
// and no attention mask, so rows of different lengths cannot share a batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ladder {

struct PromptBatch {
  int batch = 0;
  int length = 0;
  std::vector<std::int32_t> tokens;  ///< [batch, length] row-major
  /// Teacher forcing (tests): when not empty, [batch, forced_length] ids the decoder
  /// feeds at steps 0, 1, ... instead of its argmax, so every step's logits can be
  /// checked on a chosen sequence. The logits and the EOS rule are unchanged.
  std::vector<std::int32_t> forced_tokens;
  int forced_length = 0;

  std::vector<std::vector<std::int32_t>> rows() const;
  /// The prompt ids position-major, [length, batch]: the B tokens at position t side by
  /// side, as a decoder that walks the prompt one position at a time reads them.
  std::vector<std::int32_t> position_major() const;
};

/// Every row is the single token `bos_token_id` (the default workload).
PromptBatch bos_prompts(int batch, int bos_token_id);

/// The same token sequence in every row.
PromptBatch repeated_prompt(const std::vector<std::int32_t>& ids, int batch);

/// Per-row random ids in [0, vocab_size) other than `excluded_id` (the EOS id, so no
/// row is finished before it starts). Deterministic in `seed` on every machine.
/// Throws std::invalid_argument when batch x length exceeds 2^31 - 1 ids (as do the
/// other builders below).
PromptBatch random_prompts(int batch, int length, int vocab_size, int excluded_id,
                           std::uint64_t seed);

/// Reads token ids, one row per line, separated by spaces. Throws std::runtime_error
/// (one line: file, line number, problem) on a missing file, a non-number, an id
/// outside [0, vocab_size), an empty file, or rows of different lengths.
std::vector<std::vector<std::int32_t>> read_token_rows(const std::string& path, int vocab_size);

/// The problem with giving `rows` rows to a batch of `batch`, or empty when there is
/// none: the rows must be one per batch row, or exactly one (repeated for every row);
/// a file that is neither is refused rather than silently repeated or cut.
std::string row_count_problem(std::size_t rows, int batch);

/// A batch of `batch` rows: `rows` in order, or its one row repeated. Throws
/// std::invalid_argument when row_count_problem names one, or on rows of unequal length.
PromptBatch prompts_from_rows(const std::vector<std::vector<std::int32_t>>& rows, int batch);

/// Writes [batch, columns] ids, one row per line (the format read_token_rows reads).
void write_token_rows(const std::string& path, const std::vector<std::int32_t>& tokens, int batch,
                      int columns);

}  // namespace ladder
