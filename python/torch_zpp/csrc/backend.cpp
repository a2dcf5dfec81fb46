// torch_zpp: zpp as a torch.distributed backend.
//
// A thin c10d::Backend: it converts tensors, reduction ops and errors, and
// calls zpp's public C API (zpp.h) for everything else. A pure-Python
// ProcessGroup is not enough: FSDP2's DeviceMesh reads the group name from a
// registered c10d::Backend.
//
// Host tensors: every call is queued on a zpp host stream of its own and
// returns at once; a completion thread per backend waits for the streams in
// issue order (zpp runs a communicator's operations in issue order anyway),
// copies results into outputs that were not contiguous, and completes the
// Work and its future. Device tensors (compiled in only when libzpp has NCCL
// and torch has CUDA, see setup.py): zpp's device path on torch's current
// stream, as NCCL-backed process groups do.
#include <torch/extension.h>

#include <pybind11/chrono.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/distributed/c10d/exception.h>

#ifdef ZPP_TORCH_CUDA
#include <c10/core/Event.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "zpp.h"

namespace torch_zpp {

namespace {

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

std::string zppMessage(zppResult_t res, const std::string& why, const std::string& call) {
  std::string msg = "zpp " + call + " failed: " + zppGetErrorString(res);
  if (!why.empty()) msg += ": " + why;
  return msg;
}

// zppGetLastError(comm) is the reason that broke the communicator, or the
// reason this thread logged last (argument checks happen on the caller).
[[noreturn]] void throwZpp(zppResult_t res, zppComm_t comm, const std::string& call) {
  C10_THROW_ERROR(DistBackendError, zppMessage(res, zppGetLastError(comm), call));
}

// How a tensor's storage is described to zpp: pointer, element count, type.
struct Buf {
  void* ptr;
  size_t count;
  zppDataType_t type;
};

// Complex tensors travel as pairs of reals; bool as bytes (only for calls
// that move data or take max/min, checked by the caller).
zppDataType_t zppType(at::ScalarType t, const char* call) {
  switch (t) {
    case at::kFloat: return zppFloat32;
    case at::kDouble: return zppFloat64;
    case at::kHalf: return zppFloat16;
    case at::kBFloat16: return zppBfloat16;
    case at::kChar: return zppInt8;
    case at::kByte: return zppUint8;
    case at::kBool: return zppUint8;
    case at::kInt: return zppInt32;
    case at::kLong: return zppInt64;
    case at::kUInt32: return zppUint32;
    case at::kUInt64: return zppUint64;
    case at::kComplexFloat: return zppFloat32;
    case at::kComplexDouble: return zppFloat64;
    default:
      TORCH_CHECK(false, "zpp ", call, ": data type ", t, " is not supported");
  }
}

Buf bufOf(const at::Tensor& t, const char* call) {
  TORCH_INTERNAL_ASSERT(t.is_contiguous());
  size_t n = static_cast<size_t>(t.numel());
  if (t.is_complex()) n *= 2;
  return Buf{t.data_ptr(), n, zppType(t.scalar_type(), call)};
}

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

// PREMUL_SUM is a SUM of inputs multiplied by a factor first (FSDP2 uses it
// for a gradient divide factor other than the world size).
struct RedOp {
  zppRedOp_t op;
  bool premul = false;
  double factor = 1.0;
  at::Tensor tensorFactor;
};

RedOp zppOp(const c10d::ReduceOp& rop, const at::Tensor& t, const char* call) {
  RedOp r{zppSum};
  bool complex = t.is_complex(), isBool = t.scalar_type() == at::kBool;
  switch (rop.op_) {
    case c10d::ReduceOp::SUM: r.op = zppSum; break;
    case c10d::ReduceOp::AVG: r.op = zppAvg; break;
    case c10d::ReduceOp::PRODUCT: r.op = zppProd; break;
    case c10d::ReduceOp::MIN: r.op = zppMin; break;
    case c10d::ReduceOp::MAX: r.op = zppMax; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      r.op = zppSum;
      r.premul = true;
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(rop.supplement_.get());
      TORCH_CHECK(s != nullptr, "zpp ", call, ": PREMUL_SUM without a factor");
      if (s->tensor_factor.defined())
        r.tensorFactor = s->tensor_factor;
      else
        r.factor = s->double_factor;
      break;
    }
    default:
      TORCH_CHECK(false, "zpp ", call, ": ReduceOp.", opName(rop.op_), " is not supported");
  }
  // Sums of bools are not bools; min/max of complex numbers are undefined.
  TORCH_CHECK(!isBool || r.op == zppMin || r.op == zppMax, "zpp ", call, ": ReduceOp.",
              opName(rop.op_), " on bool tensors is not supported (MIN and MAX are)");
  TORCH_CHECK(!complex || r.op == zppSum || r.op == zppAvg, "zpp ", call, ": ReduceOp.",
              opName(rop.op_), " on complex tensors is not supported (SUM, AVG and PREMUL_SUM are)");
  return r;
}

// The input of a PREMUL_SUM: a scaled copy (the caller's tensor is left
// alone), in the tensor's own type as NCCL does.
at::Tensor premulInput(const RedOp& r, const at::Tensor& t) {
  if (!r.premul) return t;
  if (r.tensorFactor.defined()) return t * r.tensorFactor.to(t.device());
  return t * r.factor;
}

}  // namespace

