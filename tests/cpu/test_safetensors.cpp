// tests/cpu/test_safetensors.cpp - the safetensors reader: dtypes, layout, and bad files.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "common/safetensors.hpp"
#include "tests/support/safetensors_writer.hpp"

using Catch::Contains;
using ladder::SafetensorsFile;
using ladder::testing::ScratchDirectory;
using ladder::testing::TensorToWrite;

namespace {

SafetensorsFile write_and_open(const ScratchDirectory& scratch, const std::string& bytes) {
  const std::string path = scratch.file("model.safetensors");
  ladder::testing::write_file(path, bytes);
  return SafetensorsFile::open(path);
}

// A one-tensor file with this header entry and `data_bytes` bytes of data.
std::string file_with_entry(const std::string& entry, std::size_t data_bytes) {
  return ladder::testing::safetensors_file_bytes(R"({"x": )" + entry + "}",
                                                 std::string(data_bytes, '\0'));
}

}  // namespace

TEST_CASE("safetensors: F32 tensors read back exactly, with their shapes", "[safetensors]") {
  const ScratchDirectory scratch("ladder-safetensors");
  const std::vector<float> matrix = {1.5f, -2.25f, 3.0e-8f, 1.0e30f, -0.0f, 7.0f};
  const std::vector<float> vector = {0.125f, 42.0f};
  const SafetensorsFile file = write_and_open(
      scratch, ladder::testing::safetensors_file_bytes(
                   {{"b.matrix", "F32", {2, 3}, ladder::testing::float32_bytes(matrix)},
                    {"a.vector", "F32", {2}, ladder::testing::float32_bytes(vector)},
                    {"scalar", "F32", {}, ladder::testing::float32_bytes({9.0f})}}));

  CHECK(file.names() == std::vector<std::string>{"a.vector", "b.matrix", "scalar"});
  CHECK_FALSE(file.contains("__metadata__"));
  CHECK(file.contains("b.matrix"));
  CHECK_FALSE(file.contains("c"));
  const ladder::TensorInfo& info = file.info("b.matrix");
  CHECK(info.dtype == "F32");
  CHECK(info.shape == std::vector<std::int64_t>{2, 3});
  CHECK(info.element_count() == 6);
  CHECK(info.data_begin == 0);
  CHECK(info.data_end == 24);
  CHECK(file.read_as_float("b.matrix") == matrix);
  CHECK(file.read_as_float("a.vector") == vector);
  CHECK(file.info("scalar").element_count() == 1);
  CHECK(file.read_as_float("scalar") == std::vector<float>{9.0f});
}

TEST_CASE("safetensors: F16 and BF16 are widened exactly", "[safetensors]") {
  const ScratchDirectory scratch("ladder-safetensors");
  // fp16 bit patterns: 1, -2.5, 65504 (largest), 2^-24 (smallest subnormal), 2^-14
  // (smallest normal), -0, +inf.
  const std::vector<std::uint16_t> half = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x0400, 0x8000, 0x7C00};
  // bf16 bit patterns: 1, -3.140625, 2^-133 (a subnormal), the largest finite bf16.
  const std::vector<std::uint16_t> bfloat = {0x3F80, 0xC049, 0x0001, 0x7F7F};
  const SafetensorsFile file = write_and_open(
      scratch, ladder::testing::safetensors_file_bytes(
                   {{"half", "F16", {7}, ladder::testing::bits16_bytes(half)},
                    {"bfloat", "BF16", {2, 2}, ladder::testing::bits16_bytes(bfloat)}}));

  const std::vector<float> widened_half = file.read_as_float("half");
  CHECK(widened_half[0] == 1.0f);
  CHECK(widened_half[1] == -2.5f);
  CHECK(widened_half[2] == 65504.0f);
  CHECK(widened_half[3] == std::ldexp(1.0f, -24));
  CHECK(widened_half[4] == std::ldexp(1.0f, -14));
  CHECK(widened_half[5] == 0.0f);
  CHECK(std::signbit(widened_half[5]));
  CHECK(widened_half[6] == std::numeric_limits<float>::infinity());

  const std::vector<float> widened_bfloat = file.read_as_float("bfloat");
  CHECK(widened_bfloat[0] == 1.0f);
  CHECK(widened_bfloat[1] == -3.140625f);
  CHECK(widened_bfloat[2] == std::ldexp(1.0f, -133));
  CHECK(widened_bfloat[3] == std::ldexp(255.0f / 128.0f, 127));
}

