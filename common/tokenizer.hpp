// common/tokenizer.hpp - GPT-2's byte-level BPE tokenizer (vocab.json + merges.txt).
//
// Encoding runs in three stages, as in GPT-2 and Hugging Face's tokenizers:
//   1. pre-tokenization: the text is split with GPT-2's regex
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (implemented by hand over UTF-8 code points; bytes that are not valid UTF-8
//      count as one "other" character each, so any byte string can be encoded);
//   2. each piece's bytes become byte-level symbols: the printable bytes stand for
//      themselves, every other byte n-th in order for the character U+0100 + n;
//   3. byte-pair merges: the adjacent pair with the lowest rank in merges.txt is
//      merged, everywhere in the piece, until no pair has a rank; the symbols left
//      are looked up in vocab.json.
// decode() maps every token back to its bytes, so decode(encode(text)) == text for
// any byte string. "<|endoftext|>" in the text is plain text here, as in GPT-2's own
// encoder: callers add BOS/EOS ids themselves.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace ladder {

/// Stage 1 alone: the pieces GPT-2's pre-tokenizer regex cuts `text` into; their
/// concatenation is `text`.
std::vector<std::string> split_into_pretokens(const std::string& text);

class Gpt2Tokenizer {
 public:
  /// Reads a Hugging Face vocab.json (token -> id) and merges.txt (one "left right"
  /// pair per line, highest priority first, after an optional "#version" line).
  /// Throws std::runtime_error naming the file and the line or token on a missing or
  /// malformed file.
  static Gpt2Tokenizer from_files(const std::string& vocab_json_path,
                                  const std::string& merges_txt_path);
  /// from_files(directory/vocab.json, directory/merges.txt).
  static Gpt2Tokenizer from_directory(const std::string& directory);

  std::vector<std::int32_t> encode(const std::string& text) const;
  /// The bytes the tokens stand for (not necessarily valid UTF-8 when a multi-byte
  /// character is split across a cut). Throws std::runtime_error on an unknown id.
  std::string decode(const std::vector<std::int32_t>& ids) const;

  /// One more than the largest id in vocab.json.
  int vocab_size() const { return static_cast<int>(token_bytes_.size()); }

 private:
  std::vector<std::int32_t> encode_pretoken(const std::string& piece) const;

  std::unordered_map<std::string, std::int32_t> token_ids_;  ///< byte-level token text -> id
  std::vector<std::string> token_bytes_;                     ///< id -> the bytes it stands for
  std::unordered_map<std::string, int> merge_ranks_;         ///< "left right" -> rank
  std::array<std::string, 256> byte_symbols_;                ///< byte -> its symbol, as UTF-8
};

}  // namespace ladder
