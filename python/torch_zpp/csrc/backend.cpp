// torch_zpp: see backend.hpp.
#include "backend.hpp"

#include <torch/csrc/distributed/c10d/exception.h>

#ifdef ZPP_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstring>

#include "conversions.hpp"

namespace torch_zpp {

namespace {

void checkOne(const std::vector<at::Tensor>& ts, const char* call) {
  TORCH_CHECK(ts.size() == 1, "zpp ", call, ": expects exactly one tensor, got ", ts.size());
}

void checkSame(const at::Tensor& a, const at::Tensor& b, const char* call) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "zpp ", call, ": input is ", b.scalar_type(),
              ", output ", a.scalar_type());
  TORCH_CHECK(a.device() == b.device(), "zpp ", call, ": input on ", b.device(), ", output on ",
              a.device());
}

std::vector<at::Tensor> flattenAll(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> v;
  for (auto& t : ts) v.push_back(t.reshape({-1}));
  return v;
}

}  // namespace

ZppBackend::ZppBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       const Settings& s)
    : c10d::Backend(rank, size) {
  // The unique id goes through the group's store: torch hands every group
  // (and device) its own prefixed store, so one key per store is enough.
  static const std::string key = "zpp_unique_id";
  zppUniqueId id;
  if (rank == 0) {
    zppResult_t res = zppGetUniqueId(&id);
    if (res != zppSuccess) throwZpp(res, nullptr, "zppGetUniqueId");
    std::vector<uint8_t> bytes(reinterpret_cast<uint8_t*>(&id),
                               reinterpret_cast<uint8_t*>(&id) + sizeof(id));
    store->set(key, bytes);
  } else {
    std::vector<uint8_t> bytes = store->get(key);
    TORCH_CHECK(bytes.size() == sizeof(id), "zpp: the unique id in the store has ", bytes.size(),
                " bytes, not ", sizeof(id));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  zppConfig_t config = ZPP_CONFIG_INITIALIZER;
  config.timeoutSec = s.timeoutSec;
  config.qwzBits = s.qwzBits;
  config.qgzBits = s.qgzBits;
  config.quantBlock = s.quantBlock;
  if (s.compressMinBytes >= 0) config.compressMinBytes = static_cast<size_t>(s.compressMinBytes);
  config.hpzGroupSize = s.hpzGroupSize;
  if (!s.hostId.empty()) config.hostId = s.hostId.c_str();
  if (!s.commName.empty()) config.commName = s.commName.c_str();
  zppResult_t res = zppCommInitRankConfig(&comm_, size, id, rank, &config);
  if (res != zppSuccess) throwZpp(res, nullptr, "zppCommInitRankConfig");
  worker_ = std::thread([this] { workerLoop(); });
}

ZppBackend::~ZppBackend() { shutdown(); }

void ZppBackend::shutdown() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> commLock(commLock_);
  zppCommDestroy(comm_);
  comm_ = nullptr;
}

