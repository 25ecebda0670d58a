// tests/cpu/test_tokenizer.cpp - GPT-2's byte-level BPE against Hugging Face's tokenizers.
//
// tests/data/tokenizer/ holds a small BPE trained with Hugging Face's `tokenizers` in
// GPT-2's setup and what that library makes of tricky strings (pre-tokenizer pieces,
// ids, decoded text); scripts/make_golden_tokenizer.py made them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "common/tokenizer.hpp"
#include "tests/support/safetensors_writer.hpp"

using Catch::Contains;
using ladder::Gpt2Tokenizer;

namespace {

const std::string golden_directory = std::string(LADDER_TEST_DATA_DIR) + "/tokenizer";

const Gpt2Tokenizer& golden_tokenizer() {
  static const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::from_directory(golden_directory);
  return tokenizer;
}

nlohmann::json golden_cases() {
  std::ifstream file(golden_directory + "/cases.json");
  REQUIRE(file);
  return nlohmann::json::parse(file).at("cases");
}

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

std::string concatenated(const std::vector<std::string>& pieces) {
  std::string text;
  for (const std::string& piece : pieces) text += piece;
  return text;
}

}  // namespace

TEST_CASE("tokenizer: pre-tokenizer pieces match Hugging Face's", "[tokenizer]") {
  const nlohmann::json cases = golden_cases();
  REQUIRE(cases.size() > 40);
  for (const nlohmann::json& golden : cases) {
    const std::string text = golden.at("text").get<std::string>();
    INFO("text: " << golden.at("text").dump());
    CHECK(ladder::split_into_pretokens(text) ==
          golden.at("pretokens").get<std::vector<std::string>>());
  }
}

TEST_CASE("tokenizer: encode gives Hugging Face's ids and decode its text", "[tokenizer]") {
  const Gpt2Tokenizer& tokenizer = golden_tokenizer();
  CHECK(tokenizer.vocab_size() == 800);
  for (const nlohmann::json& golden : golden_cases()) {
    const std::string text = golden.at("text").get<std::string>();
    const auto ids = golden.at("ids").get<std::vector<std::int32_t>>();
    INFO("text: " << golden.at("text").dump());
    CHECK(tokenizer.encode(text) == ids);
    CHECK(tokenizer.decode(ids) == golden.at("decoded").get<std::string>());
    CHECK(tokenizer.decode(ids) == text);
  }
}

TEST_CASE("tokenizer: bytes that are not UTF-8 are split as 'other' characters and survive",
          "[tokenizer]") {
  using Pieces = std::vector<std::string>;
  CHECK(ladder::split_into_pretokens("ab\xff\xfe"
                                     "cd") == Pieces{"ab", "\xff\xfe", "cd"});
  CHECK(ladder::split_into_pretokens("a \xff!") == Pieces{"a", " \xff!"});
  // An overlong '/' and a surrogate are invalid byte by byte.
  CHECK(ladder::split_into_pretokens("x\xc0\xafy") == Pieces{"x", "\xc0\xaf", "y"});
  CHECK(ladder::split_into_pretokens("\xed\xa0\x80z") == Pieces{"\xed\xa0\x80", "z"});
  // A sequence cut short at the end of the text.
  CHECK(ladder::split_into_pretokens("euro \xe2\x82") == Pieces{"euro", " \xe2\x82"});
  // The largest code point is valid (a symbol, "other"); one above is not.
  CHECK(ladder::split_into_pretokens("\xf4\x8f\xbf\xbf"
                                     "a") == Pieces{"\xf4\x8f\xbf\xbf", "a"});
  CHECK(ladder::split_into_pretokens("\xf4\x90\x80\x80"
                                     "a") == Pieces{"\xf4\x90\x80\x80", "a"});

  const Gpt2Tokenizer& tokenizer = golden_tokenizer();
  for (const std::string text : {"ab\xff\xfe"
                                 "cd",
                                 "euro \xe2\x82", "\x80\x80\x80"})
    CHECK(tokenizer.decode(tokenizer.encode(text)) == text);
}

