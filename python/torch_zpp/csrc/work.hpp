// torch_zpp: the Work of one call (or one coalesced group of calls), as
// PyTorch's UCC backend has its WorkUCC next to the process group.
#pragma once

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Work.hpp>

#ifdef ZPP_TORCH_CUDA
#include <c10/core/Event.h>
#endif

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zpp.h"

namespace torch_zpp {

class ZppBackend;

// Host tensors: the calls run on a zpp host stream of the work's own; the
// backend's completion thread calls complete(). Device tensors (where
// compiled in): the calls are on torch's current stream; an event marks
// their end.
class ZppWork : public c10d::Work {
 public:
  ZppWork(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs);
  ~ZppWork() override;

  // Device work orders the caller's current stream after the operation and
  // returns, as NCCL's does: the host does not wait. Host work waits for
  // the completion thread (and raises zpp's error).
  bool wait(std::chrono::milliseconds timeout) override;

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  friend class ZppBackend;

  // Runs on the completion thread: waits for the work, then finishes it.
  // reason() gives the communicator's error once the work failed.
  void complete(const std::function<std::string()>& reason);

  std::string name_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;                  // buffers zpp reads or writes
  std::vector<std::function<void()>> finishers_;  // copies into the caller's outputs
  zppHostStream_t stream_ = nullptr;
  std::optional<c10::Device> device_;  // set for CUDA tensors
  c10::intrusive_ptr<c10::ivalue::Future> future_;
#ifdef ZPP_TORCH_CUDA
  std::unique_ptr<c10::Event> event_;
#endif
};

}  // namespace torch_zpp
