// torch_zpp: zpp as a torch.distributed backend.
//
// A thin c10d::Backend: it converts tensors, reduction ops and errors
// (conversions.hpp), and calls zpp's public C API (zpp.h) for everything
// else. A pure-Python ProcessGroup is not enough: FSDP2's DeviceMesh reads
// the group name from a registered c10d::Backend. The files follow
// PyTorch's own UCC backend: conversions, the Work (work.hpp), the backend
// (this: backend.cpp, collectives.cpp, grad_residual.cpp), the Python
// module (module.cpp).
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
//
// Point-to-point: send and recv are works in the same ordered queue, each
// one zpp call (host: the tagged forms, so that any-source receives match
// every send). A standalone send may wait for its receive, as NCCL's does,
// so two ranks that send to each other first must group their calls:
// batch_isend_irecv (startCoalescing / endCoalescing here) makes one work of
// them that the worker issues between zppGroupStart and zppGroupEnd.
//
// Versions: c10d renamed the single-tensor collectives (_allgather_base is
// all_gather_single, and so on), the old names forwarding to the new ones.
// setup.py finds which names the installed torch has and defines
// ZPP_C10D_SINGLE_NAMES where the new ones exist; this backend then
// overrides the new names only, and the old ones otherwise: every caller of
// either name reaches the same code (compat.hpp).
#pragma once

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "compat.hpp"
#include "work.hpp"
#include <set>

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
  int quantRotate = ZPP_CONFIG_UNDEF_INT;
  int qgzErrorFeedback = ZPP_CONFIG_UNDEF_INT;
  std::string hostId;
  std::string commName;
  // The timeout in effect and where it came from, for messages:
  // "init_process_group(timeout=0:00:20)", "ZPP_TIMEOUT=20", ...
  int timeoutInEffect = 0;
  std::string timeoutFrom;
  // enable_reconfigure (torch 2.15): no communicator until reconfigure().
  bool deferred = false;
};

class ZppGradResidual;

class ZppBackend : public c10d::Backend {
 public:
  ZppBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const Settings& s);
  // A backend on a communicator made already (shrink's); it owns comm.
  ZppBackend(zppComm_t comm, int rank, int size, const std::string& timeoutFrom, int timeoutSec);
  ~ZppBackend() override;

  const std::string getBackendName() const override { return "zpp"; }
  // Point-to-point calls between startCoalescing and endCoalescing form one
  // work, issued as one zpp group (batch_isend_irecv).
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  // Sequence numbers start at 0 on every rank, as gloo's do; each
  // collective issued on the group counts one (point-to-point calls do not:
  // they need not be issued by every rank). TORCH_DISTRIBUTED_DEBUG=DETAIL's
  // wrapper compares them across ranks.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

  void shutdown() override;
  // Stops the operations in flight: they fail, the Works carry the error.
  void abort() override;
  // What broke the communicator: SUCCESS while healthy; TIMEOUT for a wait
  // that timed out, REMOTE_ERROR for a peer that died or failed, COMM_ERROR
  // for anything else, an abort included.
  c10d::ErrorType getError() override;

#ifdef ZPP_C10D_SHRINK
  // dist.shrink_group (torch 2.15): zppCommShrink, called by the survivors
  // only; SHRINK_ABORT revokes this group's communicator first, failing the
  // works in flight. The new backend has the survivors in their order and
  // this group's settings (a timeout in opts_override replaces its own).
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
                                           const c10::intrusive_ptr<Options>& optsOverride) override;
#endif

#ifdef ZPP_C10D_RECONFIGURE
  // The reconfigure API (torch 2.15, dist._reconfigure): this process's
  // handle names it (host, pid and a random part; the same for the
  // backend's life). reconfigure() makes a communicator of the processes
  // whose handles it gets, ranked by their position (a list) or in sorted
  // order (a set): the first one's process makes a unique id and puts it
  // into the group's store under the uuid, the others take it from there;
  // the old communicator, if any, is aborted first (its works fail). The
  // uuid must be new on every call. Blocking; the returned work is done.
  bool supportsReconfigure() const override { return true; }
  c10d::ReconfigureHandle get_reconfigure_handle() const override { return handle_; }
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
#endif

#ifdef ZPP_C10D_ABORT_HOOKS
  // Abort hooks (torch 2.15, pg.register_abort_hook): run once, on the
  // worker thread, when the communicator first breaks on a timeout or an
  // error (a peer lost or failed): right after the work that met it
  // completes with its exception (so that its wait stays bounded by the
  // timeout), before any later work. Not for a failure that leaves the communicator
  // healthy (a bad argument), nor for abort() or shutdown() asked for by
  // the caller. A hook that throws is logged; the others still run.
  bool supportsAbortHooks() const override { return true; }
  void registerAbortHook(int64_t hookId, c10d::AbortHook hook) override;
  void unregisterAbortHook(int64_t hookId) override;
