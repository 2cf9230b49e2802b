// Stream capture and CUDA graphs on the emulated device (see emulated_driver.h): a capture
// is the list of launches made on the stream; a graph and an exec hold that list; a graph
// launch queues one op per kernel, in order, exactly as if the launches were made again.
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/emulated_state.h"

namespace ptxserve::cuda::emulated {
namespace {

using Lock = std::lock_guard<std::mutex>;

bool LiveStream(CUstream s) { return s != nullptr && S().streams.count(s) != 0; }

// Whether a capture on `s` forbids an unsafe call from this thread.
bool Forbids(const CUstream_st& s) {
  if (s.capture != CU_STREAM_CAPTURE_STATUS_ACTIVE) return false;
  switch (s.capture_mode) {
    case CU_STREAM_CAPTURE_MODE_GLOBAL:
      return true;
    case CU_STREAM_CAPTURE_MODE_THREAD_LOCAL:
      return s.capture_thread == std::this_thread::get_id();
    case CU_STREAM_CAPTURE_MODE_RELAXED:
      break;
  }
  return false;
}

}  // namespace

bool Capturing(CUstream s) { return s != nullptr && s->capture != CU_STREAM_CAPTURE_STATUS_NONE; }

void InvalidateCapture(CUstream s, std::string why) {
  if (s->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE) return;  // keep the first reason
  s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  s->invalidated_by = std::move(why);
  s->captured.clear();
}

CUresult CheckCaptureAllows(const char* call) {
  for (CUstream_st* s : S().streams) {
    if (Forbids(*s)) {
      std::string why = absl::StrCat(call, " is not allowed while a stream is capturing");
      InvalidateCapture(s, why);
      SetDetail(std::move(why));
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  return CUDA_SUCCESS;
}

CUresult RejectIfCapturing(CUstream s, const char* call) {
  if (!Capturing(s)) return CUDA_SUCCESS;
  std::string why = absl::StrCat(
      call, " on a capturing stream: the emulated device captures kernel launches only");
  InvalidateCapture(s, why);
  SetDetail(std::move(why));
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult RecordLaunch(CUstream s, GraphNode node) {
  if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    SetDetail(absl::StrCat("launch of ", node.name, " into an invalidated capture (",
                           s->invalidated_by, ")"));
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  s->captured.push_back(std::move(node));
  return CUDA_SUCCESS;
}

void DestroyGraphs() {
  State& s = S();
  for (CUgraph_st* g : s.graphs) delete g;
  for (CUgraphExec_st* e : s.graph_execs) delete e;
  s.graphs.clear();
  s.graph_execs.clear();
  s.counters.live_graphs = 0;
  s.counters.live_graph_execs = 0;
}

CUresult StreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (stream == nullptr) {
    SetDetail("the legacy default stream cannot be captured");
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (!LiveStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (Capturing(stream)) {
    SetDetail("cuStreamBeginCapture on a stream that is already capturing");
    return CUDA_ERROR_ILLEGAL_STATE;
  }
  stream->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  stream->capture_mode = mode;
  stream->capture_thread = std::this_thread::get_id();
  stream->invalidated_by.clear();
  stream->captured.clear();
  return CUDA_SUCCESS;
}

CUresult StreamEndCapture(CUstream stream, CUgraph* graph) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!LiveStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (!Capturing(stream)) {
    SetDetail("cuStreamEndCapture on a stream that is not capturing");
    return CUDA_ERROR_ILLEGAL_STATE;
  }
  if (stream->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
      stream->capture_thread != std::this_thread::get_id()) {
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;  // the capture goes on
  }
  const bool invalidated = stream->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  stream->capture = CU_STREAM_CAPTURE_STATUS_NONE;
  std::vector<GraphNode> nodes = std::move(stream->captured);
  stream->captured.clear();
  if (invalidated) {
    *graph = nullptr;
    SetDetail(absl::StrCat("the capture was invalidated: ", stream->invalidated_by));
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  auto* g = new CUgraph_st;
  g->nodes = std::move(nodes);
  s.graphs.insert(g);
  ++s.counters.live_graphs;
  *graph = g;
  return CUDA_SUCCESS;
}

CUresult StreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  *status = stream == nullptr ? CU_STREAM_CAPTURE_STATUS_NONE : stream->capture;
  return CUDA_SUCCESS;
}

CUresult GraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, CUflags64 flags) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (exec == nullptr || s.graphs.count(graph) == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != 0) {
    SetDetail(absl::StrCat("cuGraphInstantiateWithFlags: the emulated device takes flags 0, not ",
                           flags));
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* e = new CUgraphExec_st;
  e->nodes = std::make_shared<const std::vector<GraphNode>>(graph->nodes);
  s.graph_execs.insert(e);
  ++s.counters.live_graph_execs;
  *exec = e;
  return CUDA_SUCCESS;
}

CUresult GraphLaunch(CUgraphExec exec, CUstream stream) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (s.graph_execs.count(exec) == 0 || !ValidStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = RejectIfCapturing(stream, "cuGraphLaunch"); r != CUDA_SUCCESS) return r;
  const std::shared_ptr<const std::vector<GraphNode>>& nodes = exec->nodes;
  const size_t n = nodes->size();
  for (size_t i = 0; i < n; ++i) {
    if (s.modules.count((*nodes)[i].module) == 0) {
      SetDetail(absl::StrCat("cuGraphLaunch: kernel ", (*nodes)[i].name, " (node ", i, " of ", n,
                             ") belongs to an unloaded module"));
      return CUDA_ERROR_INVALID_HANDLE;
    }
  }
  // Injected faults count the graph's kernels as launches. A launch-site fault fails the
  // whole graph launch before anything is queued.
  size_t fail_at = n;
  if (s.fault.fail_launch > 0 && s.launches_since_fault < s.fault.fail_launch) {
    const int64_t left = s.fault.fail_launch - s.launches_since_fault;  // >= 1
    if (left <= static_cast<int64_t>(n)) {
      fail_at = static_cast<size_t>(left - 1);
      s.launches_since_fault = s.fault.fail_launch;
    } else {
      s.launches_since_fault += static_cast<int64_t>(n);
    }
  }
  std::string what;
  if (fail_at < n) {
    what = absl::StrCat("injected failure of kernel ", (*nodes)[fail_at].name, " (node ", fail_at,
                        " of ", n, " of a graph)");
    if (s.fault.site == EmulatedFault::Site::kLaunch) {
      SetDetail(std::move(what));
      return s.fault.launch_code;
    }
  }
  emu::Emulator* e = s.emu.get();
  for (size_t i = 0; i < n; ++i) {
    if (i == fail_at) {
      s.queue.push_back(
          Op{[what] { return absl::InternalError(what); }, s.fault.launch_code, s.fault.sticky});
      continue;
    }
    s.queue.push_back(Op{[e, nodes, i] {
                           const GraphNode& g = (*nodes)[i];
                           return e->Launch(g.handle, g.grid, g.block, g.shared, g.args);
                         },
                         CUDA_ERROR_LAUNCH_FAILED, /*kernel=*/true});
  }
  s.counters.launches += static_cast<int64_t>(n);
  ++s.counters.graph_launches;
  return CUDA_SUCCESS;
}

CUresult GraphExecDestroy(CUgraphExec exec) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (s.graph_execs.erase(exec) == 0) return CUDA_ERROR_INVALID_VALUE;
  delete exec;  // queued launches keep the nodes alive
  --s.counters.live_graph_execs;
  return CUDA_SUCCESS;
}

CUresult GraphDestroy(CUgraph graph) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (s.graphs.erase(graph) == 0) return CUDA_ERROR_INVALID_VALUE;
  delete graph;
  --s.counters.live_graphs;
  return CUDA_SUCCESS;
}

}  // namespace ptxserve::cuda::emulated
