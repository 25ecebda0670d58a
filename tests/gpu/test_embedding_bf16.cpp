// tests/gpu/test_embedding_bf16.cpp - the bf16 launchers of kernels/embedding against
// reference::embedding on bf16 tables, rounded to bf16 (common/reference.hpp, R2). Both add the two
// bf16 values in fp32 and round once, so the results must be equal bit for bit.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/reference.hpp"
#include "kernels/embedding.cuh"
#include "tests/gpu/bfloat16_test_helpers.hpp"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

struct Tables {
  Tables(std::mt19937& rng, int vocabulary, int positions, int channels)
      : V(vocabulary),
        P(positions),
        C(channels),
        wte(test::random_bfloat16(rng, static_cast<std::size_t>(V) * C, -1.0f, 1.0f)),
        wpe(test::random_bfloat16(rng, static_cast<std::size_t>(P) * C, -0.5f, 0.5f)),
        wte_device(test::to_bfloat16_bits(wte)),
        wpe_device(test::to_bfloat16_bits(wpe)) {}

  std::vector<float> expected(const std::vector<std::int32_t>& tokens,
                              const std::vector<std::int32_t>& positions) const {
    std::vector<float> out(tokens.size() * static_cast<std::size_t>(C));
    reference::embedding(tokens.data(), positions.data(), wte.data(), wpe.data(), out.data(),
                         static_cast<int>(tokens.size()), C);
    return test::rounded_to_bfloat16(out);
  }

  int V, P, C;
  std::vector<float> wte, wpe;
  test::DeviceBfloats wte_device, wpe_device;
};

TEST_CASE("launch_embedding_bf16 matches the bf16 reference", "[kernels][bf16]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  // C = 768 takes 16-byte packs; C = 100 and 7 (not multiples of 8) the scalar path.
  for (const int C : {768, 100, 7}) {
    const Tables tables(rng, 1001, 64, C);
    for (const int rows : {1, 5, 64, 333}) {
      CAPTURE(C, rows);
      const std::vector<std::int32_t> tokens = test::random_ints(rng, rows, 0, tables.V - 1);
      const std::vector<std::int32_t> positions = test::random_ints(rng, rows, 0, tables.P - 1);
      const test::DeviceArray<std::int32_t> tokens_device(tokens);
      const test::DeviceArray<std::int32_t> positions_device(positions);
      test::DeviceBfloats out(static_cast<std::size_t>(rows) * C);
      out.poison();
      launch_embedding_bf16(
          tokens_device.get(), positions_device.get(), test::as_bfloat16(tables.wte_device),
          test::as_bfloat16(tables.wpe_device), test::as_bfloat16(out), rows, C, stream.get());
      stream.synchronize();
      CHECK(test::from_bfloat16_bits(out.download()) == tables.expected(tokens, positions));
    }
  }
}

TEST_CASE("launch_embedding_at_cursor_bf16 reads the position from device memory",
          "[kernels][bf16]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const Tables tables(rng, 500, 40, 768);
  for (const int B : {1, 17, 64}) {
    const int position = B % tables.P;
    CAPTURE(B, position);
    const std::vector<std::int32_t> tokens = test::random_ints(rng, B, 0, tables.V - 1);
    const test::DeviceArray<std::int32_t> tokens_device(tokens);
    const test::DeviceArray<DecodePosition> cursor = test::device_cursor(3, position);
    test::DeviceBfloats out(static_cast<std::size_t>(B) * 768);
    out.poison();
    launch_embedding_at_cursor_bf16(
        tokens_device.get(), cursor.get(), test::as_bfloat16(tables.wte_device),
        test::as_bfloat16(tables.wpe_device), test::as_bfloat16(out), B, 768, stream.get());
    stream.synchronize();
    CHECK(
        test::from_bfloat16_bits(out.download()) ==
        tables.expected(tokens, std::vector<std::int32_t>(static_cast<std::size_t>(B), position)));
  }
}

TEST_CASE("bf16 embedding launchers reject bad arguments", "[kernels][bf16]") {
  test::DeviceStream stream;
  test::DeviceArray<std::int32_t> ids(4);
  test::DeviceBfloats table(64);
  __nv_bfloat16* const t = test::as_bfloat16(table);
  CHECK_THROWS_AS(launch_embedding_bf16(ids.get(), nullptr, t, t, t, 1, 8, stream.get()),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding_bf16(ids.get(), ids.get(), t, t, t, 0, 8, stream.get()),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding_at_cursor_bf16(ids.get(), nullptr, t, t, t, 1, 8, stream.get()),
                  std::invalid_argument);
}

}  // namespace
}  // namespace ladder