#endif

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
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  // outputs: one list of size() tensors on the root, none elsewhere.
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  // inputs: one list of size() tensors on the root, none elsewhere.
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  // Tensor i goes to rank i; sizes may differ (zppAllToAllv).
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // Sparse tensors: refused naming zpp (torch routes them here, not to allreduce).
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;

  // The single-tensor collectives under the names this torch calls canonical
  // (compat.hpp): all_gather_single & co. where it has them, else
  // _allgather_base & co.
#ifdef ZPP_C10D_SINGLE_NAMES
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& out, at::Tensor& in,
                                                   const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(at::Tensor& out, at::Tensor& in,
                                                       const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& out, at::Tensor& in,
                                                   std::vector<int64_t>& outSplits,
                                                   std::vector<int64_t>& inSplits,
                                                   const c10d::AllToAllOptions& opts) override;
#else
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in,
                                               std::vector<int64_t>& outSplits,
                                               std::vector<int64_t>& inSplits,
                                               const c10d::AllToAllOptions& opts) override;
#endif

#ifdef ZPP_C10D_GATHER_SINGLE
  // gather into one tensor of size() x the input on the root (torch 2.15).
  c10::intrusive_ptr<c10d::Work> gather_single(at::Tensor& out, at::Tensor& in,
                                               const c10d::GatherOptions& opts) override;
#endif

  // ---- point-to-point -------------------------------------------------------

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // ---- ZeRO++ explicit calls (torch_zpp.qwz_all_gather, qgz_reduce_scatter)

  c10::intrusive_ptr<c10d::Work> qwzAllGather(at::Tensor out, at::Tensor in, int bits);
  c10::intrusive_ptr<c10d::Work> qgzReduceScatter(at::Tensor out, at::Tensor in, c10d::ReduceOp op,
                                                  int bits);
  // qgZ with error feedback (zppQgzReduceScatterEF): the residual's bits,
  // and its residuals added before quantizing and updated after. The
  // residual must be this group's, of out's size and type (checked here,
  // so that a mix-up raises at the call rather than at wait()).
  c10::intrusive_ptr<c10d::Work> qgzReduceScatterEF(
      at::Tensor out, at::Tensor in, c10d::ReduceOp op,
      const c10::intrusive_ptr<ZppGradResidual>& residual);

  // The communicator's name for messages ("torch:3"; "(unnamed)" for a group
  // made by shrink).
  std::string name() const { return settings_.commName.empty() ? "(unnamed)" : settings_.commName; }

  // ---- accounting and topology (module.cpp turns them into dicts) ---------

  zppCommStats_t stats();
  void resetStats();
  zppTopology_t topology();

 private:
  void checkAlive();

  c10::intrusive_ptr<ZppWork> newWork(c10d::OpType type, const char* call,
                                      std::vector<at::Tensor> outputs, const at::Tensor& sample);
  // The shared bodies of the single-tensor collectives (either name).
  c10::intrusive_ptr<c10d::Work> allGatherSingle(const char* call, at::Tensor& out, at::Tensor& in);
  c10::intrusive_ptr<c10d::Work> allGatherSingleCoalesced(const char* call,
                                                          std::vector<at::Tensor>& outs,
                                                          std::vector<at::Tensor>& ins);
  c10::intrusive_ptr<c10d::Work> reduceScatterSingle(const char* call, at::Tensor& out, at::Tensor& in,
                                                     const c10d::ReduceOp& rop);
  c10::intrusive_ptr<c10d::Work> reduceScatterSingleCoalesced(const char* call,
                                                              std::vector<at::Tensor>& outs,
                                                              std::vector<at::Tensor>& ins,
                                                              const c10d::ReduceOp& rop);
  c10::intrusive_ptr<c10d::Work> allToAllSingle(const char* call, at::Tensor& out, at::Tensor& in,
                                                std::vector<int64_t>& outSplits,
                                                std::vector<int64_t>& inSplits);
  // send, recv, recvAnysource (peer ZPP_ANY_SOURCE): one work, or a part
  // of the coalesced work between startCoalescing and endCoalescing.
  c10::intrusive_ptr<c10d::Work> p2p(const char* call, c10d::OpType type,
                                     std::vector<at::Tensor>& tensors, int peer, int tag);
  // Raises for a collective issued inside a coalescing group.
  void checkNotCoalescing(const char* call);
  // zpp's reason for a failed call, its timeout named by where it came from.
  std::string reason(const char* raw) const;
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
  // ef: zppQgzReduceScatterEF with that handle instead (bits unused).
  void scatterFromTensor(ZppWork& w, const char* call, at::Tensor& out, const at::Tensor& in,
                         const c10d::ReduceOp& rop, int bits, zppGrad_t ef = nullptr);

  friend class ZppGradResidual;  // comm_, commLock_ and commGen_

  zppComm_t comm_ = nullptr;
  std::mutex mutex_;                // guards the queue and the counters below
  std::condition_variable cv_;      // the worker waits for work
  std::condition_variable doneCv_;  // device calls wait for earlier host works
  std::deque<c10::intrusive_ptr<ZppWork>> queue_;
  uint64_t issued_ = 0;    // works queued so far; the last one's seq_
  uint64_t lastHost_ = 0;  // seq_ of the last host work queued
  uint64_t done_ = 0;      // seq_ of the last work whose calls have returned
  bool stopping_ = false;
  std::mutex commLock_;   // comm_ against abort() from another thread
  bool aborted_ = false;  // under commLock_: abort() freed comm_ (getError)
  // Under commLock_: bumped whenever comm_ is replaced (reconfigure), so that
  // a residual made on an earlier communicator is never used with a later
  // one that malloc happened to put at the same address.
  uint64_t commGen_ = 0;
  std::thread worker_;
  std::atomic<uint64_t> seq_{0};           // collectives issued (getSequenceNumberForGroup)
  c10::intrusive_ptr<ZppWork> coalesced_;  // the work being coalesced; null outside
  bool coalescing_ = false;                // between startCoalescing and endCoalescing
  bool deviceGroupOpen_ = false;           // a zpp group of device calls is open (CUDA only)
  std::string timeoutFrom_;                // Settings::timeoutFrom
  int timeoutSec_ = 0;                     // Settings::timeoutInEffect
  // The config for new communicators (reconfigure); the store they meet in.
  zppConfig_t configOf(const Settings& s) const;
  Settings settings_;
  c10::intrusive_ptr<c10d::Store> store_;
  bool awaitingReconfigure_ = false;  // under commLock_: deferred, not yet reconfigured
