// torch_zpp: the c10d collectives, point-to-point and ZeRO++ calls of ZppBackend
// (backend.hpp): each checks its tensors, makes a work and issues zpp's call.
#include "backend.hpp"

#include <c10/util/accumulate.h>

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

// Sparse (and other non-strided) tensors, named before anything touches
// their memory (contiguous() would raise torch's own, unhelpful error).
void checkDense(const at::Tensor& t, const char* call) {
  TORCH_CHECK(t.layout() == c10::kStrided, "zpp ", call, ": ", t.layout(),
              " tensors are not supported (dense tensors only; sparse ones: use gloo)");
}

void checkDense(const std::vector<at::Tensor>& ts, const char* call) {
  for (auto& t : ts) checkDense(t, call);
}

void checkRoot(int64_t root, int size, const char* call) {
  TORCH_CHECK(root >= 0 && root < size, "zpp ", call, ": root ", root,
              " is not a rank of this group of ", size);
}

// Elements zpp counts in a tensor of t's type: complex numbers are pairs.
size_t perElement(const at::Tensor& t) { return t.is_complex() ? 2 : 1; }

std::vector<at::Tensor> flattenAll(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> v;
  for (auto& t : ts) v.push_back(t.reshape({-1}));
  return v;
}

}  // namespace

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
  checkDense(tensors, call);
  TORCH_CHECK(opts.rootTensor == 0, "zpp broadcast: rootTensor must be 0");
  checkRoot(opts.rootRank, size_, call);
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
  checkDense(inputs, call);
  TORCH_CHECK(outputs.size() == 1, "zpp allgather: expects one list of outputs");
  checkDense(outputs[0], call);
  auto w = newWork(c10d::OpType::ALLGATHER, call, outputs[0], inputs[0]);
  gatherIntoList(*w, call, outputs[0], inputs[0]);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const char* call = "allgather_coalesced";
  checkDense(inputs, call);
  TORCH_CHECK(outputs.size() == static_cast<size_t>(size_), "zpp ", call, ": expects ", size_,
              " output lists, got ", outputs.size());
  for (auto& l : outputs) checkDense(l, call);
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

