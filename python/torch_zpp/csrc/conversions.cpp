// torch_zpp: see conversions.hpp.
#include "conversions.hpp"

#include <torch/csrc/distributed/c10d/exception.h>

#include "compat.hpp"

namespace torch_zpp {

std::string zppMessage(zppResult_t res, const std::string& why, const std::string& call) {
  std::string msg = "zpp " + call + " failed: " + zppGetErrorString(res);
  if (!why.empty()) msg += ": " + why;
  return msg;
}

void throwZpp(zppResult_t res, zppComm_t comm, const std::string& call) {
  C10_THROW_ERROR(DistBackendError, zppMessage(res, zppGetLastError(comm), call));
}

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
    default: TORCH_CHECK(false, "zpp ", call, ": data type ", t, " is not supported");
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
      auto* s = dynamic_cast<PreMulSumSupplement*>(rop.supplement_.get());
      TORCH_CHECK(s != nullptr, "zpp ", call, ": PREMUL_SUM without a factor");
      if (s->tensor_factor.defined())
        r.tensorFactor = s->tensor_factor;
      else
        r.factor = s->double_factor;
      break;
    }
    default: TORCH_CHECK(false, "zpp ", call, ": ReduceOp.", opName(rop.op_), " is not supported");
  }
  // Sums of bools are not bools; min/max of complex numbers are undefined.
  TORCH_CHECK(!isBool || r.op == zppMin || r.op == zppMax, "zpp ", call, ": ReduceOp.", opName(rop.op_),
              " on bool tensors is not supported (MIN and MAX are)");
  TORCH_CHECK(!complex || r.op == zppSum || r.op == zppAvg, "zpp ", call, ": ReduceOp.",
              opName(rop.op_), " on complex tensors is not supported (SUM, AVG and PREMUL_SUM are)");
  return r;
}

at::Tensor premulInput(const RedOp& r, const at::Tensor& t) {
  if (!r.premul) return t;
  if (r.tensorFactor.defined()) return t * r.tensorFactor.to(t.device());
  return t * r.factor;
}

}  // namespace torch_zpp
