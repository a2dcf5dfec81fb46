// torch_zpp: see backend.hpp. The backend's life (making, shrinking,
// reconfiguring, aborting) and how its works are issued and completed;
// the collectives are in collectives.cpp, the residual in grad_residual.cpp.
#include "backend.hpp"

#include <torch/csrc/distributed/c10d/exception.h>

#ifdef ZPP_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <variant>

#include "conversions.hpp"

namespace torch_zpp {

namespace {

bool isP2P(c10d::OpType t) {
  return t == c10d::OpType::SEND || t == c10d::OpType::RECV || t == c10d::OpType::RECVANYSOURCE;
}

// A unique id through a store: made (zppGetUniqueId, whose root lives in
// this process) and put under key, or taken from there once it is (within
// wait, else the store's own timeout).
zppUniqueId idThroughStore(c10d::Store& store, const std::string& key, bool make,
                           std::optional<std::chrono::milliseconds> wait) {
  zppUniqueId id;
  if (make) {
    zppResult_t res = zppGetUniqueId(&id);
    if (res != zppSuccess) throwZpp(res, nullptr, "zppGetUniqueId");
    std::vector<uint8_t> bytes(reinterpret_cast<uint8_t*>(&id),
                               reinterpret_cast<uint8_t*>(&id) + sizeof(id));
    store.set(key, bytes);
    return id;
  }
  if (wait.has_value()) store.wait({key}, *wait);
  std::vector<uint8_t> bytes = store.get(key);
  TORCH_CHECK(bytes.size() == sizeof(id), "zpp: the unique id in the store (", key, ") has ",
              bytes.size(), " bytes, not ", sizeof(id));
  std::memcpy(&id, bytes.data(), sizeof(id));
  return id;
}

}  // namespace

zppConfig_t ZppBackend::configOf(const Settings& s) const {
  zppConfig_t config = ZPP_CONFIG_INITIALIZER;
  config.timeoutSec = s.timeoutSec;
  config.qwzBits = s.qwzBits;
  config.qgzBits = s.qgzBits;
  config.quantBlock = s.quantBlock;
  if (s.compressMinBytes >= 0) config.compressMinBytes = static_cast<size_t>(s.compressMinBytes);
  config.hpzGroupSize = s.hpzGroupSize;
  config.quantRotate = s.quantRotate;
  config.qgzErrorFeedback = s.qgzErrorFeedback;
  if (!settings_.hostId.empty()) config.hostId = settings_.hostId.c_str();
  if (!settings_.commName.empty()) config.commName = settings_.commName.c_str();
  return config;
}

ZppBackend::ZppBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       const Settings& s)
    : c10d::Backend(rank, size), settings_(s), store_(store) {
  timeoutFrom_ = s.timeoutFrom;
  timeoutSec_ = s.timeoutInEffect;
#ifdef ZPP_C10D_RECONFIGURE
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  char part[32];
  std::snprintf(part, sizeof(part), "%08x%08x", rd(), rd());
  handle_ = std::string("zpp:") + host + ":" + std::to_string(getpid()) + ":" + part;
  if (s.deferred) {
    awaitingReconfigure_ = true;
    worker_ = std::thread([this] { workerLoop(); });
    return;
  }
#else
  TORCH_CHECK(!s.deferred, "zpp: enable_reconfigure needs torch 2.15's reconfigure API");
#endif
  // The unique id goes through the group's store: torch hands every group
  // (and device) its own prefixed store, so one key per store is enough.
  zppUniqueId id = idThroughStore(*store, "zpp_unique_id", rank == 0, std::nullopt);
  zppConfig_t config = configOf(s);
  zppResult_t res = zppCommInitRankConfig(&comm_, size, id, rank, &config);
  if (res != zppSuccess) throwZpp(res, nullptr, "zppCommInitRankConfig");
  worker_ = std::thread([this] { workerLoop(); });
}

ZppBackend::ZppBackend(zppComm_t comm, int rank, int size, const std::string& timeoutFrom,
                       int timeoutSec)
    : c10d::Backend(rank, size), comm_(comm), timeoutFrom_(timeoutFrom), timeoutSec_(timeoutSec) {
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
    aborted_ = true;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  cv_.notify_all();
  lock.unlock();
  if (worker_.joinable()) worker_.join();
}

