// common/request_trace.cpp - generating, reading and writing request traces.
#include "common/request_trace.hpp"

#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "common/splitmix64.hpp"
#include "common/tokenizer.hpp"

namespace ladder {

namespace {

constexpr const char* trace_header = "decode-ladder trace 1";

// Two generators, so the Poisson variant of a seed keeps the prompts and limits of the
// time-0 variant: only the arrival stream differs.
constexpr std::uint64_t request_stream = 0x7265717565737473ull;  // "requests"
constexpr std::uint64_t arrival_stream = 0x6172726976616C73ull;  // "arrivals"

/// A number in [low, high] (inclusive). The modulo's bias is below 2^-50 for these ranges.
int uniform_int(std::uint64_t& state, int low, int high) {
  const auto choices = static_cast<std::uint64_t>(high - low) + 1;
  return low + static_cast<int>(splitmix64_next(state) % choices);
}

void require_range(int low, int high, int smallest, const char* what) {
  if (low < smallest || high < low) {
    throw std::invalid_argument(std::string("trace: ") + what + " range [" + std::to_string(low) +
                                ", " + std::to_string(high) + "] is empty or starts below " +
                                std::to_string(smallest) +
                                "; give min <= max, both >= " + std::to_string(smallest));
  }
}

void validate_options(const TraceOptions& options) {
  if (options.requests < 1) {
    throw std::invalid_argument("trace: " + std::to_string(options.requests) +
                                " requests; ask for at least one");
  }
  require_range(options.min_new_tokens, options.max_new_tokens, 1, "new-token limit");
  if (!(options.arrivals_per_second >= 0) || std::isinf(options.arrivals_per_second)) {
    throw std::invalid_argument(
        "trace: the arrival rate must be a finite number >= 0 per second (0: all at time 0)");
  }
}

/// Arrival times: all 0, or the partial sums of exponential gaps with mean
/// 1000 / rate ms, rounded to whole microseconds.
std::vector<double> draw_arrivals(const TraceOptions& options) {
  std::vector<double> arrivals(static_cast<std::size_t>(options.requests), 0.0);
  if (options.arrivals_per_second == 0) return arrivals;
  std::uint64_t state = options.seed ^ arrival_stream;
  constexpr double two_to_minus_53 = 1.0 / 9007199254740992.0;
  double time_ms = 0;
  for (double& arrival : arrivals) {
    const double u = static_cast<double>((splitmix64_next(state) >> 11) + 1) * two_to_minus_53;
    time_ms += -std::log(u) * 1000.0 / options.arrivals_per_second;  // u in (0, 1]
    arrival = static_cast<double>(std::llround(time_ms * 1000.0)) / 1000.0;
  }
  return arrivals;
}

/// The shortest decimal form that reads back to the same double.
std::string shortest_decimal(double value) {
  char text[64];
  const auto written = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, written.ptr);
}

/// Why `request` cannot be in a trace (empty when it can). `previous_arrival_ms` is the
/// arrival of the request before it.
std::string request_problem(const Request& request, double previous_arrival_ms,
                            const TraceLimits& limits) {
  if (!std::isfinite(request.arrival_ms) || request.arrival_ms < 0) {
    return "the arrival time must be a finite number of milliseconds >= 0";
  }
  if (limits.max_arrival_ms > 0 && request.arrival_ms > limits.max_arrival_ms) {
    return "arrival " + shortest_decimal(request.arrival_ms) + " ms is later than the " +
           shortest_decimal(limits.max_arrival_ms) + " ms a replay waits; bring it forward";
  }
  if (request.arrival_ms < previous_arrival_ms) {
    return "arrival " + shortest_decimal(request.arrival_ms) + " ms is earlier than the " +
           "request before it (" + shortest_decimal(previous_arrival_ms) +
           " ms); list requests in arrival order";
  }
  if (request.max_new_tokens < 1) return "max_new_tokens must be an integer >= 1";
  if (request.prompt.empty()) return "no prompt tokens; give at least one token id";
  for (std::int32_t token : request.prompt) {
    if (token < 0 || (limits.vocab_size > 0 && token >= limits.vocab_size)) {
      return "token id " + std::to_string(token) + " is outside the vocabulary [0, " +
             (limits.vocab_size > 0 ? std::to_string(limits.vocab_size) : "...") + ")";
    }
  }
  const long long positions =
      static_cast<long long>(request.prompt.size()) + request.max_new_tokens;
  if (limits.context_positions > 0 && positions > limits.context_positions) {
    return "prompt length " + std::to_string(request.prompt.size()) + " + max_new_tokens " +
           std::to_string(request.max_new_tokens) + " = " + std::to_string(positions) +
           " positions exceed the context of " + std::to_string(limits.context_positions) +
           "; shorten the prompt or lower the limit";
  }
  return "";
}

template <typename Number>
bool parse_number(const std::string& word, Number& value) {
  const char* end = word.data() + word.size();
  const auto [stop, error] = std::from_chars(word.data(), end, value);
  return error == std::errc() && stop == end;
}

}  // namespace