class ZppBackend;

// One call (or one coalesced group of calls) on host tensors, or on device
// tensors where compiled in.
class ZppWork : public c10d::Work {
 public:
  ZppWork(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type, name),
        name_(name),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  ~ZppWork() override {
    if (stream_ != nullptr) zppHostStreamDestroy(stream_);
  }

  // Device work orders the caller's current stream after the operation and
  // returns, as NCCL's does: the host does not wait. Host work waits for
  // the completion thread (and raises zpp's error).
  bool wait(std::chrono::milliseconds timeout) override {
#ifdef ZPP_TORCH_CUDA
    if (event_) {
      event_->block(c10::cuda::getCurrentCUDAStream(device_->index()));
      return true;
    }
#endif
    return c10d::Work::wait(timeout);
  }

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  friend class ZppBackend;

  // Runs on the completion thread: waits for the work, then finishes it.
  // reason() gives the communicator's error once the work failed.
  void complete(const std::function<std::string()>& reason) {
    std::exception_ptr err;
    zppResult_t res = zppSuccess;
    if (stream_ != nullptr) res = zppHostStreamSynchronize(stream_);
#ifdef ZPP_TORCH_CUDA
    if (event_) event_->synchronize();
#endif
    if (res != zppSuccess) {
      err = std::make_exception_ptr(c10::DistBackendError(
          c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
          zppMessage(res, reason(), name_)));
    } else {
      try {
        for (auto& f : finishers_) f();
      } catch (...) {
        err = std::current_exception();
      }
    }
    finishers_.clear();
    keep_.clear();
    finish(err);
    if (err)
      future_->setError(err);
    else
      future_->markCompleted(c10::IValue(outputs_));
  }

  std::string name_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;                // buffers zpp reads or writes
  std::vector<std::function<void()>> finishers_;  // copies into the caller's outputs
  zppHostStream_t stream_ = nullptr;
  std::optional<c10::Device> device_;  // set for CUDA tensors
  c10::intrusive_ptr<c10::ivalue::Future> future_;
#ifdef ZPP_TORCH_CUDA
  std::unique_ptr<c10::Event> event_;
#endif
};