c10::intrusive_ptr<c10d::Work> ZppBackend::allGatherSingle(const char* call, at::Tensor& out,
                                                           at::Tensor& in) {
  checkDense(out, call);
  checkDense(in, call);
  auto w = newWork(c10d::OpType::_ALLGATHER_BASE, call, {out}, in);
  gatherIntoTensor(*w, call, out, in, -1);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::allGatherSingleCoalesced(const char* call,
                                                                    std::vector<at::Tensor>& outs,
                                                                    std::vector<at::Tensor>& ins) {
  TORCH_CHECK(outs.size() == ins.size() && !ins.empty(), "zpp ", call,
              ": needs as many outputs as inputs, at least one");
  checkDense(outs, call);
  checkDense(ins, call);
  auto w = newWork(c10d::OpType::COALESCED, call, outs, ins[0]);
  for (size_t i = 0; i < ins.size(); i++) gatherIntoTensor(*w, call, outs[i], ins[i], -1);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ReduceScatterOptions& opts) {
  const char* call = "reduce_scatter";
  checkOne(outputs, call);
  checkDense(outputs, call);
  for (auto& l : inputs) checkDense(l, call);
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

c10::intrusive_ptr<c10d::Work> ZppBackend::reduceScatterSingle(const char* call, at::Tensor& out,
                                                               at::Tensor& in,
                                                               const c10d::ReduceOp& rop) {
  checkDense(out, call);
  checkDense(in, call);
  auto w = newWork(c10d::OpType::_REDUCE_SCATTER_BASE, call, {out}, in);
  scatterFromTensor(*w, call, out, in, rop, -1);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::reduceScatterSingleCoalesced(const char* call,
                                                                        std::vector<at::Tensor>& outs,
                                                                        std::vector<at::Tensor>& ins,
                                                                        const c10d::ReduceOp& rop) {
  TORCH_CHECK(outs.size() == ins.size() && !ins.empty(), "zpp ", call,
              ": needs as many outputs as inputs, at least one");
  checkDense(outs, call);
  checkDense(ins, call);
  auto w = newWork(c10d::OpType::COALESCED, call, outs, ins[0]);
  for (size_t i = 0; i < ins.size(); i++) scatterFromTensor(*w, call, outs[i], ins[i], rop, -1);
  return submit(w);
}

// Split sizes in rows (dim 0); none = equal splits. Equal counts to every
// rank (in and out) take zppAllToAll, anything else zppAllToAllv.
c10::intrusive_ptr<c10d::Work> ZppBackend::allToAllSingle(const char* call, at::Tensor& out,
                                                          at::Tensor& in,
                                                          std::vector<int64_t>& outSplits,
                                                          std::vector<int64_t>& inSplits) {
  checkDense(out, call);
  checkDense(in, call);
  checkSame(out, in, call);
  auto rowsOf = [](const at::Tensor& t) { return t.dim() ? t.size(0) : int64_t{1}; };
  auto rowElems = [&](const at::Tensor& t) {
    int64_t rows = rowsOf(t);
    return rows ? t.numel() / rows
                : (t.dim() ? c10::multiply_integers(t.sizes().slice(1)) : int64_t{1});
  };
  int64_t rowIn = rowElems(in), rowOut = rowElems(out);
  TORCH_CHECK(rowIn == rowOut || (in.numel() == 0 && out.numel() == 0), "zpp ", call,
              ": a row (dim 0) of the input has ", rowIn, " elements, of the output ", rowOut);
  // Counts and displacements in zpp's elements, one per rank.
  auto layout = [&](std::vector<int64_t>& splits, const at::Tensor& t, const char* which,
                    std::vector<size_t>& counts, std::vector<size_t>& displs) {
    int64_t rows = rowsOf(t);
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "zpp ", call, ": the ", which, " has ", rows,
                  " rows (dim 0), which ", size_, " ranks cannot share evenly; give ", which,
                  "_split_sizes");
      splits.assign(static_cast<size_t>(size_), rows / size_);
    }
    TORCH_CHECK(splits.size() == static_cast<size_t>(size_), "zpp ", call, ": ", which,
                "_split_sizes has ", splits.size(), " entries for a group of ", size_);
    int64_t sum = 0;
    for (int64_t v : splits) {
      TORCH_CHECK(v >= 0, "zpp ", call, ": ", which, "_split_sizes ", c10::IntArrayRef(splits),
                  " has a negative entry");
      sum += v;
    }
    TORCH_CHECK(sum == rows, "zpp ", call, ": ", which, "_split_sizes ", c10::IntArrayRef(splits),
                " add up to ", sum, " rows, the ", which, " has ", rows);
    size_t unit = static_cast<size_t>(rowIn) * perElement(t), pos = 0;
    for (int64_t v : splits) {
      counts.push_back(static_cast<size_t>(v) * unit);
      displs.push_back(pos);
      pos += counts.back();
    }
  };
  std::vector<size_t> sc, sd, rc, rd;
  layout(inSplits, in, "input", sc, sd);
  layout(outSplits, out, "output", rc, rd);
  auto w = newWork(c10d::OpType::ALLTOALL_BASE, call, {out}, in);
  Buf s = bufOf(input(*w, in), call), d = bufOf(output(*w, out), call);
  bool even = true;
  for (int p = 0; p < size_; p++) even = even && sc[p] == sc[0] && rc[p] == sc[0];
  if (even) {
    size_t count = sc[0];
    issue(*w, call, [=](zppComm_t comm, zppStream_t st) {
      return zppAllToAll(s.ptr, d.ptr, count, s.type, comm, st);
    });
  } else {
    issue(*w, call, [=](zppComm_t comm, zppStream_t st) {
      return zppAllToAllv(s.ptr, sc.data(), sd.data(), d.ptr, rc.data(), rd.data(), s.type, comm, st);
    });
  }
  return submit(w);
}

#ifdef ZPP_C10D_SINGLE_NAMES
c10::intrusive_ptr<c10d::Work> ZppBackend::all_gather_single(at::Tensor& out, at::Tensor& in,
                                                             const c10d::AllgatherOptions&) {
  return allGatherSingle("all_gather_single", out, in);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::all_gather_single_coalesced(std::vector<at::Tensor>& outs,
                                                                       std::vector<at::Tensor>& ins,
                                                                       const c10d::AllgatherOptions&) {
  return allGatherSingleCoalesced("all_gather_single_coalesced", outs, ins);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::reduce_scatter_single(
    at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& opts) {
  return reduceScatterSingle("reduce_scatter_single", out, in, opts.reduceOp);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::reduce_scatter_single_coalesced(
    std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
    const c10d::ReduceScatterOptions& opts) {
  return reduceScatterSingleCoalesced("reduce_scatter_single_coalesced", outs, ins, opts.reduceOp);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::all_to_all_single(at::Tensor& out, at::Tensor& in,
                                                             std::vector<int64_t>& outSplits,
                                                             std::vector<int64_t>& inSplits,
                                                             const c10d::AllToAllOptions&) {
  return allToAllSingle("all_to_all_single", out, in, outSplits, inSplits);
}
#else
c10::intrusive_ptr<c10d::Work> ZppBackend::_allgather_base(at::Tensor& out, at::Tensor& in,
                                                           const c10d::AllgatherOptions&) {
  return allGatherSingle("_allgather_base", out, in);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins, const c10d::AllgatherOptions&) {
  return allGatherSingleCoalesced("allgather_into_tensor_coalesced", outs, ins);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::_reduce_scatter_base(
    at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& opts) {
  return reduceScatterSingle("_reduce_scatter_base", out, in, opts.reduceOp);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
    const c10d::ReduceScatterOptions& opts) {
  return reduceScatterSingleCoalesced("reduce_scatter_tensor_coalesced", outs, ins, opts.reduceOp);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::alltoall_base(at::Tensor& out, at::Tensor& in,
                                                         std::vector<int64_t>& outSplits,
                                                         std::vector<int64_t>& inSplits,
                                                         const c10d::AllToAllOptions&) {
  return allToAllSingle("alltoall_base", out, in, outSplits, inSplits);
}
#endif

c10::intrusive_ptr<c10d::Work> ZppBackend::reduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::ReduceOptions& opts) {
  const char* call = "reduce";
  checkOne(tensors, call);
  checkDense(tensors, call);
  TORCH_CHECK(opts.rootTensor == 0, "zpp reduce: rootTensor must be 0");
  checkRoot(opts.rootRank, size_, call);
  at::Tensor& t = tensors[0];
  auto w = newWork(c10d::OpType::REDUCE, call, tensors, t);
  RedOp r = zppOp(opts.reduceOp, t, call);
  int root = static_cast<int>(opts.rootRank);
  // The root reduces in place into its tensor; the others only send theirs
  // (a scaled copy for PREMUL_SUM: the caller's tensor stays as it was).
  Buf s{}, d{};
  if (rank_ == root) {
    at::Tensor dst = output(*w, t);
    if (r.premul) dst.copy_(premulInput(r, dst));
    s = d = bufOf(dst, call);
  } else {
    s = bufOf(input(*w, premulInput(r, t)), call);
  }
  zppRedOp_t op = r.op;
  issue(*w, call, [=](zppComm_t comm, zppStream_t st) {
    return zppReduce(s.ptr, d.ptr, s.count, s.type, op, root, comm, st);
  });
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::GatherOptions& opts) {
  const char* call = "gather";
  checkOne(inputs, call);
  checkDense(inputs, call);
  checkRoot(opts.rootRank, size_, call);
  int root = static_cast<int>(opts.rootRank);
  at::Tensor& in = inputs[0];
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_), "zpp ", call,
                ": the root needs one list of ", size_, " outputs");
    outs = outputs[0];
    checkDense(outs, call);
    for (auto& o : outs) {
      checkSame(o, in, call);
      TORCH_CHECK(o.numel() == in.numel(), "zpp ", call, ": every output must have the input's size (",
                  in.numel(), " elements), got ", o.numel());
    }
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "zpp ", call,
                ": only the root (rank ", root, ") takes outputs");
  }
  auto w = newWork(c10d::OpType::GATHER, call, outs, in);
  Buf s = bufOf(input(*w, in), call);
  void* flatPtr = nullptr;
  if (rank_ == root) {
    at::Tensor flat = at::empty({in.numel() * size_}, in.options());
    w->keep_.push_back(flat);
    flatPtr = flat.data_ptr();
    w->finishers_.push_back([outs, flat, n = in.numel()]() mutable {
      for (size_t r = 0; r < outs.size(); r++)
        outs[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(outs[r].sizes()));
    });
  }
  issue(*w, call, [=](zppComm_t comm, zppStream_t st) {
    return zppGather(s.ptr, flatPtr, s.count, s.type, root, comm, st);
  });
  return submit(w);
}

#ifdef ZPP_C10D_GATHER_SINGLE
c10::intrusive_ptr<c10d::Work> ZppBackend::gather_single(at::Tensor& out, at::Tensor& in,
                                                         const c10d::GatherOptions& opts) {
  const char* call = "gather_single";
  checkDense(in, call);
  checkRoot(opts.rootRank, size_, call);
  int root = static_cast<int>(opts.rootRank);
  bool isRoot = rank_ == root;
  if (isRoot) {
    checkDense(out, call);
    checkSame(out, in, call);
    TORCH_CHECK(out.numel() == in.numel() * size_, "zpp ", call, ": the output has ", out.numel(),
                " elements, expected ", size_, " x ", in.numel());
  }
  auto w = newWork(c10d::OpType::GATHER, call,
                   isRoot ? std::vector<at::Tensor>{out} : std::vector<at::Tensor>{}, in);
  Buf s = bufOf(input(*w, in), call);
  void* d = isRoot ? bufOf(output(*w, out), call).ptr : nullptr;
  issue(*w, call, [=](zppComm_t comm, zppStream_t st) {
    return zppGather(s.ptr, d, s.count, s.type, root, comm, st);
  });
  return submit(w);
}
#endif

c10::intrusive_ptr<c10d::Work> ZppBackend::scatter(std::vector<at::Tensor>& outputs,
                                                   std::vector<std::vector<at::Tensor>>& inputs,
                                                   const c10d::ScatterOptions& opts) {
  const char* call = "scatter";
  checkOne(outputs, call);
  checkDense(outputs, call);
  checkRoot(opts.rootRank, size_, call);
  int root = static_cast<int>(opts.rootRank);
  at::Tensor& out = outputs[0];
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_), "zpp ", call,
                ": the root needs one list of ", size_, " inputs");
    checkDense(inputs[0], call);
    for (auto& t : inputs[0]) {
      checkSame(out, t, call);
      TORCH_CHECK(t.numel() == out.numel(), "zpp ", call, ": every input must have the output's size (",
                  out.numel(), " elements), got ", t.numel());
    }
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "zpp ", call,
                ": only the root (rank ", root, ") takes inputs");
  }
  auto w = newWork(c10d::OpType::SCATTER, call, outputs, out);
  Buf d = bufOf(output(*w, out), call);
  const void* src = nullptr;
  if (rank_ == root) {
    at::Tensor flat = at::cat(flattenAll(inputs[0]));
    w->keep_.push_back(flat);
    src = flat.data_ptr();
  }
  issue(*w, call, [=](zppComm_t comm, zppStream_t st) {
    return zppScatter(src, d.ptr, d.count, d.type, root, comm, st);
  });
  return submit(w);
}

