// torch_zpp: see work.hpp.
#include "work.hpp"

#include <torch/csrc/distributed/c10d/exception.h>

#ifdef ZPP_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "conversions.hpp"

namespace torch_zpp {

ZppWork::ZppWork(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, name),
      name_(name),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

int ZppWork::sourceRank() const {
  TORCH_CHECK(opType_ == c10d::OpType::RECVANYSOURCE, "zpp ", name_,
              ": sourceRank() is known for a recv from any source only");
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(completed_ && !exception_, "zpp ", name_,
              ": sourceRank() needs a completed, successful recv");
  return source_;
}

bool ZppWork::wait(std::chrono::milliseconds timeout) {
  // A work still being coalesced is not queued: waiting for it would wait
  // for ever.
  TORCH_CHECK(queued_.load(), "zpp ", name_,
              ": wait() on a work inside a coalescing group; end the group first (batch_isend_irecv "
              "does)");
#ifdef ZPP_TORCH_CUDA
  if (event_) {
    event_->block(c10::cuda::getCurrentCUDAStream(device_->index()));
    return true;
  }
#endif
  bool done = c10d::Work::wait(timeout);
  // The future too: a caller that wait()s and then chains on getFuture()
  // expects it complete (torchft's managed works assert so in callbacks
  // that then() runs at once only on a completed future). It completes
  // right after the work (complete(): the work first, so that a caller of
  // the future's wait() finds the work completed as well).
  if (done) future_->wait();
  return done;
}

void ZppWork::complete(zppResult_t res, const std::string& why) {
  std::exception_ptr err;
#ifdef ZPP_TORCH_CUDA
  if (event_) event_->synchronize();
#endif
  if (res != zppSuccess) {
    err = std::make_exception_ptr(
        c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                              zppMessage(res, why, name_)));
  } else {
    try {
      for (auto& f : finishers_) f();
    } catch (...) {
      err = std::current_exception();
    }
  }
  calls_.clear();
  finishers_.clear();
  keep_.clear();
  finish(err);
  if (err)
    future_->setError(err);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

}  // namespace torch_zpp