c10d::ErrorType ZppBackend::getError() {
  std::lock_guard<std::mutex> commLock(commLock_);
  if (comm_ == nullptr) return aborted_ ? c10d::ErrorType::COMM_ERROR : c10d::ErrorType::SUCCESS;
  zppResult_t async = zppSuccess;
  if (zppCommGetAsyncError(comm_, &async) != zppSuccess) return c10d::ErrorType::COMM_ERROR;
  if (async == zppSuccess || async == zppInProgress) return c10d::ErrorType::SUCCESS;
  // zpp's reasons say "timed out" for every wait that hit its timeout.
  if (std::strstr(zppGetLastError(comm_), "timed out") != nullptr) return c10d::ErrorType::TIMEOUT;
  return async == zppRemoteError ? c10d::ErrorType::REMOTE_ERROR : c10d::ErrorType::COMM_ERROR;
}

#ifdef ZPP_C10D_SHRINK
c10::intrusive_ptr<c10d::Backend> ZppBackend::shrink(const std::vector<int64_t>& ranksToExclude,
                                                     int shrinkFlags,
                                                     const c10::intrusive_ptr<Options>& optsOverride) {
  // torch's SHRINK_DEFAULT (0) and SHRINK_ABORT (1); torch checked the ranks.
  TORCH_CHECK((shrinkFlags & ~1) == 0, "zpp shrink: shrink_flags ", shrinkFlags,
              " unknown (SHRINK_DEFAULT or SHRINK_ABORT)");
  std::vector<int> exclude;
  for (int64_t r : ranksToExclude) {
    TORCH_CHECK(r >= 0 && r < getSize(), "zpp shrink: rank ", r, " is not in this group of ",
                getSize());
    exclude.push_back(static_cast<int>(r));
  }
  zppConfig_t config = ZPP_CONFIG_INITIALIZER;
  zppConfig_t* settings = nullptr;  // the parent's
  std::string from = timeoutFrom_;
  int timeoutSec = timeoutSec_;
  if (optsOverride && optsOverride->timeout.count() > 0) {
    timeoutSec = static_cast<int>((optsOverride->timeout.count() + 999) / 1000);
    config.timeoutSec = timeoutSec;
    settings = &config;
    from = "shrink_group(pg_options.timeout=" + std::to_string(timeoutSec) + " s)";
  }
  zppComm_t child = nullptr;
  {
    // Not while abort() frees the communicator; an abort waits for the
    // shrink, which ends within the timeout.
    std::lock_guard<std::mutex> commLock(commLock_);
    TORCH_CHECK(comm_ != nullptr, "zpp shrink: this group was aborted or shut down");
    zppResult_t res =
        zppCommShrink(comm_, exclude.data(), static_cast<int>(exclude.size()), &child, settings,
                      (shrinkFlags & 1) ? ZPP_SHRINK_ABORT : ZPP_SHRINK_DEFAULT);
    if (res != zppSuccess) throwZpp(res, nullptr, "zppCommShrink");
  }
  int rank = 0, size = 0;
  if (zppCommUserRank(child, &rank) != zppSuccess || zppCommCount(child, &size) != zppSuccess) {
    zppCommDestroy(child);
    TORCH_CHECK(false, "zpp shrink: the new communicator's rank and size are unreadable");
  }
  return c10::make_intrusive<ZppBackend>(child, rank, size, from, timeoutSec);
}
#endif