TEST_CASE("tokenizer: any byte string round-trips, and pieces cover the text", "[tokenizer]") {
  const Gpt2Tokenizer& tokenizer = golden_tokenizer();
  std::mt19937 random(12345);
  // Draw from bytes that make every class likely: ASCII letters, digits, spaces,
  // newlines, apostrophes, UTF-8 lead and continuation bytes, and anything at all.
  const std::string alphabet = "aZ09 \n\t'sl.\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80\x80\xff";
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int length = static_cast<int>(random() % 40);
    for (int i = 0; i < length; ++i) {
      text += random() % 4 == 0 ? static_cast<char>(random() % 256)
                                : alphabet[random() % alphabet.size()];
    }
    INFO("trial " << trial);
    const std::vector<std::string> pieces = ladder::split_into_pretokens(text);
    CHECK(concatenated(pieces) == text);
    CHECK(std::none_of(pieces.begin(), pieces.end(),
                       [](const std::string& piece) { return piece.empty(); }));
    CHECK(tokenizer.decode(tokenizer.encode(text)) == text);
  }
}

TEST_CASE("tokenizer: from_files reads the same tokenizer as from_directory", "[tokenizer]") {
  const Gpt2Tokenizer tokenizer =
      Gpt2Tokenizer::from_files(golden_directory + "/vocab.json", golden_directory + "/merges.txt");
  const std::string text = "The decoder doesn't wait: it reads 124439808 parameters.";
  CHECK(tokenizer.encode(text) == golden_tokenizer().encode(text));
}

TEST_CASE("tokenizer: decode refuses ids outside the vocabulary", "[tokenizer]") {
  REQUIRE_THROWS_WITH(golden_tokenizer().decode({1, 800}),
                      Contains("cannot decode token id 800") && Contains("0 to 799"));
  REQUIRE_THROWS_WITH(golden_tokenizer().decode({-1}), Contains("cannot decode token id -1"));
}

TEST_CASE("tokenizer: missing or corrupt files are refused naming the file and the problem",
          "[tokenizer]") {
  const ladder::testing::ScratchDirectory scratch("ladder-tokenizer");
  const std::string vocab_path = scratch.file("vocab.json");
  const std::string merges_path = scratch.file("merges.txt");
  nlohmann::json vocab = nlohmann::json::parse(read_text(golden_directory + "/vocab.json"));
  std::string merges = read_text(golden_directory + "/merges.txt");
  const auto load = [&]() {
    ladder::testing::write_file(vocab_path, vocab.dump());
    ladder::testing::write_file(merges_path, merges);
    return Gpt2Tokenizer::from_files(vocab_path, merges_path);
  };
  REQUIRE_NOTHROW(load());

  SECTION("missing vocab.json") {
    REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(scratch.file("absent.json"), merges_path),
                        Contains("absent.json: cannot open"));
  }
  SECTION("missing merges.txt") {
    REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(vocab_path, scratch.file("absent.txt")),
                        Contains("absent.txt: cannot open"));
  }
  SECTION("vocab.json that is not JSON") {
    ladder::testing::write_file(vocab_path, "{\"a\": 0,");
    REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(vocab_path, merges_path),
                        Contains(vocab_path + ": invalid JSON"));
  }
  SECTION("an id that is not a number") {
    vocab["!"] = "one";
    REQUIRE_THROWS_WITH(load(), Contains("token \"!\" has id \"one\""));
  }
  SECTION("an id beyond the vocabulary") {
    vocab["!"] = 5000;
    REQUIRE_THROWS_WITH(load(), Contains("token \"!\" has id 5000; ids must run from 0 to 799"));
  }
  SECTION("one id given to two tokens") {
    vocab["!"] = vocab["\""];
    REQUIRE_THROWS_WITH(load(), Contains("is given to both"));
  }
  SECTION("a byte without a token") {
    const nlohmann::json newline_id = vocab["\u010a"];  // "Ċ", the symbol for byte 10
    vocab.erase("\u010a");
    vocab["renamed newline"] = newline_id;
    REQUIRE_THROWS_WITH(load(), Contains("no token for byte 10"));
  }
  SECTION("a malformed merges line") {
    merges.insert(merges.find('\n', merges.find('\n') + 1) + 1, "three parts here\n");
    REQUIRE_THROWS_WITH(load(), Contains(merges_path + ":3: expected two tokens"));
  }
  SECTION("a merge of tokens the vocabulary lacks") {
    merges += "q\u0120 z\n";
    REQUIRE_THROWS_WITH(load(), Contains("token \"q\u0120\" is not in"));
  }
  SECTION("no merges at all") {
    merges = "#version: 0.2\n";
    REQUIRE_THROWS_WITH(load(), Contains("no merges"));
  }
}
