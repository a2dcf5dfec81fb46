// torch_zpp: zpp as a torch.distributed backend.
//
// A thin c10d::Backend: it converts tensors, reduction ops and errors
// (conversions.hpp), and calls zpp's public C API (zpp.h) for everything
// else. A pure-Python ProcessGroup is not enough: FSDP2's DeviceMesh reads
// the group name from a registered c10d::Backend. The files follow
// PyTorch's own UCC backend: conversions, the Work (work.hpp), the backend
// (this), the Python module (module.cpp).
//
// Host tensors: the group's calls form one ordered stream. A call checks
// its arguments, queues a Work and returns at once; one worker thread per
// backend runs the queued works in issue order, each zpp call blocking on
// the worker (zpp runs it right there when nothing else is queued on the
// communicator, which nothing is: the worker is its only host caller), and
// completes each Work the moment its own calls return: that return is the
// operation's completion marker, and its result is the operation's own, so
// an error lands on the Work that caused it. No zpp host stream is made per
// call, and none is needed: zppHostStreamSynchronize can only say that
// everything queued on a stream is done, which would make a Work wait for
// the calls issued after it (see docs/pytorch.md, "Hot path").
//
// Device tensors (compiled in only when libzpp has NCCL and torch has CUDA,
// see setup.py): zpp's device path on torch's current stream, issued by the
// caller, as NCCL-backed process groups do; the worker waits for their
// events in the same queue.
#pragma once

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "work.hpp"
#include "zpp.h"

namespace torch_zpp {

// Settings from torch_zpp.Options / the creator; ZPP_CONFIG_UNDEF_* = not
// given, so zpp applies the environment, then its default.
struct Settings {
  int timeoutSec = ZPP_CONFIG_UNDEF_INT;
  int qwzBits = ZPP_CONFIG_UNDEF_INT;
  int qgzBits = ZPP_CONFIG_UNDEF_INT;
  int quantBlock = ZPP_CONFIG_UNDEF_INT;
  int64_t compressMinBytes = -1;
  int hpzGroupSize = ZPP_CONFIG_UNDEF_INT;
  std::string hostId;
  std::string commName;
};

class ZppBackend : public c10d::Backend {
 public:
  ZppBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const Settings& s);
  ~ZppBackend() override;

  const std::string getBackendName() const override { return "zpp"; }
  bool supportsCoalescing() const override { return false; }

  void shutdown() override;
  // Stops the operations in flight: they fail, the Works carry the error.
  void abort() override;

  // ---- collectives --------------------------------------------------------

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  // Deprecated form: outputs[r][j] receives input j of rank r.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
      const c10d::ReduceScatterOptions& opts) override;
  // Equal splits only: zpp's all-to-all moves the same count to every peer.
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in,
                                               std::vector<int64_t>& outSplits,
                                               std::vector<int64_t>& inSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // ---- ZeRO++ explicit calls (torch_zpp.qwz_all_gather, qgz_reduce_scatter)

  c10::intrusive_ptr<c10d::Work> qwzAllGather(at::Tensor out, at::Tensor in, int bits);
  c10::intrusive_ptr<c10d::Work> qgzReduceScatter(at::Tensor out, at::Tensor in, c10d::ReduceOp op,
                                                  int bits);

  // ---- accounting and topology (module.cpp turns them into dicts) ---------

  zppCommStats_t stats();
  void resetStats();
  zppTopology_t topology();

 private:
  void checkAlive();

  c10::intrusive_ptr<ZppWork> newWork(c10d::OpType type, const char* call,
                                      std::vector<at::Tensor> outputs, const at::Tensor& sample);
  // A contiguous tensor zpp may read; kept alive until the work completes.
  at::Tensor input(ZppWork& w, const at::Tensor& t);
  // A contiguous tensor zpp may write; copied back to t after completion
  // when t itself is not contiguous.
  at::Tensor output(ZppWork& w, const at::Tensor& t);
  // Adds one zpp call to the work: host calls run later on the worker,
  // device calls now on torch's current stream.
  void issue(ZppWork& w, const char* call, ZppWork::Call fn);
  // Queues the work for the worker; gives it its place in the issue order.
  c10::intrusive_ptr<c10d::Work> submit(const c10::intrusive_ptr<ZppWork>& w);
  // The worker: runs and completes the queued works in order.
  void workerLoop();
  // Runs w's host calls, stopping at the first error; why gets its reason.
  zppResult_t runCalls(ZppWork& w, std::string& why);

  c10::intrusive_ptr<c10d::Work> allreduceMany(const char* call, c10d::OpType type,
                                               std::vector<at::Tensor>& tensors,
                                               const c10d::ReduceOp& rop);
  // bits < 0: zppAllGather (qwZ where the communicator's settings say so);
  // bits >= 0: zppQwzAllGather explicitly.
  void gatherIntoTensor(ZppWork& w, const char* call, at::Tensor& out, const at::Tensor& in, int bits);
  void gatherIntoList(ZppWork& w, const char* call, std::vector<at::Tensor>& outs,
                      const at::Tensor& in);
  // bits < 0: zppReduceScatter (qgZ where configured); bits >= 0:
  // zppQgzReduceScatter explicitly.
  void scatterFromTensor(ZppWork& w, const char* call, at::Tensor& out, const at::Tensor& in,
                         const c10d::ReduceOp& rop, int bits);

  zppComm_t comm_ = nullptr;
  std::mutex mutex_;                // guards the queue and the counters below
  std::condition_variable cv_;      // the worker waits for work
  std::condition_variable doneCv_;  // device calls wait for earlier host works
  std::deque<c10::intrusive_ptr<ZppWork>> queue_;
  uint64_t issued_ = 0;    // works queued so far; the last one's seq_
  uint64_t lastHost_ = 0;  // seq_ of the last host work queued
  uint64_t done_ = 0;      // seq_ of the last work whose calls have returned
  bool stopping_ = false;
  std::mutex commLock_;  // comm_ against abort() from another thread
  std::thread worker_;
};

}  // namespace torch_zpp