class ZppBackend : public c10d::Backend {
 public:
  ZppBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
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
      TORCH_CHECK(bytes.size() == sizeof(id), "zpp: the unique id in the store has ",
                  bytes.size(), " bytes, not ", sizeof(id));
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
    worker_ = std::thread([this] { completionLoop(); });
  }

  ~ZppBackend() override { shutdown(); }

  const std::string getBackendName() const override { return "zpp"; }
  bool supportsCoalescing() const override { return false; }

  void shutdown() override {
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

  // Stops the operations in flight: they fail, the Works carry the error.
  // zppCommAbort frees the communicator, so the completion thread reads its
  // error only under commLock_.
  void abort() override {
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

  // ---- collectives --------------------------------------------------------

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    return allreduceMany("allreduce", c10d::OpType::ALLREDUCE, tensors, opts.reduceOp);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    return allreduceMany("allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors,
                         opts.reduceOp);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    const char* call = "broadcast";
    checkOne(tensors, call);
    TORCH_CHECK(opts.rootTensor == 0, "zpp broadcast: rootTensor must be 0");
    TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "zpp broadcast: root ",
                opts.rootRank, " is not a rank of this group of ", size_);
    auto w = newWork(c10d::OpType::BROADCAST, call, tensors, tensors[0]);
    at::Tensor t = output(*w, tensors[0]);
    Buf b = bufOf(t, call);
    issue(*w, call, [&](zppStream_t st) {
      return zppBroadcast(b.ptr, b.ptr, b.count, b.type, static_cast<int>(opts.rootRank), comm_, st);
    });
    return submit(w);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    const char* call = "allgather";
    checkOne(inputs, call);
    TORCH_CHECK(outputs.size() == 1, "zpp allgather: expects one list of outputs");
    auto w = newWork(c10d::OpType::ALLGATHER, call, outputs[0], inputs[0]);
    gatherIntoList(*w, call, outputs[0], inputs[0]);
    return submit(w);
  }

  // Deprecated form: outputs[r][j] receives input j of rank r.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions&) override {
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

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions&) override {
    auto w = newWork(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {out}, in);
    gatherIntoTensor(*w, "_allgather_base", out, in, -1);
    return submit(w);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
      const c10d::AllgatherOptions&) override {
    const char* call = "allgather_into_tensor_coalesced";
    TORCH_CHECK(outs.size() == ins.size() && !ins.empty(), "zpp ", call,
                ": needs as many outputs as inputs, at least one");
    auto w = newWork(c10d::OpType::COALESCED, call, outs, ins[0]);
    for (size_t i = 0; i < ins.size(); i++) gatherIntoTensor(*w, call, outs[i], ins[i], -1);
    return submit(w);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const char* call = "reduce_scatter";
    checkOne(outputs, call);
    TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_), "zpp ",
                call, ": expects one list of ", size_, " inputs");
    at::Tensor& out = outputs[0];
    for (auto& t : inputs[0])
      TORCH_CHECK(t.numel() == out.numel() && t.scalar_type() == out.scalar_type(), "zpp ", call,
                  ": every input must have the output's size and type");
    auto w = newWork(c10d::OpType::REDUCE_SCATTER, call, outputs, out);
    at::Tensor flat = at::cat(flattenAll(inputs[0]));
    scatterFromTensor(*w, call, out, flat, opts.reduceOp, -1);
    return submit(w);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& opts) override {
    auto w = newWork(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {out}, in);
    scatterFromTensor(*w, "_reduce_scatter_base", out, in, opts.reduceOp, -1);
    return submit(w);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
      const c10d::ReduceScatterOptions& opts) override {
    const char* call = "reduce_scatter_tensor_coalesced";
    TORCH_CHECK(outs.size() == ins.size() && !ins.empty(), "zpp ", call,
                ": needs as many outputs as inputs, at least one");
    auto w = newWork(c10d::OpType::COALESCED, call, outs, ins[0]);
    for (size_t i = 0; i < ins.size(); i++)
      scatterFromTensor(*w, call, outs[i], ins[i], opts.reduceOp, -1);
    return submit(w);
  }

  // Equal splits only: zpp's all-to-all moves the same count to every peer.
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in,
                                               std::vector<int64_t>& outSplits,
                                               std::vector<int64_t>& inSplits,
                                               const c10d::AllToAllOptions&) override {
    const char* call = "alltoall_base";
    checkSame(out, in, call);
    TORCH_CHECK(out.numel() == in.numel(), "zpp ", call, ": input has ", in.numel(),
                " elements, output ", out.numel());
    int64_t rows = in.dim() ? in.size(0) : 1;
    for (auto* splits : {&outSplits, &inSplits}) {
      bool ok = splits->empty() || splits->size() == static_cast<size_t>(size_);
      for (int64_t s : *splits) ok = ok && s * size_ == rows;
      TORCH_CHECK(ok, "zpp ", call, ": uneven split sizes ", c10::IntArrayRef(*splits),
                  " are not supported (only equal splits, ", rows, " rows over ", size_,
                  " ranks)");
    }
    TORCH_CHECK(rows % size_ == 0, "zpp ", call, ": uneven split: ", rows,
                " rows do not split evenly among ", size_, " ranks");
    auto w = newWork(c10d::OpType::ALLTOALL_BASE, call, {out}, in);
    at::Tensor src = input(*w, in);
    at::Tensor dst = output(*w, out);
    Buf s = bufOf(src, call), d = bufOf(dst, call);
    size_t count = s.count / static_cast<size_t>(size_);
    issue(*w, call, [&](zppStream_t st) {
      return zppAllToAll(s.ptr, d.ptr, count, s.type, comm_, st);
    });
    return submit(w);
  }

  // A one-byte all-reduce: it completes on a rank only once every rank
  // issued it, and it is ordered after this rank's earlier calls.
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    const char* call = "barrier";
    at::Tensor t = at::zeros({1}, at::kByte);
    auto w = newWork(c10d::OpType::BARRIER, call, {}, t);
    w->keep_.push_back(t);
    void* p = t.data_ptr();
    issue(*w, call, [&](zppStream_t st) {
      return zppAllReduce(p, p, 1, zppUint8, zppMax, comm_, st);
    });
    return submit(w);
  }

  // ---- ZeRO++ explicit calls (torch_zpp.qwz_all_gather, qgz_reduce_scatter)

  c10::intrusive_ptr<c10d::Work> qwzAllGather(at::Tensor out, at::Tensor in, int bits) {
    auto w = newWork(c10d::OpType::_ALLGATHER_BASE, "qwz_all_gather", {out}, in);
    gatherIntoTensor(*w, "qwz_all_gather", out, in, bits);
    return submit(w);
  }

  c10::intrusive_ptr<c10d::Work> qgzReduceScatter(at::Tensor out, at::Tensor in,
                                                  c10d::ReduceOp op, int bits) {
    TORCH_CHECK(bits >= 0, "zpp qgz_reduce_scatter: bits must be 0, 4 or 8");
    auto w = newWork(c10d::OpType::_REDUCE_SCATTER_BASE, "qgz_reduce_scatter", {out}, in);
    scatterFromTensor(*w, "qgz_reduce_scatter", out, in, op, bits);
    return submit(w);
  }

  // ---- accounting and topology ------------------------------------------

  py::dict stats() {
    checkAlive();
    zppCommStats_t s;
    zppResult_t res = zppCommGetStats(comm_, &s);
    if (res != zppSuccess) throwZpp(res, comm_, "zppCommGetStats");
    py::dict d;
    for (int k = 0; k < zppNumOpKinds; k++) {
      py::dict e;
      e["calls"] = s.calls[k];
      e["intra_node_bytes"] = s.intraNodeBytes[k];
      e["inter_node_bytes"] = s.interNodeBytes[k];
      d[zppOpKindName(static_cast<zppOpKind_t>(k))] = e;
    }
    return d;
  }

  void resetStats() {
    checkAlive();
    zppResult_t res = zppCommResetStats(comm_);
    if (res != zppSuccess) throwZpp(res, comm_, "zppCommResetStats");
  }

  py::dict topology() {
    checkAlive();
    zppTopology_t t;
    zppResult_t res = zppCommTopology(comm_, &t);
    if (res != zppSuccess) throwZpp(res, comm_, "zppCommTopology");
    py::dict d;
    d["nodes"] = t.nNodes;
    d["node"] = t.node;
    d["local_rank"] = t.localRank;
    d["local_size"] = t.localSize;
    d["uniform"] = static_cast<bool>(t.uniform);
    return d;
  }

 private:
  void checkAlive() {
    TORCH_CHECK(comm_ != nullptr, "zpp: the process group was shut down or aborted");
  }

  static void checkOne(const std::vector<at::Tensor>& ts, const char* call) {
    TORCH_CHECK(ts.size() == 1, "zpp ", call, ": expects exactly one tensor, got ", ts.size());
  }

  static void checkSame(const at::Tensor& a, const at::Tensor& b, const char* call) {
    TORCH_CHECK(a.scalar_type() == b.scalar_type(), "zpp ", call, ": input is ", b.scalar_type(),
                ", output ", a.scalar_type());
    TORCH_CHECK(a.device() == b.device(), "zpp ", call, ": input on ", b.device(), ", output on ",
                a.device());
  }

  static std::vector<at::Tensor> flattenAll(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> v;
    for (auto& t : ts) v.push_back(t.reshape({-1}));
    return v;
  }

  c10::intrusive_ptr<ZppWork> newWork(c10d::OpType type, const char* call,
                                      std::vector<at::Tensor> outputs, const at::Tensor& sample) {
    TORCH_CHECK(comm_ != nullptr, "zpp ", call, ": the process group was shut down or aborted");
    auto w = c10::make_intrusive<ZppWork>(rank_, type, call, std::move(outputs));
    if (sample.is_cuda()) {
#ifdef ZPP_TORCH_CUDA
      w->device_ = sample.device();
#else
      TORCH_CHECK(false, "zpp ", call, ": CUDA tensors need torch_zpp built with the device path "
                  "(libzpp with NCCL and torch's CUDA of the same major version; see "
                  "docs/pytorch.md); this build has host memory only");
#endif
    } else {
      TORCH_CHECK(sample.device().is_cpu(), "zpp ", call, ": tensors on ", sample.device(),
                  " are not supported (cpu and cuda are)");
      zppResult_t res = zppHostStreamCreate(&w->stream_);
      if (res != zppSuccess) throwZpp(res, comm_, call);
    }
    return w;
  }

  // A contiguous tensor zpp may read; kept alive until the work completes.
  at::Tensor input(ZppWork& w, const at::Tensor& t) {
    at::Tensor c = t.contiguous();
    w.keep_.push_back(c);
    return c;
  }

  // A contiguous tensor zpp may write; copied back to t after completion
  // when t itself is not contiguous.
  at::Tensor output(ZppWork& w, const at::Tensor& t) {
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

  // Issues one zpp call on the work's stream. A call refused at issue time
  // (bad arguments, broken communicator) first waits for what this work
  // already queued (its buffers must outlive it), then raises.
  template <typename F>
  void issue(ZppWork& w, const char* call, F&& fn) {
    zppStream_t st = w.stream_;
#ifdef ZPP_TORCH_CUDA
    if (w.device_) {
      c10::cuda::CUDAGuard guard(*w.device_);
      st = c10::cuda::getCurrentCUDAStream(w.device_->index()).stream();
    }
#endif
    zppResult_t res = fn(st);
    if (res != zppSuccess) {
      if (w.stream_ != nullptr) zppHostStreamSynchronize(w.stream_);
      throwZpp(res, comm_, call);
    }
  }

  c10::intrusive_ptr<c10d::Work> submit(const c10::intrusive_ptr<ZppWork>& w) {
#ifdef ZPP_TORCH_CUDA
    if (w->device_) {
      // Stream-ordered like NCCL's work: the caller's stream already holds
      // the operation; the event lets the completion thread finish the
      // future, and the outputs' memory must not be reused before then.
      auto stream = c10::cuda::getCurrentCUDAStream(w->device_->index());
      w->event_ = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
      w->event_->record(stream);
      for (auto& t : w->keep_)
        c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
    }
#endif
    std::unique_lock<std::mutex> lock(mutex_);
    queue_.push_back(w);
    cv_.notify_all();
    return w;
  }

  void completionLoop() {
    for (;;) {
      c10::intrusive_ptr<ZppWork> w;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        w = queue_.front();
        queue_.pop_front();
      }
      w->complete([this] {
        std::lock_guard<std::mutex> commLock(commLock_);
        if (comm_ == nullptr) return std::string("the process group was aborted");
        return std::string(zppGetLastError(comm_));
      });
    }
  }

  c10::intrusive_ptr<c10d::Work> allreduceMany(const char* call, c10d::OpType type,
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
      issue(*w, call, [&](zppStream_t st) {
        return zppAllReduce(b.ptr, b.ptr, b.count, b.type, r.op, comm_, st);
      });
    }
    return submit(w);
  }

  // bits < 0: zppAllGather (qwZ where the communicator's settings say so);
  // bits >= 0: zppQwzAllGather explicitly.
  void gatherIntoTensor(ZppWork& w, const char* call, at::Tensor& out, const at::Tensor& in,
                        int bits) {
    checkSame(out, in, call);
    TORCH_CHECK(out.numel() == in.numel() * size_, "zpp ", call, ": output has ", out.numel(),
                " elements, expected ", size_, " x ", in.numel());
    at::Tensor dst = output(w, out);
    Buf d = bufOf(dst, call);
    // In place (the input is this rank's slice of the output) passes through
    // as it is: zpp takes sendbuff == recvbuff + rank * sendcount.
    Buf s = bufOf(input(w, in), call);
    issue(w, call, [&](zppStream_t st) {
      if (bits >= 0) return zppQwzAllGather(s.ptr, d.ptr, s.count, s.type, bits, comm_, st);
      return zppAllGather(s.ptr, d.ptr, s.count, s.type, comm_, st);
    });
  }

  void gatherIntoList(ZppWork& w, const char* call, std::vector<at::Tensor>& outs,
                      const at::Tensor& in) {
    TORCH_CHECK(outs.size() == static_cast<size_t>(size_), "zpp ", call, ": expects ", size_,
                " outputs, got ", outs.size());
    for (auto& o : outs) {
      checkSame(o, in, call);
      TORCH_CHECK(o.numel() == in.numel(), "zpp ", call,
                  ": every output must have the input's size");
    }
    at::Tensor flat = at::empty({in.numel() * size_}, in.options());
    gatherIntoTensor(w, call, flat, in, -1);
    std::vector<at::Tensor> dsts(outs.begin(), outs.end());
    w.finishers_.push_back([dsts, flat, n = in.numel()]() mutable {
      for (size_t r = 0; r < dsts.size(); r++)
        dsts[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(dsts[r].sizes()));
    });
  }

  // bits < 0: zppReduceScatter (qgZ where configured); bits >= 0:
  // zppQgzReduceScatter explicitly.
  void scatterFromTensor(ZppWork& w, const char* call, at::Tensor& out, const at::Tensor& in,
                         const c10d::ReduceOp& rop, int bits) {
    checkSame(out, in, call);
    TORCH_CHECK(in.numel() == out.numel() * size_, "zpp ", call, ": input has ", in.numel(),
                " elements, expected ", size_, " x ", out.numel());
    RedOp r = zppOp(rop, in, call);
    at::Tensor src = input(w, premulInput(r, in));
    at::Tensor dst = output(w, out);
    Buf s = bufOf(src, call), d = bufOf(dst, call);
    issue(w, call, [&](zppStream_t st) {
      if (bits >= 0)
        return zppQgzReduceScatter(s.ptr, d.ptr, d.count, d.type, r.op, bits, comm_, st);
      return zppReduceScatter(s.ptr, d.ptr, d.count, d.type, r.op, comm_, st);
    });
  }

  zppComm_t comm_ = nullptr;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<ZppWork>> queue_;
  bool stopping_ = false;
  std::mutex commLock_;  // comm_ against abort() from another thread
  std::thread worker_;
};

}  // namespace torch_zpp

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using torch_zpp::ZppBackend;
  using torch_zpp::Settings;
  m.doc() = "zpp as a torch.distributed backend (use torch_zpp, not this module)";

  py::class_<ZppBackend, c10d::Backend, c10::intrusive_ptr<ZppBackend>>(m, "ZppBackend")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       int timeoutSec, int qwzBits, int qgzBits, int quantBlock,
                       int64_t compressMinBytes, int hpzGroupSize, const std::string& hostId,
                       const std::string& commName) {
             Settings s;
             s.timeoutSec = timeoutSec;
             s.qwzBits = qwzBits;
             s.qgzBits = qgzBits;
             s.quantBlock = quantBlock;
             s.compressMinBytes = compressMinBytes;
             s.hpzGroupSize = hpzGroupSize;
             s.hostId = hostId;
             s.commName = commName;
             return c10::make_intrusive<ZppBackend>(store, rank, size, s);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_s"),
           py::arg("qwz_bits"), py::arg("qgz_bits"), py::arg("quant_block"),
           py::arg("compress_min_bytes"), py::arg("hpz_group_size"), py::arg("host_id"),
           py::arg("comm_name"), py::call_guard<py::gil_scoped_release>())
      .def("qwz_all_gather", &ZppBackend::qwzAllGather, py::arg("output"), py::arg("input"),
           py::arg("bits"), py::call_guard<py::gil_scoped_release>())
      .def("qgz_reduce_scatter", &ZppBackend::qgzReduceScatter, py::arg("output"),
           py::arg("input"), py::arg("op"), py::arg("bits"),
           py::call_guard<py::gil_scoped_release>())
      .def("stats", &ZppBackend::stats)
      .def("reset_stats", &ZppBackend::resetStats)
      .def("topology", &ZppBackend::topology);

  m.attr("UNDEF_INT") = ZPP_CONFIG_UNDEF_INT;
  m.def("version", [] {
    int v = 0;
    zppGetVersion(&v);
    return v;
  });
#ifdef ZPP_TORCH_CUDA
  m.attr("has_device_path") = true;
#else
  m.attr("has_device_path") = false;
#endif
}