// zppCommAbort frees the communicator, so the worker takes it, and reads its
// error, only under commLock_. The works still queued then fail at once.
void ZppBackend::abort() {
  {
    std::lock_guard<std::mutex> commLock(commLock_);
    if (comm_ == nullptr) return;
    zppCommAbort(comm_);
    comm_ = nullptr;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  cv_.notify_all();
  lock.unlock();
  if (worker_.joinable()) worker_.join();
}

// ---- collectives ----------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ZppBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  return allreduceMany("allreduce", c10d::OpType::ALLREDUCE, tensors, opts.reduceOp);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return allreduceMany("allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors,
                       opts.reduceOp);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  const char* call = "broadcast";
  checkOne(tensors, call);
  TORCH_CHECK(opts.rootTensor == 0, "zpp broadcast: rootTensor must be 0");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "zpp broadcast: root ", opts.rootRank,
              " is not a rank of this group of ", size_);
  auto w = newWork(c10d::OpType::BROADCAST, call, tensors, tensors[0]);
  at::Tensor t = output(*w, tensors[0]);
  Buf b = bufOf(t, call);
  int root = static_cast<int>(opts.rootRank);
  issue(*w, call, [=](zppComm_t comm, zppStream_t st) {
    return zppBroadcast(b.ptr, b.ptr, b.count, b.type, root, comm, st);
  });
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions&) {
  const char* call = "allgather";
  checkOne(inputs, call);
  TORCH_CHECK(outputs.size() == 1, "zpp allgather: expects one list of outputs");
  auto w = newWork(c10d::OpType::ALLGATHER, call, outputs[0], inputs[0]);
  gatherIntoList(*w, call, outputs[0], inputs[0]);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const char* call = "allgather_coalesced";
  TORCH_CHECK(outputs.size() == static_cast<size_t>(size_), "zpp ", call, ": expects ", size_,
              " output lists, got ", outputs.size());
  std::vector<at::Tensor> all;
  for (auto& l : outputs) {
    TORCH_CHECK(l.size() == inputs.size(), "zpp ", call,
                ": every output list must hold one tensor per input");
    all.insert(all.end(), l.begin(), l.end());
  }
  TORCH_CHECK(!inputs.empty(), "zpp ", call, ": no tensors");
  auto w = newWork(c10d::OpType::ALLGATHER_COALESCED, call, all, inputs[0]);
  for (size_t j = 0; j < inputs.size(); j++) {
    std::vector<at::Tensor> outs;
    for (auto& l : outputs) outs.push_back(l[j]);
    gatherIntoList(*w, call, outs, inputs[j]);
  }
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::_allgather_base(at::Tensor& out, at::Tensor& in,
                                                           const c10d::AllgatherOptions&) {
  auto w = newWork(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {out}, in);
  gatherIntoTensor(*w, "_allgather_base", out, in, -1);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins, const c10d::AllgatherOptions&) {
  const char* call = "allgather_into_tensor_coalesced";
  TORCH_CHECK(outs.size() == ins.size() && !ins.empty(), "zpp ", call,
              ": needs as many outputs as inputs, at least one");
  auto w = newWork(c10d::OpType::COALESCED, call, outs, ins[0]);
  for (size_t i = 0; i < ins.size(); i++) gatherIntoTensor(*w, call, outs[i], ins[i], -1);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ReduceScatterOptions& opts) {
  const char* call = "reduce_scatter";
  checkOne(outputs, call);
  TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_), "zpp ", call,
              ": expects one list of ", size_, " inputs");
  at::Tensor& out = outputs[0];
  for (auto& t : inputs[0])
    TORCH_CHECK(t.numel() == out.numel() && t.scalar_type() == out.scalar_type(), "zpp ", call,
                ": every input must have the output's size and type");
  auto w = newWork(c10d::OpType::REDUCE_SCATTER, call, outputs, out);
  at::Tensor flat = at::cat(flattenAll(inputs[0]));
  scatterFromTensor(*w, call, out, flat, opts.reduceOp, -1);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::_reduce_scatter_base(
    at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& opts) {
  auto w = newWork(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {out}, in);
  scatterFromTensor(*w, "_reduce_scatter_base", out, in, opts.reduceOp, -1);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
    const c10d::ReduceScatterOptions& opts) {
  const char* call = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK(outs.size() == ins.size() && !ins.empty(), "zpp ", call,
              ": needs as many outputs as inputs, at least one");
  auto w = newWork(c10d::OpType::COALESCED, call, outs, ins[0]);
  for (size_t i = 0; i < ins.size(); i++)
    scatterFromTensor(*w, call, outs[i], ins[i], opts.reduceOp, -1);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::alltoall_base(at::Tensor& out, at::Tensor& in,
                                                         std::vector<int64_t>& outSplits,
                                                         std::vector<int64_t>& inSplits,
                                                         const c10d::AllToAllOptions&) {
  const char* call = "alltoall_base";
  checkSame(out, in, call);
  TORCH_CHECK(out.numel() == in.numel(), "zpp ", call, ": input has ", in.numel(), " elements, output ",
              out.numel());
  int64_t rows = in.dim() ? in.size(0) : 1;
  for (auto* splits : {&outSplits, &inSplits}) {
    bool ok = splits->empty() || splits->size() == static_cast<size_t>(size_);
    for (int64_t s : *splits) ok = ok && s * size_ == rows;
    TORCH_CHECK(ok, "zpp ", call, ": uneven split sizes ", c10::IntArrayRef(*splits),
                " are not supported (only equal splits, ", rows, " rows over ", size_, " ranks)");
  }
  TORCH_CHECK(rows % size_ == 0, "zpp ", call, ": uneven split: ", rows,
              " rows do not split evenly among ", size_, " ranks");
  auto w = newWork(c10d::OpType::ALLTOALL_BASE, call, {out}, in);
  at::Tensor src = input(*w, in);
  at::Tensor dst = output(*w, out);
  Buf s = bufOf(src, call), d = bufOf(dst, call);
  size_t count = s.count / static_cast<size_t>(size_);
  issue(*w, call, [=](zppComm_t comm, zppStream_t st) {
    return zppAllToAll(s.ptr, d.ptr, count, s.type, comm, st);
  });
  return submit(w);
}

// A one-byte all-reduce: it completes on a rank only once every rank issued
// it, and it is ordered after this rank's earlier calls.
c10::intrusive_ptr<c10d::Work> ZppBackend::barrier(const c10d::BarrierOptions&) {
  const char* call = "barrier";
  at::Tensor t = at::zeros({1}, at::kByte);
  auto w = newWork(c10d::OpType::BARRIER, call, {}, t);
  w->keep_.push_back(t);
  void* p = t.data_ptr();
  issue(*w, call, [=](zppComm_t comm, zppStream_t st) {
    return zppAllReduce(p, p, 1, zppUint8, zppMax, comm, st);
  });
  return submit(w);
}

// ---- ZeRO++ explicit calls ------------------------------------------------

c10::intrusive_ptr<c10d::Work> ZppBackend::qwzAllGather(at::Tensor out, at::Tensor in, int bits) {
  auto w = newWork(c10d::OpType::_ALLGATHER_BASE, "qwz_all_gather", {out}, in);
  gatherIntoTensor(*w, "qwz_all_gather", out, in, bits);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::qgzReduceScatter(at::Tensor out, at::Tensor in,
                                                            c10d::ReduceOp op, int bits) {
  TORCH_CHECK(bits >= 0, "zpp qgz_reduce_scatter: bits must be 0, 4 or 8");
  auto w = newWork(c10d::OpType::_REDUCE_SCATTER_BASE, "qgz_reduce_scatter", {out}, in);
  scatterFromTensor(*w, "qgz_reduce_scatter", out, in, op, bits);
  return submit(w);
}

// ---- accounting and topology ----------------------------------------------

zppCommStats_t ZppBackend::stats() {
  checkAlive();
  zppCommStats_t s;
  zppResult_t res = zppCommGetStats(comm_, &s);
  if (res != zppSuccess) throwZpp(res, comm_, "zppCommGetStats");
  return s;
}

void ZppBackend::resetStats() {
  checkAlive();
  zppResult_t res = zppCommResetStats(comm_);
  if (res != zppSuccess) throwZpp(res, comm_, "zppCommResetStats");
}

zppTopology_t ZppBackend::topology() {
  checkAlive();
  zppTopology_t t;
  zppResult_t res = zppCommTopology(comm_, &t);
  if (res != zppSuccess) throwZpp(res, comm_, "zppCommTopology");
  return t;
}

// ---- issuing and completing -----------------------------------------------

void ZppBackend::checkAlive() {
  TORCH_CHECK(comm_ != nullptr, "zpp: the process group was shut down or aborted");
}

c10::intrusive_ptr<ZppWork> ZppBackend::newWork(c10d::OpType type, const char* call,
                                                std::vector<at::Tensor> outputs,
                                                const at::Tensor& sample) {
  TORCH_CHECK(comm_ != nullptr, "zpp ", call, ": the process group was shut down or aborted");
  auto w = c10::make_intrusive<ZppWork>(rank_, type, call, std::move(outputs));
  if (sample.is_cuda()) {
#ifdef ZPP_TORCH_CUDA
    w->device_ = sample.device();
#else
    TORCH_CHECK(false, "zpp ", call,
                ": CUDA tensors need torch_zpp built with the device path "
                "(libzpp with NCCL and torch's CUDA of the same major version; see "
                "docs/pytorch.md); this build has host memory only");
#endif
  } else {
    TORCH_CHECK(sample.device().is_cpu(), "zpp ", call, ": tensors on ", sample.device(),
                " are not supported (cpu and cuda are)");
  }
  return w;
}

at::Tensor ZppBackend::input(ZppWork& w, const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  w.keep_.push_back(c);
  return c;
}

at::Tensor ZppBackend::output(ZppWork& w, const at::Tensor& t) {
  if (t.is_contiguous()) {
    w.keep_.push_back(t);
    return t;
  }
  at::Tensor c = t.contiguous();
  w.keep_.push_back(c);
  at::Tensor dst = t;
  w.finishers_.push_back([dst, c]() mutable { dst.copy_(c); });
  return c;
}

void ZppBackend::issue(ZppWork& w, const char* call, ZppWork::Call fn) {
  if (!w.device_) {
    w.calls_.push_back(std::move(fn));
    return;
  }
#ifdef ZPP_TORCH_CUDA
  // zpp must see this group's calls in the same order on every rank: host
  // works queued before this call go first. The worker itself (a future's
  // callback) needs no wait: it runs between two works, at the same point
  // on every rank.
  if (std::this_thread::get_id() != worker_.get_id()) {
    std::unique_lock<std::mutex> lock(mutex_);
    doneCv_.wait(lock, [&] { return done_ >= lastHost_; });
  }
  c10::cuda::CUDAGuard guard(*w.device_);
  zppResult_t res = fn(comm_, c10::cuda::getCurrentCUDAStream(w.device_->index()).stream());
  if (res != zppSuccess) throwZpp(res, comm_, call);
#endif
}

c10::intrusive_ptr<c10d::Work> ZppBackend::submit(const c10::intrusive_ptr<ZppWork>& w) {
#ifdef ZPP_TORCH_CUDA
  if (w->device_) {
    // Stream-ordered like NCCL's work: the caller's stream already holds the
    // operation; the event lets the worker finish the future, and the
    // outputs' memory must not be reused before then.
    auto stream = c10::cuda::getCurrentCUDAStream(w->device_->index());
    w->event_ = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
    w->event_->record(stream);
    for (auto& t : w->keep_)
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
  }
#endif
  std::lock_guard<std::mutex> lock(mutex_);
  w->seq_ = ++issued_;
  if (!w->device_) lastHost_ = w->seq_;
  queue_.push_back(w);
  cv_.notify_one();
  return w;
}

zppResult_t ZppBackend::runCalls(ZppWork& w, std::string& why) {
  for (auto& call : w.calls_) {
    zppComm_t comm;
    {
      std::lock_guard<std::mutex> commLock(commLock_);
      comm = comm_;
    }
    // An abort between here and the call frees comm: zpp then refuses the
    // stale handle, and the reason below says it was an abort.
    zppResult_t res = comm == nullptr ? zppInvalidUsage : call(comm, nullptr);
    if (res != zppSuccess) {
      std::lock_guard<std::mutex> commLock(commLock_);
      // The reason the communicator broke, or the one this thread (the one
      // that made the call) logged: an argument zpp refused.
      why = comm_ == nullptr ? "the process group was aborted" : zppGetLastError(comm_);
      return res;
    }
  }
  return zppSuccess;
}

void ZppBackend::workerLoop() {
  for (;;) {
    c10::intrusive_ptr<ZppWork> w;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      w = queue_.front();
      queue_.pop_front();
    }
    std::string why;
    zppResult_t res = runCalls(*w, why);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = w->seq_;
    }
    doneCv_.notify_all();
    w->complete(res, why);
  }
}