#ifdef ZPP_C10D_RECONFIGURE
c10::intrusive_ptr<c10d::Work> ZppBackend::reconfigure(const c10d::ReconfigureOptions& opts) {
  std::vector<std::string> members;
  if (auto* list = std::get_if<std::vector<c10d::ReconfigureHandle>>(&opts.handles)) {
    members = *list;
  } else {
    auto& set = std::get<std::unordered_set<c10d::ReconfigureHandle>>(opts.handles);
    members.assign(set.begin(), set.end());
    std::sort(members.begin(), members.end());  // every member sorts alike
  }
  const int n = static_cast<int>(members.size());
  TORCH_CHECK(n >= 1, "zpp reconfigure: no handles");
  int pos = -1;
  for (int i = 0; i < n; i++) {
    TORCH_CHECK(members[i].rfind("zpp:", 0) == 0, "zpp reconfigure: handle ", i, " ('", members[i],
                "') is not a zpp handle (get_reconfigure_handle of a zpp group)");
    for (int j = 0; j < i; j++)
      TORCH_CHECK(members[j] != members[i], "zpp reconfigure: handle '", members[i], "' given twice");
    if (members[i] == handle_) pos = i;
  }
  TORCH_CHECK(pos >= 0, "zpp reconfigure: this process's handle ('", handle_, "') is not among the ", n,
              " handles");
  TORCH_CHECK(usedUuids_.insert(opts.uuid).second, "zpp reconfigure: uuid ", opts.uuid,
              " was used already on this group: pass a new one on every reconfigure");
  TORCH_CHECK(store_, "zpp reconfigure: this group has no store to meet in (a group made by shrink)");
  int timeoutSec = timeoutSec_;
  std::string from = timeoutFrom_;
  if (opts.timeout.has_value()) {
    timeoutSec = static_cast<int>((opts.timeout->count() + 999) / 1000);
    from = "reconfigure(timeout=" + std::to_string(timeoutSec) + " s)";
  }
  // The first member's process makes the meeting; the others find it in the store.
  zppUniqueId id = idThroughStore(*store_, "zpp_reconfigure_" + std::to_string(opts.uuid), pos == 0,
                                  std::chrono::milliseconds(static_cast<int64_t>(timeoutSec) * 1000));
  {
    // The old communicator goes first: its works fail ("aborted").
    std::lock_guard<std::mutex> commLock(commLock_);
    if (comm_ != nullptr) zppCommAbort(comm_);
    comm_ = nullptr;
    aborted_ = true;
  }
  zppConfig_t config = configOf(settings_);
  config.timeoutSec = timeoutSec;
  zppComm_t comm = nullptr;
  zppResult_t res = zppCommInitRankConfig(&comm, n, id, pos, &config);
  if (res != zppSuccess) throwZpp(res, nullptr, "zppCommInitRankConfig (reconfigure)");
  {
    std::lock_guard<std::mutex> commLock(commLock_);
    comm_ = comm;
    commGen_++;
    aborted_ = false;
    awaitingReconfigure_ = false;
    rank_ = pos;
    size_ = n;
    timeoutSec_ = timeoutSec;
    timeoutFrom_ = from;
  }
  seq_ = 0;
#ifdef ZPP_C10D_ABORT_HOOKS
  {
    std::lock_guard<std::mutex> lock(hooksLock_);
    hooksRan_ = false;  // the new communicator's first failure runs them again
  }
#endif
  auto w = c10::make_intrusive<ZppWork>(pos, c10d::OpType::UNKNOWN, "reconfigure",
                                        std::vector<at::Tensor>{});
  w->queued_ = true;  // done already: nothing to queue
  w->complete(zppSuccess, "");
  return w;
}
#endif

#ifdef ZPP_C10D_ABORT_HOOKS
void ZppBackend::registerAbortHook(int64_t hookId, c10d::AbortHook hook) {
  TORCH_CHECK(hook, "zpp registerAbortHook: the hook is empty");
  std::lock_guard<std::mutex> lock(hooksLock_);
  abortHooks_[hookId] = std::move(hook);
}

void ZppBackend::unregisterAbortHook(int64_t hookId) {
  std::lock_guard<std::mutex> lock(hooksLock_);
  abortHooks_.erase(hookId);
}

