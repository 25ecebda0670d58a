// common/cuda_graph.cpp - owned graphs, capture, conditional nodes and waits, checked.
#include "common/cuda_graph.hpp"

#include <cstdio>

#include "common/cuda_check.hpp"

namespace ladder {

namespace {

/// "<what> failed: cudaErrorX (text)" as a CudaError.
[[noreturn]] void throw_graph_error(const std::string& what, cudaError_t status) {
  throw CudaError(what + " failed: " + cudaGetErrorName(status) + " (" +
                  cudaGetErrorString(status) + ")");
}

/// A conditional-node call's status: "not supported" becomes the one line a user of an
/// old driver or GPU needs; anything else is an ordinary CUDA error.
void check_conditional_call(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  if (status == cudaErrorNotSupported)
    throw CudaError(
        std::string("conditional graph nodes are not supported by this GPU or driver (") + call +
        ": " + cudaGetErrorName(status) + ")");
  throw_graph_error(call, status);
}

/// Ends the capture on `stream` after something went wrong in it, without throwing. The
/// graph the capture made is destroyed when it is the capture's own (`owns_graph`);
/// a graph captured into stays the caller's.
void abandon_capture(cudaStream_t stream, bool owns_graph) {
  cudaGraph_t partial = nullptr;
  if (cudaStreamEndCapture(stream, &partial) == cudaSuccess && owns_graph && partial != nullptr)
    cudaGraphDestroy(partial);
  // A refused call inside the capture leaves its error as the "last error"; clear it so
  // that the next launch check does not blame an innocent kernel.
  static_cast<void>(cudaGetLastError());
}

/// Runs `enqueue` inside the capture begun on `stream` and ends it; returns the graph.
cudaGraph_t finish_capture(cudaStream_t stream, const std::function<void()>& enqueue,
                           const std::string& name, bool owns_graph) {
  try {
    enqueue();
  } catch (...) {
    abandon_capture(stream, owns_graph);
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(stream, &graph);
  if (status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    throw_graph_error("capturing the " + name +
                          " graph (a call that may not run inside a capture - a "
                          "synchronization, cudaMalloc, a copy to pageable memory - was made)",
                      status);
  }
  return graph;
}

}  // namespace

// ---------------------------------------------------------------- owned graphs

CudaGraph CudaGraph::create() {
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaGraphCreate(&graph, 0));
  return CudaGraph(graph);
}

CudaGraph::~CudaGraph() {
  if (graph_ != nullptr && cudaGraphDestroy(graph_) != cudaSuccess)
    std::fprintf(stderr, "warning: cudaGraphDestroy failed\n");
}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
    graph_ = std::exchange(other.graph_, nullptr);
  }
  return *this;
}

CudaGraphExec::CudaGraphExec(const CudaGraph& graph, std::string name) : name_(std::move(name)) {
  const cudaError_t status = cudaGraphInstantiate(&exec_, graph.get(), 0);
  if (status != cudaSuccess) {
    exec_ = nullptr;
    throw_graph_error("instantiating the " + name_ + " graph", status);
  }
}

CudaGraphExec::~CudaGraphExec() {
  // An executable graph still running is freed once it has finished, not stopped.
  if (exec_ != nullptr && cudaGraphExecDestroy(exec_) != cudaSuccess)
    std::fprintf(stderr, "warning: cudaGraphExecDestroy failed (%s graph)\n", name_.c_str());
}

CudaGraphExec& CudaGraphExec::operator=(CudaGraphExec&& other) noexcept {
  if (this != &other) {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    exec_ = std::exchange(other.exec_, nullptr);
    name_ = std::move(other.name_);
  }
  return *this;
}

void CudaGraphExec::launch(cudaStream_t stream) const {
  const cudaError_t status = cudaGraphLaunch(exec_, stream);
  if (status != cudaSuccess) throw_graph_error("launching the " + name_ + " graph", status);
}

// ---------------------------------------------------------------- capture

CudaGraph capture_graph(cudaStream_t stream, const std::function<void()>& enqueue,
                        const std::string& name) {
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  return CudaGraph(finish_capture(stream, enqueue, name, /*owns_graph=*/true));
}

void capture_into_graph(cudaGraph_t graph, cudaStream_t stream,
                        const std::function<void()>& enqueue, const std::string& name) {
  CUDA_CHECK(cudaStreamBeginCaptureToGraph(stream, graph, /*dependencies=*/nullptr,
                                           /*dependencyData=*/nullptr, 0,
                                           cudaStreamCaptureModeGlobal));
  finish_capture(stream, enqueue, name, /*owns_graph=*/false);
}

cudaGraph_t add_while_node(cudaStream_t stream, cudaGraphConditionalHandle condition) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* dependencies = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  std::size_t dependency_count = 0;
  CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, /*id_out=*/nullptr, &graph, &dependencies,
                                      &edges, &dependency_count));
  if (status != cudaStreamCaptureStatusActive)
    throw CudaError("add_while_node: the stream is not capturing a graph");

  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = condition;
  params.conditional.type = cudaGraphCondTypeWhile;
  params.conditional.size = 1;  // a WHILE node has one body
  cudaGraphNode_t node = nullptr;
  check_conditional_call(
      cudaGraphAddNode(&node, graph, dependencies, edges, dependency_count, &params),
      "cudaGraphAddNode of a conditional WHILE node");
  // What the stream captures next runs after the loop, not beside it.
  CUDA_CHECK(cudaStreamUpdateCaptureDependencies(stream, &node, /*dependencyData=*/nullptr, 1,
                                                 cudaStreamSetCaptureDependencies));
  return params.conditional.phGraph_out[0];
}

cudaGraphConditionalHandle create_condition(const CudaGraph& graph, unsigned int initial) {
  cudaGraphConditionalHandle handle = 0;
  check_conditional_call(
      cudaGraphConditionalHandleCreate(&handle, graph.get(), initial, cudaGraphCondAssignDefault),
      "cudaGraphConditionalHandleCreate");
  return handle;
}

std::string conditional_nodes_unsupported_reason(int driver_version) {
  constexpr int kFirstSupportingVersion = 12040;  // CUDA 12.4
  if (driver_version >= kFirstSupportingVersion) return "";
  if (driver_version <= 0) return "conditional graph nodes need a CUDA driver, and none was found";
  return "conditional graph nodes need a driver for CUDA 12.4 or later; this one is for CUDA " +
         std::to_string(driver_version / 1000) + "." + std::to_string(driver_version % 1000 / 10);
}

void require_conditional_nodes() {
  int driver_version = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver_version));
  const std::string reason = conditional_nodes_unsupported_reason(driver_version);
  if (!reason.empty()) throw CudaError(reason);
}

// ---------------------------------------------------------------- waiting

void synchronize_stage(cudaStream_t stream, const std::string& stage) {
  const cudaError_t status = cudaStreamSynchronize(stream);
  if (status != cudaSuccess) throw_graph_error(stage + " (on the GPU)", status);
}

void synchronize_stage(cudaEvent_t event, const std::string& stage) {
  const cudaError_t status = cudaEventSynchronize(event);
  if (status != cudaSuccess) throw_graph_error(stage + " (on the GPU)", status);
}

}  // namespace ladder