// ---- the calls behind several collectives ---------------------------------

c10::intrusive_ptr<c10d::Work> ZppBackend::allreduceMany(const char* call, c10d::OpType type,
                                                         std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOp& rop) {
  TORCH_CHECK(!tensors.empty(), "zpp ", call, ": no tensors");
  if (type == c10d::OpType::ALLREDUCE) checkOne(tensors, call);
  for (auto& t : tensors) checkSame(t, tensors[0], call);
  auto w = newWork(type, call, tensors, tensors[0]);
  for (auto& t : tensors) {
    RedOp r = zppOp(rop, t, call);
    at::Tensor dst = output(*w, t);
    if (r.premul) {
      // In place is fine: the result overwrites the scaled values anyway.
      at::Tensor scaled = premulInput(r, dst);
      dst.copy_(scaled);
    }
    Buf b = bufOf(dst, call);
    zppRedOp_t op = r.op;
    issue(*w, call, [=](zppComm_t comm, zppStream_t st) {
      return zppAllReduce(b.ptr, b.ptr, b.count, b.type, op, comm, st);
    });
  }
  return submit(w);
}

void ZppBackend::gatherIntoTensor(ZppWork& w, const char* call, at::Tensor& out, const at::Tensor& in,
                                  int bits) {
  checkSame(out, in, call);
  TORCH_CHECK(out.numel() == in.numel() * size_, "zpp ", call, ": output has ", out.numel(),
              " elements, expected ", size_, " x ", in.numel());
  at::Tensor dst = output(w, out);
  Buf d = bufOf(dst, call);
  // In place (the input is this rank's slice of the output) passes through
  // as it is: zpp takes sendbuff == recvbuff + rank * sendcount.
  Buf s = bufOf(input(w, in), call);
  issue(w, call, [=](zppComm_t comm, zppStream_t st) {
    if (bits >= 0) return zppQwzAllGather(s.ptr, d.ptr, s.count, s.type, bits, comm, st);
    return zppAllGather(s.ptr, d.ptr, s.count, s.type, comm, st);
  });
}

