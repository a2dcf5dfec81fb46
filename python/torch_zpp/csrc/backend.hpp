// torch_zpp: zpp as a torch.distributed backend.
//
// A thin c10d::Backend: it converts tensors, reduction ops and errors
// (conversions.hpp), and calls zpp's public C API (zpp.h) for everything
// else. A pure-Python ProcessGroup is not enough: FSDP2's DeviceMesh reads
// the group name from a registered c10d::Backend. The files follow
// PyTorch's own UCC backend: conversions, the Work (work.hpp), the backend
// (this), the Python module (module.cpp).
//
// Host tensors: every call is queued on a zpp host stream of its own and
// returns at once; a completion thread per backend waits for the streams in
// issue order (zpp runs a communicator's operations in issue order anyway),
// copies results into outputs that were not contiguous, and completes the
// Work and its future. Device tensors (compiled in only when libzpp has NCCL
// and torch has CUDA, see setup.py): zpp's device path on torch's current
// stream, as NCCL-backed process groups do.
#pragma once

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <condition_variable>
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
  ZppBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
             const Settings& s);
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
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& opts) override;
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
  c10::intrusive_ptr<c10d::Work> qgzReduceScatter(at::Tensor out, at::Tensor in,
                                                  c10d::ReduceOp op, int bits);

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
  // Issues one zpp call, fn(comm, stream), for the work.
  void issue(ZppWork& w, const char* call,
             const std::function<zppResult_t(zppComm_t, zppStream_t)>& fn);
  c10::intrusive_ptr<c10d::Work> submit(const c10::intrusive_ptr<ZppWork>& w);
  void completionLoop();

  c10::intrusive_ptr<c10d::Work> allreduceMany(const char* call, c10d::OpType type,
                                               std::vector<at::Tensor>& tensors,
                                               const c10d::ReduceOp& rop);
  // bits < 0: zppAllGather (qwZ where the communicator's settings say so);
  // bits >= 0: zppQwzAllGather explicitly.
  void gatherIntoTensor(ZppWork& w, const char* call, at::Tensor& out, const at::Tensor& in,
                        int bits);
  void gatherIntoList(ZppWork& w, const char* call, std::vector<at::Tensor>& outs,
                      const at::Tensor& in);
  // bits < 0: zppReduceScatter (qgZ where configured); bits >= 0:
  // zppQgzReduceScatter explicitly.
  void scatterFromTensor(ZppWork& w, const char* call, at::Tensor& out, const at::Tensor& in,
                         const c10d::ReduceOp& rop, int bits);

  zppComm_t comm_ = nullptr;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<ZppWork>> queue_;
  bool stopping_ = false;
  std::mutex commLock_;  // comm_ against abort() from another thread
  std::thread worker_;
};

}  // namespace torch_zpp
