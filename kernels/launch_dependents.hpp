// kernels/launch_dependents.hpp - how a kernel of a decode step waits for the kernel
// before it on the stream (DecodeLaunch: plain, or a programmatic dependent launch,
// kernels/decode_matmul.cuh), and when it lets the kernel after it start
// (LaunchDependents): the decode matmuls, and the LayerNorm and attention kernels
// between them, take them as arguments.
#pragma once

namespace ladder {

/// How a kernel's launch waits for the kernel before it on the stream.
enum class DecodeLaunch {
  kAfterPrevious,  ///< a plain launch: the blocks start once the previous kernel finished
  kProgrammatic,   ///< programmatic dependent launch: the blocks may start earlier, and
                   ///< read nothing another kernel writes until griddepcontrol.wait (a
                   ///< decode matmul streams its weight meanwhile; compute capability 9.0
                   ///< on; elsewhere a plain launch, DecodeMatmulWorkspace)
};

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
