// common/prompts.cpp - building and reading prompt batches.
#include "common/prompts.hpp"

#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "common/splitmix64.hpp"

namespace ladder {

namespace {

void require_positive(int value, const char* what) {
  if (value <= 0) throw std::invalid_argument(std::string(what) + " must be positive");
}

/// batch x length, the ids a batch holds; refused above 2^31 - 1, the most the kernels
/// index with an int (and more than fits an int here).
std::size_t prompt_token_count(int batch, int length) {
  const std::size_t count = static_cast<std::size_t>(batch) * static_cast<std::size_t>(length);
  if (count > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw std::invalid_argument(std::to_string(batch) + " prompts of " + std::to_string(length) +
                                " tokens are " + std::to_string(count) +
                                " ids, more than the 2^31 - 1 a batch can hold");
  return count;
}

}  // namespace

std::vector<std::vector<std::int32_t>> PromptBatch::rows() const {
  std::vector<std::vector<std::int32_t>> result(static_cast<std::size_t>(batch));
  for (int b = 0; b < batch; ++b)
    result[b].assign(tokens.begin() + static_cast<std::ptrdiff_t>(b) * length,
                     tokens.begin() + static_cast<std::ptrdiff_t>(b + 1) * length);
  return result;
}

std::vector<std::int32_t> PromptBatch::position_major() const {
  std::vector<std::int32_t> result(tokens.size());
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < length; ++t)
      result[static_cast<std::size_t>(t) * batch + b] =
          tokens[static_cast<std::size_t>(b) * length + t];
  return result;
}

PromptBatch bos_prompts(int batch, int bos_token_id) {
  return repeated_prompt({bos_token_id}, batch);
}

PromptBatch repeated_prompt(const std::vector<std::int32_t>& ids, int batch) {
  require_positive(batch, "batch");
  if (ids.empty()) throw std::invalid_argument("the prompt is empty after tokenization");
  PromptBatch prompts;
  prompts.batch = batch;
  if (ids.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw std::invalid_argument("the prompt holds more than 2^31 - 1 ids");
  prompts.length = static_cast<int>(ids.size());
  prompts.tokens.reserve(prompt_token_count(batch, prompts.length));
  for (int b = 0; b < batch; ++b)
    prompts.tokens.insert(prompts.tokens.end(), ids.begin(), ids.end());
  return prompts;
}

PromptBatch random_prompts(int batch, int length, int vocab_size, int excluded_id,
                           std::uint64_t seed) {
  require_positive(batch, "batch");
  require_positive(length, "prompt length");
  if (vocab_size < 2) throw std::invalid_argument("random prompts need a vocabulary of 2 or more");
  PromptBatch prompts;
  prompts.batch = batch;
  prompts.length = length;
  const std::size_t count = prompt_token_count(batch, length);
  prompts.tokens.reserve(count);
  std::uint64_t state = seed ^ 0x70726F6D707473ull;  // "prompts": keeps them apart from the weights
  const auto choices = static_cast<std::uint64_t>(vocab_size - 1);
  for (std::size_t i = 0; i < count; ++i) {
    auto id = static_cast<std::int32_t>(splitmix64_next(state) % choices);
    if (id >= excluded_id) ++id;  // skip the excluded id without bias
    prompts.tokens.push_back(id);
  }
  return prompts;
}

std::vector<std::vector<std::int32_t>> read_token_rows(const std::string& path, int vocab_size) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot read prompt file '" + path + "'");
  std::vector<std::vector<std::int32_t>> rows;
  std::string line;
  int line_number = 0;
  while (std::getline(file, line)) {
    ++line_number;
    std::istringstream words(line);
    std::string word;
    std::vector<std::int32_t> row;
    while (words >> word) {
      std::size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      const std::string where = path + ":" + std::to_string(line_number) + ": ";
      if (used != word.size()) throw std::runtime_error(where + "'" + word + "' is not a token id");
      if (id < 0 || id >= vocab_size)
        throw std::runtime_error(where + "token id " + word + " is outside the vocabulary [0, " +
                                 std::to_string(vocab_size) + ")");
      row.push_back(static_cast<std::int32_t>(id));
    }
    if (row.empty()) continue;  // blank lines separate nothing
    if (!rows.empty() && row.size() != rows.front().size())
      throw std::runtime_error(path + ":" + std::to_string(line_number) + ": row has " +
                               std::to_string(row.size()) + " tokens but the first row has " +
                               std::to_string(rows.front().size()) +
                               " (rows of a batch must have equal length: no padding)");
    rows.push_back(std::move(row));
  }
  if (rows.empty()) throw std::runtime_error("prompt file '" + path + "' holds no token ids");
  return rows;
}

std::string row_count_problem(std::size_t rows, int batch) {
  if (rows == 1 || rows == static_cast<std::size_t>(batch)) return "";
  return "holds " + std::to_string(rows) + " rows; --batch " + std::to_string(batch) + " needs " +
         std::to_string(batch) + " rows, or exactly one (repeated for every row)";
}

PromptBatch prompts_from_rows(const std::vector<std::vector<std::int32_t>>& rows, int batch) {
  require_positive(batch, "batch");
  if (rows.empty()) throw std::invalid_argument("no prompt rows");
  const std::string problem = row_count_problem(rows.size(), batch);
  if (!problem.empty()) throw std::invalid_argument("the prompt rows: " + problem);
  PromptBatch prompts;
  prompts.batch = batch;
  if (rows.front().size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw std::invalid_argument("a prompt row holds more than 2^31 - 1 ids");
  prompts.length = static_cast<int>(rows.front().size());
  prompts.tokens.reserve(prompt_token_count(batch, prompts.length));
  for (int b = 0; b < batch; ++b) {
    const auto& row = rows[static_cast<std::size_t>(b) % rows.size()];
    if (static_cast<int>(row.size()) != prompts.length)
      throw std::invalid_argument("prompt rows must have equal length");
    prompts.tokens.insert(prompts.tokens.end(), row.begin(), row.end());
  }
  return prompts;
}

void write_token_rows(const std::string& path, const std::vector<std::int32_t>& tokens, int batch,
                      int columns) {
  std::ofstream file(path);
  if (!file) throw std::runtime_error("cannot write '" + path + "'");
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < columns; ++c)
      file << (c ? " " : "") << tokens[static_cast<std::size_t>(b) * columns + c];
    file << '\n';
  }
  if (!file) throw std::runtime_error("failed writing '" + path + "'");
}

}  // namespace ladder