// Tensor i goes to rank i, whatever the sizes: one zppAllToAllv over a
// packed copy of the inputs into a packed buffer, then into the outputs.
c10::intrusive_ptr<c10d::Work> ZppBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::AllToAllOptions&) {
  const char* call = "alltoall";
  TORCH_CHECK(
      outputs.size() == static_cast<size_t>(size_) && inputs.size() == static_cast<size_t>(size_),
      "zpp ", call, ": expects ", size_, " inputs and ", size_, " outputs, got ", inputs.size(),
      " and ", outputs.size());
  checkDense(outputs, call);
  checkDense(inputs, call);
  for (auto& t : inputs) checkSame(outputs[0], t, call);
  for (auto& t : outputs) checkSame(outputs[0], t, call);
  auto w = newWork(c10d::OpType::ALLTOALL, call, outputs, inputs[0]);
  std::vector<size_t> sc, sd, rc, rd;
  size_t pos = 0;
  for (auto& t : inputs) {
    sc.push_back(static_cast<size_t>(t.numel()) * perElement(t));
    sd.push_back(pos);
    pos += sc.back();
  }
  int64_t total = 0;
  pos = 0;
  for (auto& t : outputs) {
    rc.push_back(static_cast<size_t>(t.numel()) * perElement(t));
    rd.push_back(pos);
    pos += rc.back();
    total += t.numel();
  }
  Buf s = bufOf(input(*w, at::cat(flattenAll(inputs))), call);
  at::Tensor flat = at::empty({total}, outputs[0].options());
  w->keep_.push_back(flat);
  Buf d = bufOf(flat, call);
  std::vector<at::Tensor> outs(outputs.begin(), outputs.end());
  w->finishers_.push_back([outs, flat]() mutable {
    int64_t off = 0;
    for (auto& o : outs) {
      o.copy_(flat.narrow(0, off, o.numel()).view(o.sizes()));
      off += o.numel();
    }
  });
  issue(*w, call, [=](zppComm_t comm, zppStream_t st) {
    return zppAllToAllv(s.ptr, sc.data(), sd.data(), d.ptr, rc.data(), rd.data(), s.type, comm, st);
  });
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions&) {
  checkDense(tensors, "allreduce");
  TORCH_CHECK(false, "zpp allreduce: sparse all-reduce is not supported (dense tensors only)");
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

// ---- point-to-point --------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ZppBackend::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                int tag) {
  return p2p("send", c10d::OpType::SEND, tensors, dstRank, tag);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                int tag) {
  return p2p("recv", c10d::OpType::RECV, tensors, srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return p2p("recvAnysource", c10d::OpType::RECVANYSOURCE, tensors, ZPP_ANY_SOURCE, tag);
}

// Host tensors use the tagged calls, whatever the tag: a receive from any
// source must match every send. Device tensors go to zppSend / zppRecv,
// which have no tags (NCCL ignores them too) and no any-source.
c10::intrusive_ptr<c10d::Work> ZppBackend::p2p(const char* call, c10d::OpType type,
                                               std::vector<at::Tensor>& tensors, int peer, int tag) {
  checkOne(tensors, call);
  checkDense(tensors, call);
  at::Tensor& t = tensors[0];
  bool isSend = type == c10d::OpType::SEND, any = type == c10d::OpType::RECVANYSOURCE;
  TORCH_CHECK(any || (peer >= 0 && peer < size_), "zpp ", call, ": peer ", peer,
              " is not a rank of this group of ", size_);
  TORCH_CHECK(tag >= 0, "zpp ", call, ": tag ", tag, " must not be negative");
  c10::intrusive_ptr<ZppWork> w;
  if (coalescing_) {
    // One work for the whole group: batch_isend_irecv waits for it alone.
    if (!coalesced_) {
      coalesced_ = newWork(c10d::OpType::COALESCED, "batch_isend_irecv", {}, t);
      coalesced_->group_ = true;
    }
    w = coalesced_;
    TORCH_CHECK(t.is_cuda() == w->device_.has_value(), "zpp ", call,
                ": a coalescing group takes host or CUDA tensors, not both");
    if (!isSend) w->outputs_.push_back(t);
  } else {
    w = newWork(type, call, isSend ? std::vector<at::Tensor>{} : tensors, t);
  }
  TORCH_CHECK(!(any && w->device_), "zpp ", call, ": a receive from any source needs host tensors");
  Buf b = isSend ? bufOf(input(*w, t), call) : bufOf(output(*w, t), call);
  bool device = w->device_.has_value();
  int* source = any ? &w->source_ : nullptr;
#ifdef ZPP_TORCH_CUDA
  // NCCL-style: the group of device calls opens with the first one, on the
  // caller's thread, and endCoalescing closes it.
  if (device && coalescing_ && !deviceGroupOpen_) {
    zppResult_t res = zppGroupStart();
    if (res != zppSuccess) throwZpp(res, comm_, "zppGroupStart");
    deviceGroupOpen_ = true;
  }
#endif
  issue(*w, call, [=](zppComm_t comm, zppStream_t st) {
    if (device) {
      if (isSend) return zppSend(b.ptr, b.count, b.type, peer, comm, st);
      return zppRecv(b.ptr, b.count, b.type, peer, comm, st);
    }
    if (isSend) return zppSendTagged(b.ptr, b.count, b.type, peer, tag, comm, st);
    return zppRecvTagged(b.ptr, b.count, b.type, peer, tag, source, comm, st);
  });
  if (coalescing_) return w;
  return submit(w);
}

void ZppBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_, "zpp startCoalescing: a coalescing group is already open");
  coalescing_ = true;
  coalesced_.reset();
}

