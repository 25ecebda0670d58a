// common/tokenizer.cpp - GPT-2's byte-level BPE: pre-tokenizer, loading, encode, decode.
//
// The pre-tokenizer reproduces the regex alternation by hand. At each position the
// alternatives are tried in the regex's order and the first that matches wins:
//   contractions ('s 't 're 've 'm 'll 'd, case-sensitive), then an optional single
//   space followed by a run of letters, of numbers, or of "other" characters (neither
//   whitespace, letter nor number), then whitespace. Whitespace followed by more text
//   leaves its last character to start the next piece (\s+(?!\S)), which is how
//   "a  b" becomes "a", " ", " b": the word keeps one space in front of it.
#include "common/tokenizer.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/unicode_tables.hpp"

namespace ladder {

namespace {

// ---------------------------------------------------------------- UTF-8

struct Utf8Character {
  char32_t code_point;
  std::size_t length;  ///< bytes
  bool valid;
};

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF). A byte that
// does not start a valid sequence is reported as invalid, one byte long.
Utf8Character decode_utf8_at(const std::string& text, std::size_t position) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[position + k]); };
  const std::size_t available = text.size() - position;
  const unsigned char lead = byte(0);
  const Utf8Character invalid{lead, 1, false};
  if (lead < 0x80) return {lead, 1, true};

  std::size_t length = 0;
  unsigned char second_min = 0x80;
  unsigned char second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;  // overlong
    if (lead == 0xED) second_max = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;  // overlong
    if (lead == 0xF4) second_max = 0x8F;  // above U+10FFFF
  } else {
    return invalid;
  }
  if (available < length || byte(1) < second_min || byte(1) > second_max) return invalid;
  char32_t code_point = lead & (0xFF >> (length + 1));
  for (std::size_t k = 1; k < length; ++k) {
    if (!is_continuation(byte(k))) return invalid;
    code_point = code_point << 6 | (byte(k) & 0x3Fu);
  }
  return {code_point, length, true};
}

std::string encode_utf8(char32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
  return out;
}

// ---------------------------------------------------------------- pre-tokenizer

enum class CharacterClass { letter, number, whitespace, other };

struct Character {
  std::size_t byte_offset;
  char32_t code_point;  ///< U+FFFD for a byte that is not valid UTF-8
  CharacterClass kind;
};

std::vector<Character> split_into_characters(const std::string& text) {
  std::vector<Character> characters;
  for (std::size_t position = 0; position < text.size();) {
    const Utf8Character decoded = decode_utf8_at(text, position);
    Character character{position, U'\uFFFD', CharacterClass::other};
    if (decoded.valid) {
      character.code_point = decoded.code_point;
      if (unicode::is_letter(decoded.code_point))
        character.kind = CharacterClass::letter;
      else if (unicode::is_number(decoded.code_point))
        character.kind = CharacterClass::number;
      else if (unicode::is_whitespace(decoded.code_point))
        character.kind = CharacterClass::whitespace;
    }
    characters.push_back(character);
    position += decoded.length;
  }
  return characters;
}

// Length in characters of the piece that starts at `start`.
std::size_t pretoken_length(const std::vector<Character>& characters, std::size_t start) {
  const std::size_t count = characters.size();
  const auto code_point_at = [&](std::size_t index) {
    return index < count ? characters[index].code_point : char32_t{0};
  };

  // 's|'t|'re|'ve|'m|'ll|'d
  if (code_point_at(start) == U'\'') {
    const char32_t next = code_point_at(start + 1);
    if (next == U's' || next == U't' || next == U'm' || next == U'd') return 2;
    if ((next == U'r' || next == U'v') && code_point_at(start + 2) == U'e') return 3;
    if (next == U'l' && code_point_at(start + 2) == U'l') return 3;
  }

  // ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: the classes are disjoint, so the character
  // after the optional space decides which alternative can match.
  const std::size_t run_start = code_point_at(start) == U' ' ? start + 1 : start;
  if (run_start < count && characters[run_start].kind != CharacterClass::whitespace) {
    const CharacterClass kind = characters[run_start].kind;
    std::size_t end = run_start + 1;
    while (end < count && characters[end].kind == kind) ++end;
    return end - start;
  }

  // `\s+(?!\S)|\s+`: the whole run at the end of the text; otherwise all of it but the
  // last character, which goes with the text that follows; a single one alone.
  std::size_t end = start + 1;
  while (end < count && characters[end].kind == CharacterClass::whitespace) ++end;
  if (end == count || end - start == 1) return end - start;
  return end - 1 - start;
}

