// torch_zpp: ZppGradResidual (backend.hpp), error feedback's residual for
// qgz_reduce_scatter_ef: a zppGrad handle tied to one group's communicator.
#include "backend.hpp"

#include "conversions.hpp"

namespace torch_zpp {

ZppGradResidual::ZppGradResidual(c10::intrusive_ptr<ZppBackend> backend, int64_t recvcount,
                                 at::ScalarType dtype, int bits)
    : backend_(std::move(backend)), recvcount_(recvcount), dtype_(dtype), bits_(bits) {
  const char* call = "GradResidual";
  TORCH_CHECK(backend_, "zpp ", call, ": no backend");
  TORCH_CHECK(bits == 8 || bits == 4 || bits == 2, "zpp ", call, ": bits ", bits,
              ": expected 8, 4 or 2");
  TORCH_CHECK(recvcount >= 0, "zpp ", call, ": recvcount ", recvcount, " is negative");
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16, "zpp ", call, ": ",
              dtype, " gradients: qgZ takes float32, float16 and bfloat16");
  std::lock_guard<std::mutex> commLock(backend_->commLock_);
  TORCH_CHECK(!backend_->awaitingReconfigure_, "zpp ", call,
              ": the group has no communicator until dist._reconfigure");
  TORCH_CHECK(backend_->comm_ != nullptr, "zpp ", call, ": the process group was shut down or aborted");
  comm_ = backend_->comm_;
  gen_ = backend_->commGen_;
  zppResult_t res =
      zppGradCreate(comm_, static_cast<size_t>(recvcount), zppType(dtype, call), bits, &grad_);
  if (res != zppSuccess) throwZpp(res, comm_, "zppGradCreate");
}

ZppGradResidual::~ZppGradResidual() {
  if (grad_ == nullptr) return;
  {
    // The worker may need the GIL to complete the work (a Python callback
    // chained on its future): wait without it.
    std::optional<pybind11::gil_scoped_release> nogil;
    if (Py_IsInitialized() && PyGILState_Check()) nogil.emplace();
    settle();
  }
  zppGradDestroy(grad_);  // reads no communicator: fine after the group's shutdown
}

void ZppGradResidual::settle() {
  c10::intrusive_ptr<ZppWork> w;
  {
    std::lock_guard<std::mutex> lock(lastLock_);
    w = last_;
  }
  if (w) w->getFuture()->wait();
}

void ZppGradResidual::withComm(const char* call, const std::function<zppResult_t(zppComm_t)>& fn) {
  settle();
  std::lock_guard<std::mutex> commLock(backend_->commLock_);
  TORCH_CHECK(backend_->comm_ != nullptr && backend_->comm_ == comm_ && backend_->commGen_ == gen_,
              "zpp GradResidual.", call, ": the group's communicator (", backend_->name(),
              ") was shut down, aborted or replaced since the residual was made");
  zppResult_t res = fn(comm_);
  if (res != zppSuccess) throwZpp(res, comm_, std::string("GradResidual.") + call);
}

void ZppGradResidual::undo() {
  withComm("undo", [&](zppComm_t) { return zppGradUndo(grad_); });
}

int64_t ZppGradResidual::stateBytes() {
  size_t n = 0;
  withComm("state_bytes", [&](zppComm_t) { return zppGradStateBytes(grad_, &n); });
  return static_cast<int64_t>(n);
}

at::Tensor ZppGradResidual::state() {
  at::Tensor t;
  withComm("state", [&](zppComm_t) {
    size_t n = 0;
    zppResult_t res = zppGradStateBytes(grad_, &n);
    if (res != zppSuccess) return res;
    t = at::empty({static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kByte));
    return zppGradSaveState(grad_, t.data_ptr(), n);
  });
  return t;
}

void ZppGradResidual::loadState(const at::Tensor& state) {
  TORCH_CHECK(
      state.device().is_cpu() && state.scalar_type() == at::kByte && state.dim() == 1,
      "zpp GradResidual.load_state: expects a 1-D CPU uint8 tensor (what state() returned), got ",
      state.dim(), "-D ", state.scalar_type(), " on ", state.device());
  at::Tensor c = state.contiguous();
  withComm("load_state", [&](zppComm_t) {
    return zppGradLoadState(grad_, c.data_ptr(), static_cast<size_t>(c.numel()));
  });
}

}  // namespace torch_zpp