// Host: the group's calls run on the worker, between zppGroupStart and
// zppGroupEnd, as one work. An empty group is a work with nothing to do,
// completed in its place in the queue.
c10::intrusive_ptr<c10d::Work> ZppBackend::endCoalescing() {
  TORCH_CHECK(coalescing_, "zpp endCoalescing: no coalescing group is open");
  coalescing_ = false;
  c10::intrusive_ptr<ZppWork> w = std::move(coalesced_);
  coalesced_.reset();
  if (!w) w = newWork(c10d::OpType::COALESCED, "batch_isend_irecv", {}, at::Tensor());
#ifdef ZPP_TORCH_CUDA
  if (deviceGroupOpen_) {
    deviceGroupOpen_ = false;
    zppResult_t res = zppGroupEnd();
    if (res != zppSuccess) throwZpp(res, comm_, "batch_isend_irecv");
  }
#endif
  return submit(w);
}

// ---- ZeRO++ explicit calls ------------------------------------------------

c10::intrusive_ptr<c10d::Work> ZppBackend::qwzAllGather(at::Tensor out, at::Tensor in, int bits) {
  checkDense(out, "qwz_all_gather");
  checkDense(in, "qwz_all_gather");
  auto w = newWork(c10d::OpType::_ALLGATHER_BASE, "qwz_all_gather", {out}, in);
  gatherIntoTensor(*w, "qwz_all_gather", out, in, bits);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::qgzReduceScatter(at::Tensor out, at::Tensor in,
                                                            c10d::ReduceOp op, int bits) {
  TORCH_CHECK(bits >= 0, "zpp qgz_reduce_scatter: bits must be 0, 4 or 8");
  checkDense(out, "qgz_reduce_scatter");
  checkDense(in, "qgz_reduce_scatter");
  auto w = newWork(c10d::OpType::_REDUCE_SCATTER_BASE, "qgz_reduce_scatter", {out}, in);
  scatterFromTensor(*w, "qgz_reduce_scatter", out, in, op, bits);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> ZppBackend::qgzReduceScatterEF(
    at::Tensor out, at::Tensor in, c10d::ReduceOp op,
    const c10::intrusive_ptr<ZppGradResidual>& residual) {
  const char* call = "qgz_reduce_scatter_ef";
  TORCH_CHECK(residual, "zpp ", call, ": no residual (torch_zpp.GradResidual)");
  checkDense(out, call);
  checkDense(in, call);
  TORCH_CHECK(!out.is_cuda() && !in.is_cuda(), "zpp ", call,
              ": error feedback takes host tensors only (zpp's device path has none yet)");
  // What zpp would refuse at the worker, refused here with the tensors' words.
  TORCH_CHECK(residual->backend_.get() == this, "zpp ", call, ": the residual belongs to group ",
              residual->groupName(), ", this call is on group ", name(),
              ": a residual serves one gradient buffer of one group");
  TORCH_CHECK(out.scalar_type() == residual->dtype_, "zpp ", call, ": output is ", out.scalar_type(),
              ", the residual was made for ", residual->dtype_,
              ": a residual serves one gradient buffer (make one per buffer)");
  TORCH_CHECK(out.numel() == residual->recvcount_, "zpp ", call, ": output has ", out.numel(),
              " elements, the residual was made for ", residual->recvcount_,
              ": a residual serves one gradient buffer of one layout (make one per buffer)");
  {
    std::lock_guard<std::mutex> commLock(commLock_);
    TORCH_CHECK(comm_ != nullptr && comm_ == residual->comm_ && commGen_ == residual->gen_, "zpp ",
                call,
                ": the group's communicator was shut down, aborted or replaced since the "
                "residual was made");
  }
  RedOp r = zppOp(op, out, call);
  TORCH_CHECK(r.op == zppSum || r.op == zppAvg, "zpp ", call, ": ReduceOp.", opName(op.op_),
              ": qgZ reduces with SUM, AVG or PREMUL_SUM");
  auto w = newWork(c10d::OpType::_REDUCE_SCATTER_BASE, call, {out}, in);
  scatterFromTensor(*w, call, out, in, op, 0, residual->grad_);
  auto work = submit(w);
  // Queued: undo, state and the destructor wait for it.
  std::lock_guard<std::mutex> lock(residual->lastLock_);
  residual->last_ = w;
  return work;
}

// ---- the calls behind several collectives ---------------------------------

c10::intrusive_ptr<c10d::Work> ZppBackend::allreduceMany(const char* call, c10d::OpType type,
                                                         std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOp& rop) {
  TORCH_CHECK(!tensors.empty(), "zpp ", call, ": no tensors");
  if (type == c10d::OpType::ALLREDUCE) checkOne(tensors, call);
  checkDense(tensors, call);
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
                                   const c10d::ReduceOp& rop, int bits, zppGrad_t ef) {
  checkSame(out, in, call);
  TORCH_CHECK(in.numel() == out.numel() * size_, "zpp ", call, ": input has ", in.numel(),
              " elements, expected ", size_, " x ", out.numel());
  RedOp r = zppOp(rop, in, call);
  at::Tensor src = input(w, premulInput(r, in));
  at::Tensor dst = output(w, out);
  Buf s = bufOf(src, call), d = bufOf(dst, call);
  zppRedOp_t op = r.op;
  issue(w, call, [=](zppComm_t comm, zppStream_t st) {
    // The handle is not owned here: its residual waits for this work before
    // it destroys it.
    if (ef != nullptr) return zppQgzReduceScatterEF(s.ptr, d.ptr, d.count, d.type, op, ef, comm, st);
    if (bits >= 0) return zppQgzReduceScatter(s.ptr, d.ptr, d.count, d.type, op, bits, comm, st);
    return zppReduceScatter(s.ptr, d.ptr, d.count, d.type, op, comm, st);
  });
}

}  // namespace torch_zpp