#ifdef ZPP_C10D_RECONFIGURE
  std::string handle_;
  std::set<int64_t> usedUuids_;
#endif
#ifdef ZPP_C10D_ABORT_HOOKS
  void runAbortHooksOnce();  // the worker, after a failed work
  std::mutex hooksLock_;     // the two below
  std::map<int64_t, c10d::AbortHook> abortHooks_;
  bool hooksRan_ = false;
#endif
};

// Error feedback for qgZ (torch_zpp.GradResidual; docs/pytorch.md, "Error
// feedback in FSDP2"): one zppGrad_t, the residuals of ONE gradient buffer
// reduced once per step with the same layout on one group. It keeps its
// backend alive (the handle must go before the communicator) and is made on
// the communicator the group has then: after shutdown, abort or reconfigure
// every use raises instead of touching a freed communicator.
//
// Ordering: undo, state and loadState first wait for the last call issued
// with this residual (its Work), so they see the residuals as the calls
// issued before them left them, as a caller reading the code expects; the
// destructor waits too, then destroys the handle (zppGradDestroy reads no
// communicator, so that is safe after the group's shutdown).
class ZppGradResidual : public c10::intrusive_ptr_target {
 public:
  // bits 8, 4 or 2 (explicit: the group's qgz_bits is not consulted).
  ZppGradResidual(c10::intrusive_ptr<ZppBackend> backend, int64_t recvcount, at::ScalarType dtype,
                  int bits);
  ~ZppGradResidual() override;

  // zppGradUndo: the last call's step was thrown away.
  void undo();
  // zppGradSaveState into a new CPU uint8 tensor of stateBytes().
  at::Tensor state();
  // zppGradLoadState from a CPU uint8 tensor (zpp checks its header).
  void loadState(const at::Tensor& state);
  int64_t stateBytes();

  int64_t recvcount() const { return recvcount_; }
  at::ScalarType dtype() const { return dtype_; }
  int bits() const { return bits_; }
  std::string groupName() const { return backend_->name(); }

 private:
  friend class ZppBackend;

  // Waits for the last call issued with this residual (without raising: a
  // failed call changed no residual, and zpp judges what follows).
  void settle();
  // fn(grad_, comm) under the backend's commLock_, once the communicator
  // this residual was made on is checked to be the group's still; a zpp
  // error raises, named after call.
  void withComm(const char* call, const std::function<zppResult_t(zppComm_t)>& fn);

  c10::intrusive_ptr<ZppBackend> backend_;
  zppGrad_t grad_ = nullptr;
  zppComm_t comm_ = nullptr;  // the communicator it was made on
  uint64_t gen_ = 0;          // and its generation (ZppBackend::commGen_)
  int64_t recvcount_;
  at::ScalarType dtype_;
  int bits_;
  std::mutex lastLock_;
  c10::intrusive_ptr<ZppWork> last_;  // the last work issued with it
};

}  // namespace torch_zpp