void ZppBackend::gatherIntoList(ZppWork& w, const char* call, std::vector<at::Tensor>& outs,
                                const at::Tensor& in) {
  TORCH_CHECK(outs.size() == static_cast<size_t>(size_), "zpp ", call, ": expects ", size_,
              " outputs, got ", outs.size());
  for (auto& o : outs) {
    checkSame(o, in, call);
    TORCH_CHECK(o.numel() == in.numel(), "zpp ", call, ": every output must have the input's size");
  }
  at::Tensor flat = at::empty({in.numel() * size_}, in.options());
  gatherIntoTensor(w, call, flat, in, -1);
  std::vector<at::Tensor> dsts(outs.begin(), outs.end());
  w.finishers_.push_back([dsts, flat, n = in.numel()]() mutable {
    for (size_t r = 0; r < dsts.size(); r++)
      dsts[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(dsts[r].sizes()));
  });
}

void ZppBackend::scatterFromTensor(ZppWork& w, const char* call, at::Tensor& out, const at::Tensor& in,
                                   const c10d::ReduceOp& rop, int bits) {
  checkSame(out, in, call);
  TORCH_CHECK(in.numel() == out.numel() * size_, "zpp ", call, ": input has ", in.numel(),
              " elements, expected ", size_, " x ", out.numel());
  RedOp r = zppOp(rop, in, call);
  at::Tensor src = input(w, premulInput(r, in));
  at::Tensor dst = output(w, out);
  Buf s = bufOf(src, call), d = bufOf(dst, call);
  zppRedOp_t op = r.op;
  issue(w, call, [=](zppComm_t comm, zppStream_t st) {
    if (bits >= 0) return zppQgzReduceScatter(s.ptr, d.ptr, d.count, d.type, op, bits, comm, st);
    return zppReduceScatter(s.ptr, d.ptr, d.count, d.type, op, comm, st);
  });
}

}  // namespace torch_zpp
