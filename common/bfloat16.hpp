// common/bfloat16.hpp - bfloat16 on the host: rounding, widening, and weights packed for
// the bf16 decode kernels.
//
// bfloat16 is the top half of an IEEE float: 1 sign bit, the same 8 exponent bits (so the
// same range, subnormals included) and 7 of the 23 mantissa bits (8 significant bits with
// the implicit one: in [2^e, 2^(e+1)) the values are 2^(e-7) apart, so a rounding errs by
// at most 2^-8 = 0.39% relative, 2^-9 near the top of the binade).
// Widening is exact (append 16 zero bits); narrowing rounds to nearest, ties to even, as
// CUDA's __float2bfloat16_rn and torch's .to(torch.bfloat16) do, so the CPU reference
// rounds exactly as the kernels will:
//   * finite values round to the nearer bf16, a tie to the one with an even last bit;
//   * values past the largest finite bf16 (0x7F7F, about 3.39e38) by half a step or more
//     round to infinity, with their sign;
//   * infinities stay infinities; a NaN stays a NaN (quiet, sign and top payload bits
//     kept; CUDA writes its canonical 0x7FFF instead: compare NaN-ness, not bits).
// No CUDA header is needed: this is plain C++ for the CPU reference and its tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ladder {

/// The bf16 bit pattern nearest to `value` (ties to even; see the file comment).
std::uint16_t float_to_bfloat16_bits(float value);

/// The float a bf16 bit pattern stands for (exact).
float bfloat16_bits_to_float(std::uint16_t bits);

/// `value` rounded to the nearest bf16 and widened back to float.
float round_to_bfloat16(float value);

/// Rounds n floats to bf16 in place (each stays a float holding a bf16 value).
void round_to_bfloat16(float* values, std::size_t n);

// ---------------------------------------------------------------- packed weights

/// How a matrix W [K, N] (GPT-2's Conv1D layout, y = x W: K inputs, N outputs) is laid out
/// in bf16 for a decode kernel:
///   * k_major: as stored, [K, N] row-major: element (k, n) at k * N + n. A thread that
///     reads 8 consecutive bf16 (16 bytes) gets 8 output columns of one input row.
///   * n_major: transposed, [N, K] row-major: element (k, n) at n * K + k. 16 bytes hold 8
///     consecutive inputs of one output column, so a thread or warp owning a column dots
///     it with x streaming contiguous memory (the GEMV view, and the "col" B operand of
///     mma.sync's m16n8k16).
///   * k_tiled: K cut into tiles of kBfloatTileK = 8 inputs (16 bytes); tile t holds, for
///     every column n in order, its 8 inputs t*8 .. t*8+7: element (k, n) at
///     ((k / 8) * N + n) * 8 + k % 8. 32 lanes reading 16 bytes each for 32 neighbouring
///     columns read 512 contiguous bytes (coalesced), which n_major's rows K apart do not.
///     K is padded with zeros to a multiple of 8.
enum class BfloatLayout { k_major, n_major, k_tiled };

/// Inputs per tile of BfloatLayout::k_tiled: 8 bf16, one 16-byte load.
inline constexpr int kBfloatTileK = 8;

/// Number of bf16 values W [K, N] takes in `layout` (K * N, but K rounded up to a
/// multiple of kBfloatTileK for k_tiled).
std::size_t packed_bfloat16_size(int K, int N, BfloatLayout layout);

/// W [K, N] fp32 (row-major, K * N floats at `weights`, for example a matrix of the flat
/// Gpt2Weights array) rounded to bf16 bit patterns in `layout` (padding is +0).
/// Throws std::invalid_argument when K, N < 1.
std::vector<std::uint16_t> pack_bfloat16_weights(const float* weights, int K, int N,
                                                 BfloatLayout layout);

/// The same from a vector; also throws when weights.size() != K * N.
std::vector<std::uint16_t> pack_bfloat16_weights(const std::vector<float>& weights, int K, int N,
                                                 BfloatLayout layout);

/// The transpose packed: W = M^T [K, N] from M [N, K] row-major (N * K floats at
/// `matrix`), as the tied LM head streams wte [V, C]: pack_bfloat16_weights_transposed(
/// wte, V, C, BfloatLayout::k_tiled) packs W = wte^T [C, V]. Throws as above.
std::vector<std::uint16_t> pack_bfloat16_weights_transposed(const float* matrix, int N, int K,
                                                            BfloatLayout layout);

/// The inverse view: bf16 bit patterns in `layout` widened back to fp32 [K, N] row-major.
/// unpack(pack(W)) == W rounded to bf16, element for element.
/// Throws std::invalid_argument when packed.size() != packed_bfloat16_size(K, N, layout) or
/// K, N < 1.
std::vector<float> unpack_bfloat16_weights(const std::vector<std::uint16_t>& packed, int K, int N,
                                           BfloatLayout layout);

}  // namespace ladder
