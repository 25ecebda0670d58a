// common/request_trace.hpp - a stream of generation requests: generated from a seed, or
// read from a file a user wrote, so continuous batching can be replayed on any workload.
//
// A request is a prompt (token ids), a limit on new tokens and an arrival time in
// milliseconds from the start of the trace. The generator draws everything with
// SplitMix64 (common/splitmix64.hpp), never with the standard library's distributions,
// whose output differs between library implementations: a seed gives the same trace on
// every machine. Its default is the continuous-batching workload: 512 requests, prompt
// lengths uniform in [4, 64], output limits uniform in [16, 256], all arriving at time 0;
// a positive arrival rate makes the arrivals a Poisson process instead (the same
// prompts and limits, only the arrival times change).
//
// The trace file format (version 1), line by line:
//
//     decode-ladder trace 1
//     # arrival_ms max_new_tokens prompt_token_id ...
//     0 37 464 3290 318 257
//     12.5 200 50256
//
// The first line names the format and its version. Every other line is a comment
// (first non-blank character '#'), blank, or one request: its arrival time (a decimal
// number of milliseconds, >= 0, never smaller than the request before it: the file's
// order is the arrival order), its max_new_tokens (an integer >= 1) and its prompt (one
// or more token ids), separated by spaces or tabs. The reader refuses a malformed file
// with one line naming the file, the line number and the problem.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace ladder {

class Gpt2Tokenizer;

struct Request {
  double arrival_ms = 0;  ///< milliseconds after the trace starts
  int max_new_tokens = 0;
  std::vector<std::int32_t> prompt;

  bool operator==(const Request& other) const {
    return arrival_ms == other.arrival_ms && max_new_tokens == other.max_new_tokens &&
           prompt == other.prompt;
  }
};

/// What generate_trace() draws. Ranges are inclusive.
struct TraceOptions {
  int requests = 512;
  int min_prompt_length = 4;
  int max_prompt_length = 64;
  int min_new_tokens = 16;
  int max_new_tokens = 256;
  /// Requests per second of a Poisson process (exponential gaps between arrivals);
  /// 0: every request arrives at time 0.
  double arrivals_per_second = 0;
  std::uint64_t seed = 0;
  int vocab_size = 50257;   ///< random prompt ids are drawn from [0, vocab_size) ...
  int excluded_id = 50256;  ///< ... other than this one (EOS), as common/prompts.hpp does
};

/// The most prompt tokens a generated trace may hold (requests x the longest prompt
/// length): 2^26 ids, 256 MiB. generate_trace() refuses more before drawing anything.
constexpr long long kMaxTraceTokens = 1LL << 26;

/// The latest arrival a served trace may hold, in ms: one hour. A replay waits for every
/// arrival, so a later one (or one whose wait would overflow) is refused up front.
constexpr double kMaxArrivalMs = 3600.0 * 1000.0;

/// The requests of `options`, random token prompts, in arrival order. Arrival times are
/// whole microseconds (so a trace file written with them reads back exactly). Throws
/// std::invalid_argument naming the option that is out of range, and for more than
/// kMaxTraceTokens prompt tokens.
std::vector<Request> generate_trace(const TraceOptions& options);

/// As generate_trace(), but each request's prompt is one of `texts` (drawn with the
/// seed), encoded whole by `tokenizer`: the prompt lengths are the texts' own and the
/// prompt length range and vocabulary of `options` are not used. Throws
/// std::invalid_argument when `texts` is empty or a text encodes to no tokens.
std::vector<Request> generate_text_trace(const TraceOptions& options,
                                         const std::vector<std::string>& texts,
                                         const Gpt2Tokenizer& tokenizer);

/// What a trace must respect to run on a model: ids in [0, vocab_size), every request
/// within the context as in chapters 00-10, prompt length + max_new_tokens <=
/// context_positions, and every arrival at most max_arrival_ms. A non-positive value is
/// not checked.
struct TraceLimits {
  int vocab_size = 0;
  int context_positions = 0;
  double max_arrival_ms = 0;
};

/// Throws std::invalid_argument, one line "trace: request i: problem" (i counted from 0),
/// for the first request that breaks the rules of the format above or `limits`, and for
/// an empty trace.
void validate_trace(const std::vector<Request>& requests, const TraceLimits& limits);

/// Parses the format above from `input`; `source` names it in messages (a path).
/// Throws std::runtime_error, one line: "source:line: problem; what to do".
std::vector<Request> parse_trace(std::istream& input, const std::string& source,
                                 const TraceLimits& limits);

/// parse_trace() of the file at `path`.
std::vector<Request> read_trace(const std::string& path, const TraceLimits& limits);

/// Writes `requests` in the format above (arrival times in the shortest form that reads
/// back to the same double). Throws std::runtime_error when the file cannot be written,
/// std::invalid_argument when the requests break the format's rules (validate_trace).
void write_trace(const std::string& path, const std::vector<Request>& requests);

}  // namespace ladder
