// torch_zpp: conversions between torch's c10d types and zpp's C API, as
// PyTorch's UCC backend keeps its type and op maps in UCCUtils: tensors to
// (pointer, count, type), ReduceOps to zppRedOp_t, zpp errors to
// c10::DistBackendError. No state; used by the other files.
#pragma once

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>

#include "zpp.h"

namespace torch_zpp {

// "zpp CALL failed: <zpp's error string>: <why>"; why may be empty.
std::string zppMessage(zppResult_t res, const std::string& why, const std::string& call);

// Raises DistBackendError with zppGetLastError(comm): the reason that broke
// the communicator, or the reason this thread logged last (argument checks
// happen on the calling thread).
[[noreturn]] void throwZpp(zppResult_t res, zppComm_t comm, const std::string& call);

// How a tensor's storage is described to zpp: pointer, element count, type.
struct Buf {
  void* ptr;
  size_t count;
  zppDataType_t type;
};

// Complex tensors travel as pairs of reals; bool as bytes (only for calls
// that move data or take max/min, checked by zppOp).
zppDataType_t zppType(at::ScalarType t, const char* call);

// t must be contiguous.
Buf bufOf(const at::Tensor& t, const char* call);

// PREMUL_SUM is a SUM of inputs multiplied by a factor first (FSDP2 uses it
// for a gradient divide factor other than the world size).
struct RedOp {
  zppRedOp_t op;
  bool premul = false;
  double factor = 1.0;
  at::Tensor tensorFactor;
};

// "SUM", "AVG", ... for messages.
const char* opName(c10d::ReduceOp::RedOpType op);

// Raises, naming the call, for an op zpp cannot apply to t's type.
RedOp zppOp(const c10d::ReduceOp& rop, const at::Tensor& t, const char* call);

// The input of a PREMUL_SUM: a scaled copy (the caller's tensor is left
// alone), in the tensor's own type as NCCL does; t itself otherwise.
at::Tensor premulInput(const RedOp& r, const at::Tensor& t);

}  // namespace torch_zpp