// ---------------------------------------------------------------- byte-level symbols

// GPT-2's bytes_to_unicode(): printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF)
// stand for themselves; the others, in increasing order, become U+0100, U+0101, ...
std::array<char32_t, 256> byte_to_code_point() {
  std::array<char32_t, 256> map{};
  char32_t next_unprintable = 0x100;
  for (int byte = 0; byte < 256; ++byte) {
    const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                           (byte >= 0xAE && byte <= 0xFF);
    map[static_cast<std::size_t>(byte)] =
        printable ? static_cast<char32_t>(byte) : next_unprintable++;
  }
  return map;
}

// The bytes a vocabulary entry stands for. A character outside the byte-level alphabet
// (possible only in hand-added tokens) stands for its own UTF-8, as in Hugging Face's
// ByteLevel decoder.
std::string token_text_to_bytes(const std::string& token_text,
                                const std::unordered_map<char32_t, char>& code_point_to_byte) {
  std::string bytes;
  for (std::size_t position = 0; position < token_text.size();) {
    const Utf8Character character = decode_utf8_at(token_text, position);
    const auto found = code_point_to_byte.find(character.code_point);
    if (character.valid && found != code_point_to_byte.end())
      bytes += found->second;
    else
      bytes += token_text.substr(position, character.length);
    position += character.length;
  }
  return bytes;
}

std::string merge_key(const std::string& left, const std::string& right) {
  return left + " " + right;
}

// One line of merges.txt, "left right"; both tokens and their merge must be in the
// vocabulary. `where` is "path:line: ".
std::pair<std::string, std::string> parse_merge_line(
    const std::string& line, const std::string& where,
    const std::unordered_map<std::string, std::int32_t>& token_ids, const std::string& vocab_path) {
  const std::size_t space = line.find(' ');
  if (space == 0 || space == std::string::npos || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string::npos)
    throw std::runtime_error(where + "expected two tokens separated by one space, got \"" + line +
                             "\"");
  std::pair<std::string, std::string> pair{line.substr(0, space), line.substr(space + 1)};
  const std::array<std::string, 3> tokens = {pair.first, pair.second, pair.first + pair.second};
  const auto missing = std::find_if(tokens.begin(), tokens.end(), [&](const std::string& token) {
    return token_ids.count(token) == 0;
  });
  if (missing != tokens.end())
    throw std::runtime_error(where + "token \"" + *missing + "\" is not in " + vocab_path);
  return pair;
}

// vocab.json: {"token": id, ...} with ids 0 .. N-1, each used once. Returns the token
// text of every id.
std::vector<std::string> read_vocabulary(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error(path + ": cannot open the vocabulary file");
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(file);
  } catch (const nlohmann::json::parse_error& error) {
    throw std::runtime_error(path + ": invalid JSON (" + error.what() + ")");
  }
  if (!vocab.is_object() || vocab.empty())
    throw std::runtime_error(path + ": expected a JSON object mapping tokens to ids");
  if (vocab.size() > static_cast<std::size_t>(INT32_MAX))
    throw std::runtime_error(path + ": too many tokens");
  const std::size_t token_count = vocab.size();
  std::vector<std::string> text_of_id(token_count);
  std::vector<bool> id_seen(token_count, false);
  for (auto entry = vocab.begin(); entry != vocab.end(); ++entry) {
    const nlohmann::json& id = entry.value();
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() >= token_count)
      throw std::runtime_error(path + ": token \"" + entry.key() + "\" has id " + id.dump() +
                               "; ids must run from 0 to " + std::to_string(token_count - 1));
    const auto index = id.get<std::size_t>();
    if (id_seen[index])
      throw std::runtime_error(path + ": id " + std::to_string(index) + " is given to both \"" +
                               text_of_id[index] + "\" and \"" + entry.key() + "\"");
    id_seen[index] = true;
    text_of_id[index] = entry.key();
  }
  return text_of_id;
}

}  // namespace

std::vector<std::string> split_into_pretokens(const std::string& text) {
  const std::vector<Character> characters = split_into_characters(text);
  std::vector<std::string> pieces;
  for (std::size_t start = 0; start < characters.size();) {
    const std::size_t end = start + pretoken_length(characters, start);
    const std::size_t first_byte = characters[start].byte_offset;
    const std::size_t end_byte =
        end < characters.size() ? characters[end].byte_offset : text.size();
    pieces.push_back(text.substr(first_byte, end_byte - first_byte));
    start = end;
  }
  return pieces;
}