void ZppBackend::runAbortHooksOnce() {
  {
    std::lock_guard<std::mutex> commLock(commLock_);
    zppResult_t async = zppSuccess;
    if (comm_ == nullptr || zppCommGetAsyncError(comm_, &async) != zppSuccess || async == zppSuccess ||
        async == zppInProgress)
      return;  // aborted or shut down by the caller, or still healthy
  }
  std::vector<c10d::AbortHook> hooks;
  {
    std::lock_guard<std::mutex> lock(hooksLock_);
    if (hooksRan_) return;
    hooksRan_ = true;
    for (auto& kv : abortHooks_) hooks.push_back(kv.second);
  }
  // Outside the locks: a hook may call back into this group (getError).
  for (auto& hook : hooks) {
    try {
      hook();
    } catch (const std::exception& e) {
      TORCH_WARN("zpp: an abort hook raised: ", e.what());
    }
  }
}
#endif

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
  TORCH_CHECK(!awaitingReconfigure_, "zpp ", call,
              ": the process group was made with enable_reconfigure=True and has no communicator "
              "until dist._reconfigure");
  TORCH_CHECK(comm_ != nullptr, "zpp ", call, ": the process group was shut down or aborted");
  TORCH_CHECK(!coalescing_ || isP2P(type) || type == c10d::OpType::COALESCED, "zpp ", call,
              ": only send and recv may be coalesced (batch_isend_irecv), not collectives");
  auto w = c10::make_intrusive<ZppWork>(rank_, type, call, std::move(outputs));
  if (!isP2P(type) && type != c10d::OpType::COALESCED) seq_++;
  if (!sample.defined()) return w;
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
    // The copies into the caller's outputs (a list, a non-contiguous tensor)
    // are queued here, behind the call on the same stream, so that the event
    // and a wait cover them; run later by the worker they would land on
    // another stream after the caller had read its outputs.
    {
      c10::cuda::CUDAGuard guard(*w->device_);
      for (auto& f : w->finishers_) f();
      w->finishers_.clear();
    }
    w->event_ = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
    w->event_->record(stream);
    for (auto& t : w->keep_)
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
  }
#endif
  std::lock_guard<std::mutex> lock(mutex_);
  w->queued_ = true;
  w->seq_ = ++issued_;
  if (!w->device_) lastHost_ = w->seq_;
  queue_.push_back(w);
  cv_.notify_one();
  return w;
}

zppResult_t ZppBackend::runCalls(ZppWork& w, std::string& why) {
  // A group: the calls only record until zppGroupEnd issues them all; a
  // call that fails inside fails the group, and zppGroupEnd says so.
  bool group = w.group_ && !w.calls_.empty();
  zppResult_t res = group ? zppGroupStart() : zppSuccess;
  group = group && res == zppSuccess;
  for (size_t i = 0; res == zppSuccess && i < w.calls_.size(); i++) {
    zppComm_t comm;
    {
      std::lock_guard<std::mutex> commLock(commLock_);
      comm = comm_;
    }
    // An abort between here and the call frees comm: zpp then refuses the
    // stale handle, and the reason below says it was an abort.
    res = comm == nullptr ? zppInvalidUsage : w.calls_[i](comm, nullptr);
  }
  if (group) {
    zppResult_t end = zppGroupEnd();  // closes the group even after a failed call
    if (res == zppSuccess) res = end;
  }
  if (res != zppSuccess) {
    std::lock_guard<std::mutex> commLock(commLock_);
    // The reason the communicator broke, or the one this thread (the one
    // that made the call) logged: an argument zpp refused.
    why = comm_ == nullptr ? "the process group was aborted" : reason(zppGetLastError(comm_));
  }
  return res;
}

std::string ZppBackend::reason(const char* raw) const {
  std::string why = raw != nullptr ? raw : "";
  // zpp's timeouts say "timed out after S s ... (ZPP_TIMEOUT)"; this group's
  // timeout may have come from elsewhere. The wording starts as gloo's does.
  static const std::string label = " (ZPP_TIMEOUT)";
  size_t at = why.find(label);
  if (timeoutFrom_.empty() || at == std::string::npos ||
      why.find(" timed out after ") == std::string::npos)
    return why;
  why.erase(at, label.size());
  return "Timed out after " + std::to_string(timeoutSec_) + " s, the timeout set by " + timeoutFrom_ +
         ": " + why;
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
#ifdef ZPP_C10D_ABORT_HOOKS
    // After the failed work completes: its wait stays bounded by the group's
    // timeout, while a hook (torch's flight-recorder dump) may take seconds.
    // The works queued behind wait for the hooks.
    if (res != zppSuccess) runAbortHooksOnce();
#endif
  }
}

}  // namespace torch_zpp
