// kernels/launch_dependents.hpp - when a kernel lets the kernel after it on the stream
// start, if that one is a programmatic dependent launch (DecodeLaunch::kProgrammatic,
// kernels/decode_matmul.cuh): the LayerNorm and attention kernels that precede a decode
// matmul take it as an argument.
#pragma once

namespace ladder {

/// When a kernel lets a programmatic dependent launched after it begin:
///   kAtStart - as soon as every one of its blocks has started (each block's first
///              instruction is griddepcontrol.launch_dependents): the dependent's blocks
///              take the SMs' free slots and stream their weight while this kernel runs
///              (the launchers' default);
///   kAtExit  - only as its blocks exit, as a kernel without the instruction does (the
///              baseline bench/decode_matmul.cu times against kAtStart).
/// The dependent waits for this kernel's completion before it reads anything the kernel
/// wrote (griddepcontrol.wait), so both give the same bits; before a plain launch
/// neither has any effect.
enum class LaunchDependents { kAtStart, kAtExit };

}  // namespace ladder
