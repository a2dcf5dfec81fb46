// torch_zpp: the Work of one call (or one coalesced group of calls), as
// PyTorch's UCC backend has its WorkUCC next to the process group.
#pragma once

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Work.hpp>

#ifdef ZPP_TORCH_CUDA
#include <c10/core/Event.h>
#endif

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zpp.h"

namespace torch_zpp {

class ZppBackend;

// Host tensors: the work holds its zpp calls until the backend's worker runs
// them, blocking, in issue order; the worker then calls complete() with
// their result. Device tensors (where compiled in): the calls are already on
// torch's current stream; an event marks their end and complete() waits for
// it.
class ZppWork : public c10d::Work {
 public:
  // One zpp call; stream NULL on the worker (host), torch's current stream
  // on the caller (device).
  using Call = std::function<zppResult_t(zppComm_t, zppStream_t)>;

  ZppWork(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs);

  // Device work orders the caller's current stream after the operation and
  // returns, as NCCL's does: the host does not wait. Host work waits for
  // the worker (and raises zpp's error).
  bool wait(std::chrono::milliseconds timeout) override;

  std::vector<at::Tensor> result() override { return outputs_; }
  // The sender of a recvAnysource, once complete (Work::_source_rank()).
  int sourceRank() const override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  friend class ZppBackend;

  // On the worker, after the calls ran: res is their first error (with why,
  // zpp's reason) or zppSuccess. Copies into the caller's outputs, then
  // completes the Work and its future; the buffers are let go.
  void complete(zppResult_t res, const std::string& why);

  std::string name_;
  uint64_t seq_ = 0;                 // the backend's issue order, 1, 2, ...
  std::atomic<bool> queued_{false};  // submitted (a coalesced work: at endCoalescing)
  bool group_ = false;               // the calls run between zppGroupStart and zppGroupEnd
  int source_ = -1;                  // recvAnysource: the sender, written by zpp
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;                  // buffers zpp reads or writes
  std::vector<Call> calls_;                       // host: run by the worker
  std::vector<std::function<void()>> finishers_;  // copies into the caller's outputs
  std::optional<c10::Device> device_;             // set for CUDA tensors
  c10::intrusive_ptr<c10::ivalue::Future> future_;
#ifdef ZPP_TORCH_CUDA
  std::unique_ptr<c10::Event> event_;
#endif
};

}  // namespace torch_zpp