TEST_CASE("safetensors: a tensor larger than one read chunk arrives whole", "[safetensors]") {
  const ScratchDirectory scratch("ladder-safetensors");
  std::vector<float> values((std::size_t{1} << 20) + 3);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  const SafetensorsFile file =
      write_and_open(scratch, ladder::testing::safetensors_file_bytes(
                                  {{"small", "F32", {1}, ladder::testing::float32_bytes({-1.0f})},
                                   {"large",
                                    "F32",
                                    {static_cast<std::int64_t>(values.size())},
                                    ladder::testing::float32_bytes(values)}}));
  CHECK(file.read_as_float("large") == values);
  std::vector<float> destination(values.size(), 0.0f);
  file.read_as_float("large", destination.data());
  CHECK(destination == values);
}

TEST_CASE("safetensors: bad files are refused with the file and the problem named",
          "[safetensors]") {
  const ScratchDirectory scratch("ladder-safetensors");
  const std::string path = scratch.file("model.safetensors");
  const auto open_bytes = [&](const std::string& bytes) { return write_and_open(scratch, bytes); };

  SECTION("missing file") {
    REQUIRE_THROWS_WITH(SafetensorsFile::open(scratch.file("absent.safetensors")),
                        Contains("absent.safetensors: cannot open"));
  }
  SECTION("shorter than the header length") {
    REQUIRE_THROWS_WITH(open_bytes(std::string("\x10\x00\x00", 3)),
                        Contains(path) && Contains("too short"));
  }
  SECTION("header length beyond the end of the file") {
    REQUIRE_THROWS_WITH(
        open_bytes(ladder::testing::safetensors_file_bytes("{}", "").substr(0, 8) + "{"),
        Contains("header length 2 runs past the end"));
  }
  SECTION("header that is not JSON") {
    REQUIRE_THROWS_WITH(open_bytes(ladder::testing::safetensors_file_bytes("{\"x\": [1, 2", "")),
                        Contains(path) && Contains("not valid JSON"));
  }
  SECTION("header that is not an object") {
    REQUIRE_THROWS_WITH(open_bytes(ladder::testing::safetensors_file_bytes("[1, 2]", "")),
                        Contains("not a JSON object"));
  }
  SECTION("entry without data_offsets") {
    REQUIRE_THROWS_WITH(open_bytes(file_with_entry(R"({"dtype": "F32", "shape": [1]})", 4)),
                        Contains("tensor \"x\": missing \"data_offsets\""));
  }
  SECTION("unknown dtype") {
    REQUIRE_THROWS_WITH(
        open_bytes(file_with_entry(R"({"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]})", 1)),
        Contains("tensor \"x\": unknown dtype \"Q7\""));
  }
  SECTION("negative dimension") {
    REQUIRE_THROWS_WITH(open_bytes(file_with_entry(
                            R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})", 4)),
                        Contains("shape dimension must be a non-negative integer"));
  }
  SECTION("data past the end of the file (truncated)") {
    REQUIRE_THROWS_WITH(open_bytes(file_with_entry(
                            R"({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})", 12)),
                        Contains(path) && Contains("outside the data section of 12 bytes"));
  }
  SECTION("offsets that do not match shape and dtype") {
    REQUIRE_THROWS_WITH(open_bytes(file_with_entry(
                            R"({"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 8]})", 8)),
                        Contains("span 8 bytes, but shape [2,2] of F32 needs 16"));
  }
  SECTION("overlapping tensors") {
    REQUIRE_THROWS_WITH(open_bytes(ladder::testing::safetensors_file_bytes(
                            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                            std::string(12, '\0'))),
                        Contains("tensors \"a\" and \"b\" overlap"));
  }
  SECTION("a dtype that cannot be read as floats") {
    const SafetensorsFile file = open_bytes(
        file_with_entry(R"({"dtype": "I64", "shape": [2], "data_offsets": [0, 16]})", 16));
    CHECK(file.info("x").dtype == "I64");
    REQUIRE_THROWS_WITH(file.read_as_float("x"),
                        Contains(path) && Contains("tensor \"x\": dtype I64 cannot be read"));
  }
  SECTION("a tensor that is not there") {
    const SafetensorsFile file =
        open_bytes(file_with_entry(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})", 4));
    REQUIRE_THROWS_WITH(file.read_as_float("y"), Contains("no tensor named \"y\""));
  }
}
