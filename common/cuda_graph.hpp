// common/cuda_graph.hpp - CUDA graphs: what a capture froze, the graph kept for it, and
// owned graphs with the capture, launch and wait calls around them checked.
//
// A stream capture records the work enqueued on a stream instead of running it; the
// graph it yields replays that work with one launch. What it records is every call's
// arguments as they were: kernel arguments (sizes and device addresses), copy sources
// and destinations. A replay therefore does exactly what the captured calls did, on the
// same memory - so what changes from one replay to the next must already live in
// device memory (a cursor, flags), and a graph may only be replayed while everything it
// froze is still what the caller would pass now. GraphKey lists those values,
// GraphCache keeps the graph of the last key, and a different key means a new capture.
//
// Defines: GraphKey, GraphCache<Graph>, CudaGraph, CudaGraphExec, capture_graph,
// capture_into_graph, add_while_node, create_condition, conditional_nodes_unsupported_reason,
// require_conditional_nodes, synchronize_stage.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ladder {

// ---------------------------------------------------------------- what a capture froze

/// The values the host chose for a captured piece of work: sizes and the address of
/// every buffer it was launched with, in a fixed order. Two captures of the same code
/// with equal keys record the same calls; a graph replayed under a different key would
/// run on the wrong shapes or on memory that belongs to someone else by now.
class GraphKey {
 public:
  GraphKey& add_size(std::int64_t value) {
    values_.push_back(static_cast<std::uint64_t>(value));
    return *this;
  }
  GraphKey& add_address(const void* address) {
    values_.push_back(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(address)));
    return *this;
  }
  GraphKey& add_addresses(std::initializer_list<const void*> addresses) {
    for (const void* address : addresses) add_address(address);
    return *this;
  }
  bool operator==(const GraphKey& other) const { return values_ == other.values_; }
  bool operator!=(const GraphKey& other) const { return !(*this == other); }
  bool empty() const { return values_.empty(); }

 private:
  std::vector<std::uint64_t> values_;
};

/// The graph captured for the last key it was given: one shape at a time, since a run
/// moves from one configuration to the next and never back. `Graph` is CudaGraphExec
/// on the GPU and a stand-in in the CPU tests.
template <typename Graph>
class GraphCache {
 public:
  /// The graph captured for `key`, or null: none yet, or the last one froze other values
  /// (then it must be captured again).
  Graph* find(const GraphKey& key) { return graph_ && key == key_ ? &*graph_ : nullptr; }
  /// Keeps `graph`, captured for `key`, in place of the one before.
  Graph& store(GraphKey key, Graph graph) {
    graph_.reset();
    key_ = std::move(key);
    graph_.emplace(std::move(graph));
    ++captures_;
    return *graph_;
  }
  /// How many graphs were stored: captures, for the tests and the curious.
  std::uint64_t captures() const { return captures_; }

 private:
  GraphKey key_;
  std::optional<Graph> graph_;
  std::uint64_t captures_ = 0;
};

// ---------------------------------------------------------------- owned graphs

/// A graph being built (cudaGraph_t), destroyed with its owner.
class CudaGraph {
 public:
  /// An empty graph (cudaGraphCreate), for nodes added by hand or capture_into_graph.
  static CudaGraph create();
  /// Takes ownership of `graph`.
  explicit CudaGraph(cudaGraph_t graph = nullptr) : graph_(graph) {}
  ~CudaGraph();
  CudaGraph(CudaGraph&& other) noexcept : graph_(std::exchange(other.graph_, nullptr)) {}
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  cudaGraph_t get() const { return graph_; }

 private:
  cudaGraph_t graph_ = nullptr;
};

/// An executable graph (cudaGraphExec_t): instantiated once, launched many times.
class CudaGraphExec {
 public:
  /// Instantiates `graph` (which may be destroyed afterwards); `name` says what it holds
  /// ("decode step") in every error about it.
  CudaGraphExec(const CudaGraph& graph, std::string name);
  ~CudaGraphExec();
  CudaGraphExec(CudaGraphExec&& other) noexcept
      : exec_(std::exchange(other.exec_, nullptr)), name_(std::move(other.name_)) {}
  CudaGraphExec& operator=(CudaGraphExec&& other) noexcept;
  CudaGraphExec(const CudaGraphExec&) = delete;
  CudaGraphExec& operator=(const CudaGraphExec&) = delete;

  /// Enqueues one replay on `stream`; throws CudaError naming the graph when the launch
  /// is refused. A fault inside the graph shows later, where the host waits
  /// (synchronize_stage).
  void launch(cudaStream_t stream) const;
  const std::string& name() const { return name_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
  std::string name_;
};

// ---------------------------------------------------------------- capture

/// Records the work `enqueue` puts on `stream` into a new graph. The capture is global
/// (cudaStreamCaptureModeGlobal): while it runs, a call that could synchronize with
/// captured work - cudaMalloc, cudaMemcpy, any Synchronize - fails and spoils the
/// capture instead of silently running. When `enqueue` throws or the capture fails, the
/// capture is ended and thrown away before the error goes on, so the stream stays
/// usable; the error names `name`.
CudaGraph capture_graph(cudaStream_t stream, const std::function<void()>& enqueue,
                        const std::string& name);

/// The same into `graph`, which exists already (a conditional node's body, or a graph
/// whose conditional handle had to exist before its first node was captured):
/// cudaStreamBeginCaptureToGraph. `graph` stays the caller's.
void capture_into_graph(cudaGraph_t graph, cudaStream_t stream,
                        const std::function<void()>& enqueue, const std::string& name);

/// Adds a conditional WHILE node behind everything `stream` has captured so far, makes
/// it what the stream's next captured work depends on, and returns its body graph
/// (owned by the node) to be filled by capture_into_graph. The body runs again and again
/// while the condition behind `condition` is nonzero when the node starts and after
/// each pass; kernels set it with cudaGraphSetConditional. Throws CudaError (one line:
/// "conditional graph nodes are not supported ...") when the GPU or driver cannot.
cudaGraph_t add_while_node(cudaStream_t stream, cudaGraphConditionalHandle condition);

/// The handle of a condition of `graph` that every launch of it starts at `initial`
/// (cudaGraphConditionalHandleCreate with cudaGraphCondAssignDefault). Throws as
/// add_while_node.
cudaGraphConditionalHandle create_condition(const CudaGraph& graph, unsigned int initial);

/// Why a driver of `driver_version` (cudaDriverGetVersion's number, 1000 * major +
/// 10 * minor) cannot run conditional graph nodes, or empty when it can (CUDA 12.4 on).
std::string conditional_nodes_unsupported_reason(int driver_version);

/// Throws CudaError with that reason when this machine's driver cannot run them.
void require_conditional_nodes();

// ---------------------------------------------------------------- waiting

/// Waits for `stream`, or for `event`. An error is what the GPU ran since the last wait
/// running into trouble - a fault inside a graph surfaces here, not at its launch - and
/// is thrown as CudaError naming `stage` ("the generation graph"), so the report says
/// which work failed.
void synchronize_stage(cudaStream_t stream, const std::string& stage);
void synchronize_stage(cudaEvent_t event, const std::string& stage);

}  // namespace ladder