Gpt2Tokenizer Gpt2Tokenizer::from_directory(const std::string& directory) {
  const std::filesystem::path root(directory);
  return from_files((root / "vocab.json").string(), (root / "merges.txt").string());
}

Gpt2Tokenizer Gpt2Tokenizer::from_files(const std::string& vocab_json_path,
                                        const std::string& merges_txt_path) {
  Gpt2Tokenizer tokenizer;
  const std::vector<std::string> text_of_id = read_vocabulary(vocab_json_path);
  const std::size_t token_count = text_of_id.size();
  const std::array<char32_t, 256> byte_code_points = byte_to_code_point();
  std::unordered_map<char32_t, char> code_point_to_byte;
  for (std::size_t byte = 0; byte < 256; ++byte) {
    tokenizer.byte_symbols_[byte] = encode_utf8(byte_code_points[byte]);
    code_point_to_byte.emplace(byte_code_points[byte], static_cast<char>(byte));
  }
  tokenizer.token_bytes_.resize(token_count);
  for (std::size_t id = 0; id < token_count; ++id) {
    tokenizer.token_ids_.emplace(text_of_id[id], static_cast<std::int32_t>(id));
    tokenizer.token_bytes_[id] = token_text_to_bytes(text_of_id[id], code_point_to_byte);
  }
  // Every byte must have a token, or some text could not be encoded at all.
  for (std::size_t byte = 0; byte < 256; ++byte) {
    if (tokenizer.token_ids_.count(tokenizer.byte_symbols_[byte]) == 0)
      throw std::runtime_error(vocab_json_path + ": no token for byte " + std::to_string(byte) +
                               " (\"" + tokenizer.byte_symbols_[byte] +
                               "\"); not a GPT-2 byte-level vocabulary");
  }

  // merges.txt: "#version: ..." first, then "left right" per line, by priority.
  std::ifstream merges_file(merges_txt_path);
  if (!merges_file) throw std::runtime_error(merges_txt_path + ": cannot open the merges file");
  std::string line;
  int line_number = 0;
  int rank = 0;
  while (std::getline(merges_file, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_number == 1 && line.rfind("#version", 0) == 0)) continue;
    const auto [left, right] =
        parse_merge_line(line, merges_txt_path + ":" + std::to_string(line_number) + ": ",
                         tokenizer.token_ids_, vocab_json_path);
    tokenizer.merge_ranks_.emplace(merge_key(left, right), rank++);
  }
  if (rank == 0)
    throw std::runtime_error(merges_txt_path + ": no merges (empty or truncated file)");
  return tokenizer;
}

std::vector<std::int32_t> Gpt2Tokenizer::encode_pretoken(const std::string& piece) const {
  std::vector<std::string> symbols;
  for (const char byte : piece) symbols.push_back(byte_symbols_[static_cast<unsigned char>(byte)]);

  while (symbols.size() > 1) {
    int best_rank = INT_MAX;
    std::size_t best = 0;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto found = merge_ranks_.find(merge_key(symbols[i], symbols[i + 1]));
      if (found != merge_ranks_.end() && found->second < best_rank) {
        best_rank = found->second;
        best = i;
      }
    }
    if (best_rank == INT_MAX) break;
    // Merge every occurrence of the best pair, left to right: a merge can only create
    // pairs of higher rank, so doing them all in one pass gives the same result.
    const std::string left = symbols[best];
    const std::string right = symbols[best + 1];
    std::vector<std::string> merged;
    for (std::size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
        merged.push_back(left + right);
        ++i;
      } else {
        merged.push_back(symbols[i]);
      }
    }
    symbols = std::move(merged);
  }

  // Every byte and every merge result is in the vocabulary (checked when loading).
  std::vector<std::int32_t> ids;
  ids.reserve(symbols.size());
  for (const std::string& symbol : symbols) ids.push_back(token_ids_.at(symbol));
  return ids;
}

std::vector<std::int32_t> Gpt2Tokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> ids;
  for (const std::string& piece : split_into_pretokens(text)) {
    const std::vector<std::int32_t> piece_ids = encode_pretoken(piece);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
  return ids;
}

std::string Gpt2Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string text;
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      throw std::runtime_error("cannot decode token id " + std::to_string(id) +
                               ": the vocabulary has ids 0 to " + std::to_string(vocab_size() - 1));
    text += token_bytes_[static_cast<std::size_t>(id)];
  }
  return text;
}

}  // namespace ladder