std::vector<Request> generate_trace(const TraceOptions& options) {
  validate_options(options);
  require_range(options.min_prompt_length, options.max_prompt_length, 1, "prompt length");
  if (options.vocab_size < 2) {
    throw std::invalid_argument("trace: random prompts need a vocabulary of 2 or more ids");
  }
  if (static_cast<long long>(options.requests) * options.max_prompt_length > kMaxTraceTokens) {
    throw std::invalid_argument("trace: " + std::to_string(options.requests) +
                                " requests of up to " + std::to_string(options.max_prompt_length) +
                                " prompt tokens exceed the " + std::to_string(kMaxTraceTokens) +
                                " a generated trace holds; ask for fewer or shorter");
  }
  const std::vector<double> arrivals = draw_arrivals(options);
  const bool exclude = options.excluded_id >= 0 && options.excluded_id < options.vocab_size;
  std::uint64_t state = options.seed ^ request_stream;
  std::vector<Request> requests(static_cast<std::size_t>(options.requests));
  for (std::size_t i = 0; i < requests.size(); ++i) {
    Request& request = requests[i];
    const int length = uniform_int(state, options.min_prompt_length, options.max_prompt_length);
    request.max_new_tokens = uniform_int(state, options.min_new_tokens, options.max_new_tokens);
    request.arrival_ms = arrivals[i];
    request.prompt.resize(static_cast<std::size_t>(length));
    for (std::int32_t& token : request.prompt) {
      token = uniform_int(state, 0, options.vocab_size - (exclude ? 2 : 1));
      if (exclude && token >= options.excluded_id) ++token;  // skip the excluded id
    }
  }
  return requests;
}

std::vector<Request> generate_text_trace(const TraceOptions& options,
                                         const std::vector<std::string>& texts,
                                         const Gpt2Tokenizer& tokenizer) {
  validate_options(options);
  if (texts.empty()) throw std::invalid_argument("trace: no texts to draw prompts from");
  std::vector<std::vector<std::int32_t>> encoded;
  for (const std::string& text : texts) {
    encoded.push_back(tokenizer.encode(text));
    if (encoded.back().empty()) {
      throw std::invalid_argument("trace: text " + std::to_string(encoded.size() - 1) +
                                  " encodes to no tokens; give every prompt some text");
    }
  }
  const std::vector<double> arrivals = draw_arrivals(options);
  std::uint64_t state = options.seed ^ request_stream;
  std::vector<Request> requests(static_cast<std::size_t>(options.requests));
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const int text = uniform_int(state, 0, static_cast<int>(texts.size()) - 1);
    requests[i].max_new_tokens = uniform_int(state, options.min_new_tokens, options.max_new_tokens);
    requests[i].arrival_ms = arrivals[i];
    requests[i].prompt = encoded[static_cast<std::size_t>(text)];
  }
  return requests;
}

std::vector<Request> parse_trace(std::istream& input, const std::string& source,
                                 const TraceLimits& limits) {
  std::vector<Request> requests;
  std::string line;
  int line_number = 0;
  double previous_arrival_ms = 0;
  while (std::getline(input, line)) {
    ++line_number;
    const std::string where = source + ":" + std::to_string(line_number) + ": ";
    if (!line.empty() && line.back() == '\r') line.pop_back();  // written on Windows
    if (line_number == 1) {
      if (line != trace_header) {
        throw std::runtime_error(where + "the first line must be '" + trace_header +
                                 "' (a request trace, format version 1)");
      }
      continue;
    }
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string word; words >> word;) fields.push_back(word);
    if (fields.empty() || fields.front().front() == '#') continue;
    if (fields.size() < 3) {
      throw std::runtime_error(where + "a request needs arrival_ms, max_new_tokens and at least " +
                               "one prompt token id; this line has " +
                               std::to_string(fields.size()) + " field(s)");
    }
    Request request;
    if (!parse_number(fields[0], request.arrival_ms)) {
      throw std::runtime_error(where + "arrival_ms '" + fields[0] + "' is not a number");
    }
    if (!parse_number(fields[1], request.max_new_tokens)) {
      throw std::runtime_error(where + "max_new_tokens '" + fields[1] + "' is not an integer");
    }
    for (std::size_t i = 2; i < fields.size(); ++i) {
      std::int32_t token = 0;
      if (!parse_number(fields[i], token)) {
        throw std::runtime_error(where + "'" + fields[i] + "' is not a token id");
      }
      request.prompt.push_back(token);
    }
    const std::string problem = request_problem(request, previous_arrival_ms, limits);
    if (!problem.empty()) throw std::runtime_error(where + problem);
    previous_arrival_ms = request.arrival_ms;
    requests.push_back(std::move(request));
  }
  if (line_number == 0) {
    throw std::runtime_error(source + ": empty; a trace starts with the line '" + trace_header +
                             "'");
  }
  if (requests.empty()) {
    throw std::runtime_error(source + ": holds no requests; add one line per request");
  }
  return requests;
}

std::vector<Request> read_trace(const std::string& path, const TraceLimits& limits) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot read trace file '" + path + "'");
  return parse_trace(file, path, limits);
}

void validate_trace(const std::vector<Request>& requests, const TraceLimits& limits) {
  if (requests.empty()) throw std::invalid_argument("trace: no requests; give at least one");
  double previous_arrival_ms = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const std::string problem = request_problem(requests[i], previous_arrival_ms, limits);
    if (!problem.empty()) {
      throw std::invalid_argument("trace: request " + std::to_string(i) + ": " + problem);
    }
    previous_arrival_ms = requests[i].arrival_ms;
  }
}

void write_trace(const std::string& path, const std::vector<Request>& requests) {
  validate_trace(requests, {});
  std::ofstream file(path);
  if (!file) throw std::runtime_error("cannot write trace file '" + path + "'");
  file << trace_header << "\n# arrival_ms max_new_tokens prompt_token_id ...\n";
  for (const Request& request : requests) {
    file << shortest_decimal(request.arrival_ms) << ' ' << request.max_new_tokens;
    for (std::int32_t token : request.prompt) file << ' ' << token;
    file << '\n';
  }
  if (!file) throw std::runtime_error("failed writing trace file '" + path + "'");
}

}  // namespace ladder
