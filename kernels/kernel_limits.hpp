// kernels/kernel_limits.hpp - the largest shapes the kernels accept, as plain constants.
//
// Each launcher refuses a shape past these with a message naming itself. The model's
// configuration is checked against the same numbers (Gpt2Config::validate()), before
// any device work, so a model the kernels cannot run is refused as a bad file, not
// half-way through a generation. No CUDA header here: host code that only checks sizes
// includes this alone.
#pragma once

namespace ladder {

/// Largest head size D = C / H the attention kernels accept (one warp holds a row
/// of D values as D / 32 registers per lane).
constexpr int kMaxHeadDim = 128;

/// The bf16 attention reads rows of the head size D in 16-byte packs of 8 values, so it
/// takes D = C / H only as a multiple of this (GPT-2's 64 is).
constexpr int kBfloatHeadDimMultiple = 8;

/// The longest row the LayerNorm launchers accept (every GPT-2 size; the largest,
/// GPT-2 XL, has C = 1600).
constexpr int kMaxLayernormC = 2048;

}  // namespace ladder
