// kernels/decode_position.cuh - where a device-resident decode loop stands.
//
// From chapter 04 on, the step counter and the cache position live in device memory:
// the kernels of a step read them, and the last kernel of the step advances them. The
// host then passes nothing that changes from step to step, so a whole step can later
// be captured once in a CUDA graph and replayed.
#pragma once

namespace ladder {

struct DecodePosition {
  int step;      ///< column of output_tokens the current step writes (0-based)
  int position;  ///< cache position of the token the current step feeds
};

}  // namespace ladder
