// kernels/elementwise.cuh - element-by-element operations on [rows, columns] activations:
// adding a bias, GPT-2's GELU, and the residual add.
//
// Each is one kernel with a grid-stride loop, 16-byte accesses where the shapes and
// pointers allow and a scalar path otherwise. They are memory-bound: each costs a
// full read (and write) of its tensor, which is why chapter-level fusion pays.
#pragma once

#include <cuda_runtime.h>

namespace ladder {

/// x[r, c] += bias[c] for x [rows, columns] (in place), bias [columns].
/// Throws std::invalid_argument on a null pointer or rows, columns <= 0.
void launch_add_bias(float* x, const float* bias, int rows, int columns, cudaStream_t stream);

/// out = gelu(x) elementwise over [rows, columns], GPT-2's tanh approximation:
///   gelu(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
/// out may equal x (in place); partially overlapping buffers are not allowed.
/// Throws std::invalid_argument on a null pointer or rows, columns <= 0.
void launch_gelu(const float* x, float* out, int rows, int columns, cudaStream_t stream);

/// residual += x elementwise over [rows, columns] (the residual stream, in place).
/// Throws std::invalid_argument on a null pointer or rows, columns <= 0.
void launch_residual_add(float* residual, const float* x, int rows, int columns,
                         cudaStream_t stream);

}  // namespace ladder
