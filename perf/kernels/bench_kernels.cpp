// zpp-bench-kernels: the codecs beside a memcpy of the same bytes, in one run.
//
// A thin C++ shim over the C functions of quant_kernels/zpp_quant.h. Every
// benchmark reports bytes_per_second; what "bytes" means:
//   quantize/<impl>/<dtype>/<intB>/<size>         the tensor: count * sizeof(dtype)
//                                                 (the kernel's input)
//   dequantize/<impl>/<dtype>/<intB>/<size>       the same tensor bytes (the
//                                                 kernel's output; its packed input is
//                                                 packed_bytes_per_second)
//   reduce_requant/<impl>/<intB>x<n>/<size>       the n packed inputs it reads
//   dequantize_sum/<impl>/<intB>x<n>/<size>       the same
//   memcpy/<bytes>                                memcpy of exactly that many bytes
// so that quantize and dequantize of one tensor compare with a memcpy of that
// tensor, and the fused reduce with a memcpy of what it receives. intB is
// int8, int4 or int2 at its default block; int2@64 is int2 at int4's block.
// Every row also counts the tensor's elements (items_per_second).
//
// At the end a summary pairs each kernel with its memcpy (median over
// --benchmark_repetitions when given) and prints the ratio; the target for
// quantize and dequantize is >= 0.8. A second one pairs each int2 row with
// its int4 row and prints int2 / int4 in elements per second (the target is
// >= 0.7; issue 45). Pairing is by label: a benchmark whose
// label is "vs=<name>" is compared with the benchmark called <name>, so the
// GPU benchmarks (bench_kernels_gpu.cu, same binary) can join the summary
// with their own baseline (a device-to-device copy).
//
// Every CPU implementation runs (avx512 and avx2 where the CPU has them, and
// scalar): filter with --benchmark_filter, e.g. '/avx512/|memcpy'.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_names.h"
#include "names.h"
#include "quant_kernels/quant_impl.h"
#include "quant_kernels/zpp_half.h"
#include "quant_kernels/zpp_quant.h"

namespace {

using benchnames::RotOrder;
using benchnames::RotSuffix;
using benchnames::SizeName;

// Buffers live for the whole run (benchmark functions are called several
// times while Google Benchmark sizes its iteration counts): filled once,
// pages already touched when timing starts.
struct Buffer {
  explicit Buffer(size_t n)
      : bytes(n), data(static_cast<unsigned char*>(std::aligned_alloc(64, Round(n)))) {
    if (!data) {
      std::fprintf(stderr, "zpp-bench-kernels: out of memory (%zu bytes)\n", n);
      std::exit(1);
    }
    std::memset(data, 0, Round(n));
  }
  ~Buffer() { std::free(data); }
  static size_t Round(size_t n) { return (n + 63) / 64 * 64; }
  size_t bytes;
  unsigned char* data;
};

std::map<std::string, std::unique_ptr<Buffer>> gBuffers;

Buffer* GetBuffer(const std::string& key, size_t bytes) {
  auto& slot = gBuffers[key];
  if (!slot) slot.reset(new Buffer(bytes));
  return slot.get();
}

size_t TypeSize(zppDataType_t t) { return t == zppFloat32 ? 4 : 2; }
const char* TypeName(zppDataType_t t) { return zppDtypeShortName(t); }
int DefaultBlock(int bits) { return zppQuantDefaultBlock(bits); }

// A row's width part: int8, int4, int2 at their default blocks; int2@64
// at another block.
std::string WidthName(int bits, int block) {
  std::string s = "int" + std::to_string(bits);
  return block == DefaultBlock(bits) ? s : s + "@" + std::to_string(block);
}

// A tensor of count elements of dtype, weight-like (normal, std 0.02).
Buffer* Tensor(zppDataType_t dtype, size_t count) {
  std::string key = std::string("tensor/") + TypeName(dtype) + "/" + std::to_string(count);
  bool fresh = gBuffers.find(key) == gBuffers.end();
  Buffer* b = GetBuffer(key, count * TypeSize(dtype));
  if (fresh) {
    std::mt19937_64 rng(count * 31 + dtype);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (size_t i = 0; i < count; i++) {
      float v = normal(rng);
      if (dtype == zppFloat32)
        std::memcpy(b->data + 4 * i, &v, 4);
      else {
        uint16_t h = dtype == zppFloat16 ? zppFloatToHalf(v) : zppFloatToBf16(v);
        std::memcpy(b->data + 2 * i, &h, 2);
      }
    }
  }
  return b;
}

// The packed form of Tensor(dtype, count).
Buffer* Packed(zppDataType_t dtype, size_t count, int bits, int block) {
  std::string key = std::string("packed/") + TypeName(dtype) + "/" + std::to_string(count) + "/" +
                    std::to_string(bits) + "/" + std::to_string(block);
  bool fresh = gBuffers.find(key) == gBuffers.end();
  Buffer* b = GetBuffer(key, zppQuantPackedSize(count, bits, block));
  if (fresh &&
      zppQuantize(Tensor(dtype, count)->data, dtype, count, bits, block, b->data) != zppSuccess) {
    std::fprintf(stderr, "zpp-bench-kernels: quantize failed while preparing inputs\n");
    std::exit(1);
  }
  return b;
}

// The rotated packed form of Tensor(dtype, count) (zppQuantizeEx, ZPP_QUANT_ROTATE).
Buffer* RotPacked(zppDataType_t dtype, size_t count, int bits, int block) {
  std::string key = std::string("rpacked/") + TypeName(dtype) + "/" + std::to_string(count) + "/" +
                    std::to_string(bits) + "/" + std::to_string(block);
  bool fresh = gBuffers.find(key) == gBuffers.end();
  Buffer* b = GetBuffer(key, zppQuantPackedSize(count, bits, block));
  if (fresh && zppQuantizeEx(Tensor(dtype, count)->data, dtype, count, bits, block, ZPP_QUANT_ROTATE,
                             b->data) != zppSuccess) {
    std::fprintf(stderr, "zpp-bench-kernels: rotated quantize failed while preparing inputs\n");
    std::exit(1);
  }
  return b;
}

bool Select(benchmark::State& state, const char* impl) {
  if (zppQuantImplSelect(impl) != zppSuccess) {
    state.SkipWithError("implementation not available");
    return false;
  }
  return true;
}

// The rotated kernels `impl`, beside the plain codecs of that name where
// they run, else the best plain ones (the rotated AVX-512 kernels need less
// of the CPU than the plain ones: quant_impl.h).
bool SelectRot(benchmark::State& state, const char* impl) {
  const char* plain = zppQuantImplGet(impl) ? impl : zppQuantImplGet("avx2") ? "avx2" : "scalar";
  if (zppQuantImplSelect(plain) != zppSuccess || zppQuantRotImplSelect(impl) != zppSuccess) {
    state.SkipWithError("implementation not available");
    return false;
  }
  return true;
}

bool RotRuns(const char* impl) {
  const char* was = zppQuantRotImplName();
  bool runs = zppQuantRotImplSelect(impl) == zppSuccess;
  zppQuantRotImplSelect(was);
  return runs;
}

void SetRates(benchmark::State& state, size_t bytes, size_t packedBytes, const std::string& baseline,
              size_t elements = 0) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  if (elements)
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(elements));
  if (packedBytes)
    state.counters["packed_bytes_per_second"] =
        benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(packedBytes),
                           benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
  if (!baseline.empty()) state.SetLabel("vs=" + baseline);
}

std::string MemcpyName(size_t bytes) { return "memcpy/" + SizeName(bytes); }

std::map<size_t, bool> gMemcpyRegistered;

// Registration order, so that the summary reads in a fixed order even when
// --benchmark_enable_random_interleaving shuffles the runs.
std::map<std::string, int> gRegOrder;

benchmark::internal::Benchmark* Register(const std::string& name,
                                         std::function<void(benchmark::State&)> fn) {
  gRegOrder.emplace(name, static_cast<int>(gRegOrder.size()));
  return benchmark::RegisterBenchmark(name.c_str(), fn);
}

void RegisterMemcpy(size_t bytes) {
  if (gMemcpyRegistered[bytes]) return;
  gMemcpyRegistered[bytes] = true;
  Register(MemcpyName(bytes), [bytes](benchmark::State& state) {
    Buffer* src = GetBuffer("memcpy/src/" + std::to_string(bytes), bytes);
    Buffer* dst = GetBuffer("memcpy/dst/" + std::to_string(bytes), bytes);
    std::memset(src->data, 0x3c, bytes);
    for (auto _ : state) {
      std::memcpy(dst->data, src->data, bytes);
      benchmark::DoNotOptimize(dst->data);
      benchmark::ClobberMemory();
    }
    SetRates(state, bytes, 0, "");
  })->UseRealTime();
}

// One codec benchmark's sizes and names: `bytes` of dtype at the default
// block of `bits`, timed by implementation `impl` against a memcpy.
struct CodecCase {
  size_t count;
  int block;
  size_t packedBytes;
  std::string tail, baseline;
};

CodecCase MakeCase(const char* impl, zppDataType_t dtype, int bits, int block, size_t bytes) {
  CodecCase c;
  c.count = bytes / TypeSize(dtype);
  c.block = block;
  c.packedBytes = zppQuantPackedSize(c.count, bits, c.block);
  c.tail =
      std::string(impl) + "/" + TypeName(dtype) + "/" + WidthName(bits, block) + "/" + SizeName(bytes);
  c.baseline = MemcpyName(bytes);
  return c;
}

// The plain codec's rows.
void RegisterPlain(const char* impl, zppDataType_t dtype, int bits, size_t bytes, const CodecCase& c) {
  const size_t count = c.count, packedBytes = c.packedBytes;
  const int block = c.block;
  const std::string tail = c.tail, baseline = c.baseline;
  Register("quantize/" + tail, [=](benchmark::State& state) {
    if (!Select(state, impl)) return;
    Buffer* in = Tensor(dtype, count);
    Buffer* out = GetBuffer("qout/" + std::to_string(packedBytes), packedBytes);
    for (auto _ : state) {
      if (zppQuantize(in->data, dtype, count, bits, block, out->data) != zppSuccess) {
        state.SkipWithError("zppQuantize failed");
        break;
      }
      benchmark::ClobberMemory();
    }
    SetRates(state, bytes, packedBytes, baseline, count);
  })->UseRealTime();
  // The implementation alone, without the front end's escape pass (the
  // scan for blocks that may hold an outlier, quant_escape.c): its cost on
  // ordinary data is the difference to quantize/.
  Register("quantize-noescape/" + tail, [=](benchmark::State& state) {
    if (!Select(state, impl)) return;
    Buffer* in = Tensor(dtype, count);
    Buffer* out = GetBuffer("qout/" + std::to_string(packedBytes), packedBytes);
    for (auto _ : state) {
      zppQuantImplActive()->quantize(in->data, dtype, count, bits, block, out->data, nullptr);
      benchmark::ClobberMemory();
    }
    SetRates(state, bytes, packedBytes, baseline, count);
  })->UseRealTime();
  Register("dequantize-noescape/" + tail, [=](benchmark::State& state) {
    if (!Select(state, impl)) return;
    Buffer* in = Packed(dtype, count, bits, block);
    Buffer* out = GetBuffer("dqout/" + std::to_string(bytes), bytes);
    for (auto _ : state) {
      zppQuantImplActive()->dequantize(in->data, count, bits, block, out->data, dtype);
      benchmark::ClobberMemory();
    }
    SetRates(state, bytes, packedBytes, baseline, count);
  })->UseRealTime();
  Register("dequantize/" + tail, [=](benchmark::State& state) {
    if (!Select(state, impl)) return;
    Buffer* in = Packed(dtype, count, bits, block);
    Buffer* out = GetBuffer("dqout/" + std::to_string(bytes), bytes);
    for (auto _ : state) {
      if (zppDequantize(in->data, count, bits, block, out->data, dtype) != zppSuccess) {
        state.SkipWithError("zppDequantize failed");
        break;
      }
      benchmark::ClobberMemory();
    }
    SetRates(state, bytes, packedBytes, baseline, count);
  })->UseRealTime();
}

// The rotated codec's rows.
void RegisterRotated(const char* impl, zppDataType_t dtype, int bits, size_t bytes,
                     const CodecCase& c) {
  const size_t count = c.count, packedBytes = c.packedBytes;
  const int block = c.block;
  const std::string tail = c.tail, baseline = c.baseline;
  // The rotated codec (docs/codecs.md, "Rotation"), beside the plain one.
  Register("quantize-rotated/" + tail, [=](benchmark::State& state) {
    if (!SelectRot(state, impl)) return;
    Buffer* in = Tensor(dtype, count);
    Buffer* out = GetBuffer("qout/" + std::to_string(packedBytes), packedBytes);
    for (auto _ : state) {
      if (zppQuantizeEx(in->data, dtype, count, bits, block, ZPP_QUANT_ROTATE, out->data) !=
          zppSuccess) {
        state.SkipWithError("zppQuantizeEx failed");
        break;
      }
      benchmark::ClobberMemory();
    }
    SetRates(state, bytes, packedBytes, baseline, count);
  })->UseRealTime();
  Register("dequantize-rotated/" + tail, [=](benchmark::State& state) {
    if (!SelectRot(state, impl)) return;
    Buffer* in = RotPacked(dtype, count, bits, block);
    Buffer* out = GetBuffer("dqout/" + std::to_string(bytes), bytes);
    for (auto _ : state) {
      if (zppDequantizeEx(in->data, count, bits, block, out->data, dtype) != zppSuccess) {
        state.SkipWithError("zppDequantizeEx failed");
        break;
      }
      benchmark::ClobberMemory();
    }
    SetRates(state, bytes, packedBytes, baseline, count);
  })->UseRealTime();
  // qgZ's sender with error feedback (collectives/qgz.c), one pipeline
  // piece at a time as it runs: zppQuantizeExFeedback (the residual added
  // after the rotation, the new one kept there in 8 bits). Beside
  // quantize-rotated/, what error feedback costs.
  Register("quantize-rotated-ef/" + tail, [=](benchmark::State& state) {
    if (!SelectRot(state, impl)) return;
    const size_t piece = 128u << 10;  // a 2 x 2 qgZ's pipeline piece at the default chunk
    Buffer* in = Tensor(dtype, count);
    size_t piecesBytes = 0;  // a segment per piece
    for (size_t at = 0; at < count; at += piece)
      piecesBytes += zppQuantPackedSize(count - at < piece ? count - at : piece, bits, block);
    Buffer* out = GetBuffer("qoutef/" + std::to_string(piecesBytes), piecesBytes);
    const size_t residBytes = zppQuantResidBytes(count);
    Buffer* eA = GetBuffer("residA/" + std::to_string(residBytes), residBytes);
    Buffer* eB = GetBuffer("residB/" + std::to_string(residBytes), residBytes);
    Buffer* scratch = GetBuffer("efscratch", 2 * piece * sizeof(float));
    std::memset(eA->data, 0, residBytes);
    zppQuantResid_t e[2] = {zppQuantResidIn(eA->data, count), zppQuantResidIn(eB->data, count)};
    float* x = reinterpret_cast<float*>(scratch->data);
    int cur = 0;
    for (auto _ : state) {
      size_t at = 0, packedAt = 0;
      for (; at < count; at += piece) {
        size_t len = count - at < piece ? count - at : piece;
        const uint8_t* src = in->data + at * TypeSize(dtype);
        if (zppQuantizeExFeedback(src, dtype, len, bits, block, zppQuantResidAt(e[cur], at),
                                  zppQuantResidAt(e[cur ^ 1], at), out->data + packedAt,
                                  x) != zppSuccess) {
          state.SkipWithError("zppQuantizeExFeedback failed");
          return;
        }
        packedAt += zppQuantPackedSize(len, bits, block);
      }
      cur ^= 1;
      benchmark::ClobberMemory();
    }
    SetRates(state, bytes, packedBytes, baseline, count);
  })->UseRealTime();
}

// Every row of a codec that implementation `impl` runs (plain, rotated or
// both: the rotated AVX-512 kernels need less of the CPU than the plain
// ones).
void RegisterCodec(const char* impl, zppDataType_t dtype, int bits, size_t bytes, int block = 0) {
  const CodecCase c = MakeCase(impl, dtype, bits, block ? block : DefaultBlock(bits), bytes);
  RegisterMemcpy(bytes);
  if (zppQuantImplGet(impl) != nullptr) RegisterPlain(impl, dtype, bits, bytes, c);
  if (RotRuns(impl)) RegisterRotated(impl, dtype, bits, bytes, c);
}

// qgZ's CPU steps over n inputs of `bits` (int4, or int2) of count elements
// each (a bf16 gradient of `bytes` per input): the fused step between the
// hops (sum, requantized to the same width and block) when `requant`, else
// the last one (sum / n written as bf16, an avg). rot: 0 plain inputs
// (zppQuantReduceRequant, zppDequantizeSum), else rotated ones in an order
// (bench_names.h, RotSuffix). block 0: the width's default.
void RegisterReduce(const char* impl, int n, size_t bytes, bool requant, int rot = 0, int bits = 4,
                    int block = 0) {
  size_t count = bytes / 2;
  if (block == 0) block = DefaultBlock(bits);
  size_t seg = zppQuantPackedSize(count, bits, block);
  size_t inBytes = seg * static_cast<size_t>(n);
  RegisterMemcpy(inBytes);
  std::string baseline = MemcpyName(inBytes);
  std::string name = std::string(requant ? "reduce_requant" : "dequantize_sum") + RotSuffix(rot) +
                     impl + "/" + WidthName(bits, block) + "x" + std::to_string(n) + "/" +
                     SizeName(bytes);
  if (rot ? !RotRuns(impl) : zppQuantImplGet(impl) == nullptr) return;
  Register(name, [=](benchmark::State& state) {
    if (!(rot ? SelectRot(state, impl) : Select(state, impl))) return;
    std::string key = std::string(rot ? "rreduce_in/" : "reduce_in/") + std::to_string(count) + "/" +
                      std::to_string(n) + "/" + std::to_string(bits) + "/" + std::to_string(block);
    bool fresh = gBuffers.find(key) == gBuffers.end();
    Buffer* in = GetBuffer(key, inBytes);
    if (fresh) {
      Buffer* one =
          rot ? RotPacked(zppBfloat16, count, bits, block) : Packed(zppBfloat16, count, bits, block);
      for (int k = 0; k < n; k++) std::memcpy(in->data + static_cast<size_t>(k) * seg, one->data, seg);
    }
    Buffer* out =
        GetBuffer(requant ? "reduce_out/" + std::to_string(seg) : "sum_out/" + std::to_string(count),
                  requant ? seg : count * 2);
    const zppQuantSumOrder_t order = RotOrder(rot);
    for (auto _ : state) {
      zppResult_t r;
      if (rot)
        r = requant ? zppQuantReduceRequantOrder(in->data, seg, n, count, bits, block, bits, block,
                                                 ZPP_QUANT_ROTATE, order, out->data)
                    : zppDequantizeSumOrder(in->data, seg, n, count, bits, block, static_cast<float>(n),
                                            out->data, zppBfloat16, order);
      else
        r = requant
                ? zppQuantReduceRequant(in->data, seg, n, count, bits, block, bits, block, out->data)
                : zppDequantizeSum(in->data, seg, n, count, bits, block, static_cast<float>(n),
                                   out->data, zppBfloat16);
      if (r != zppSuccess) {
        state.SkipWithError(requant ? "zppQuantReduceRequant failed" : "zppDequantizeSum failed");
        break;
      }
      benchmark::ClobberMemory();
    }
    SetRates(state, inBytes, 0, baseline, count);
  })->UseRealTime();
}

// Console output as usual, plus the kernel / baseline summary at the end.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      auto it = run.counters.find("bytes_per_second");
      if (it == run.counters.end()) continue;
      std::string name = run.run_name.function_name;
      Entry& e = entries_[name];
      if (e.order < 0) {
        auto reg = gRegOrder.find(name);
        e.order = reg != gRegOrder.end() ? reg->second : 1000000 + static_cast<int>(entries_.size());
      }
      if (run.report_label.rfind("vs=", 0) == 0) e.baseline = run.report_label.substr(3);
      auto items = run.counters.find("items_per_second");
      if (run.run_type == Run::RT_Aggregate) {
        if (run.aggregate_name == "median") {
          e.median = it->second.value;
          if (items != run.counters.end()) e.items.median = items->second.value;
        }
      } else {
        e.samples.push_back(it->second.value);
        if (items != run.counters.end()) e.items.samples.push_back(items->second.value);
      }
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::vector<std::pair<int, std::string>> order;
    for (const auto& kv : entries_)
      if (!kv.second.baseline.empty()) order.emplace_back(kv.second.order, kv.first);
    if (order.empty()) return;
    std::sort(order.begin(), order.end());
    std::printf("\nkernel / baseline (bytes_per_second, median of %s; GB = 1e9 B):\n",
                Samples() > 1 ? "repetitions" : "one run: use --benchmark_repetitions for medians");
    std::printf("%-44s %10s %10s %7s\n", "kernel", "GB/s", "base GB/s", "ratio");
    for (const auto& o : order) {
      const Entry& e = entries_[o.second];
      auto b = entries_.find(e.baseline);
      if (b == entries_.end()) {
        std::printf("%-44s %10.2f %10s %7s\n", o.second.c_str(), Value(e) / 1e9, "n/a", "-");
        continue;
      }
      double ratio = Value(e) / Value(b->second);
      bool targeted = o.second.rfind("quantize/", 0) == 0 || o.second.rfind("dequantize/", 0) == 0;
      std::printf("%-44s %10.2f %10.2f %7.2f%s\n", o.second.c_str(), Value(e) / 1e9,
                  Value(b->second) / 1e9, ratio, targeted ? (ratio >= 0.8 ? "" : "  < 0.8") : "");
    }
    PrintInt2Ratios(order);
  }

  // Each int2 row beside the int4 row of the same kernel, dtype and size
  // (int2@64 too: the same block as int4's), in elements per second: the
  // medians, and the best repetition of each (without
  // --benchmark_report_aggregates_only), which on a machine shared with
  // other jobs is the nearer to what each runs at alone.
  void PrintInt2Ratios(const std::vector<std::pair<int, std::string>>& order) {
    bool header = false;
    for (const auto& o : order) {
      size_t at = o.second.find("/int2");
      if (at == std::string::npos) continue;
      size_t end = o.second.find_first_of("x/", at + 1);
      std::string int4 = o.second.substr(0, at) + "/int4" + o.second.substr(end);
      auto b = entries_.find(int4);
      if (b == entries_.end()) continue;
      if (!header) {
        std::printf("\nint2 / int4 (items_per_second: tensor elements; median as above, and best):\n");
        std::printf("%-44s %10s %10s %7s %10s %10s %7s\n", "kernel", "int2 G/s", "int4 G/s", "ratio",
                    "best int2", "best int4", "ratio");
        header = true;
      }
      const Series& i2 = entries_[o.second].items;
      double a = Value(i2), c = Value(b->second.items);
      double ba = Best(i2), bc = Best(b->second.items);
      std::printf("%-44s %10.3f %10.3f %7.2f %10.3f %10.3f %7.2f%s\n", o.second.c_str(), a / 1e9,
                  c / 1e9, a / c, ba / 1e9, bc / 1e9, ba / bc,
                  a / c >= 0.7 && ba / bc >= 0.7 ? "" : "  < 0.7");
    }
  }

 private:
  struct Series {
    double median = std::nan("");
    std::vector<double> samples;
  };
  struct Entry : Series {
    int order = -1;
    std::string baseline;
    Series items;  // items_per_second
  };
  static double Value(const Series& e) {
    if (!std::isnan(e.median)) return e.median;
    std::vector<double> s = e.samples;
    if (s.empty()) return std::nan("");
    std::sort(s.begin(), s.end());
    size_t n = s.size();
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  }
  // The highest of the repetitions (the median when only aggregates came).
  static double Best(const Series& e) {
    if (e.samples.empty()) return Value(e);
    return *std::max_element(e.samples.begin(), e.samples.end());
  }
  size_t Samples() const {
    size_t m = 0;
    for (const auto& kv : entries_)
      m = std::max(m, kv.second.samples.size() + (std::isnan(kv.second.median) ? 0 : 2));
    return m;
  }
  std::map<std::string, Entry> entries_;
};

}  // namespace

int main(int argc, char** argv) {
  const size_t sizes[] = {256u << 10, 4u << 20, 64u << 20};
  const zppDataType_t types[] = {zppFloat32, zppFloat16, zppBfloat16};
  std::vector<const char*> impls;
  if (zppQuantImplGet("avx512") || RotRuns("avx512")) impls.push_back("avx512");
  if (zppQuantImplGet("avx2")) impls.push_back("avx2");
  impls.push_back("scalar");
  for (size_t bytes : sizes)
    for (const char* impl : impls) {
      for (zppDataType_t t : types) {
        for (int bits : {8, 4, 2}) RegisterCodec(impl, t, bits, bytes);
        RegisterCodec(impl, t, 2, bytes, DefaultBlock(4));
      }
      for (int rot = 0; rot < 4; rot++) {
        RegisterReduce(impl, 4, bytes, true, rot);
        if (rot < 3) RegisterReduce(impl, 4, bytes, false, rot);
      }
      for (int block : {DefaultBlock(2), DefaultBlock(4)}) {
        RegisterReduce(impl, 4, bytes, true, 0, 2, block);
        RegisterReduce(impl, 4, bytes, false, 0, 2, block);
      }
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::string names;
  for (const char* impl : impls) names += (names.empty() ? "" : " + ") + std::string(impl);
  std::printf(
      "zpp-bench-kernels: CPU codecs %s (default %s, rotated %s), blocks int8 %d / int4 %d / int2 %d\n",
      names.c_str(), zppQuantImplName(), zppQuantRotImplName(), ZPP_QUANT_DEFAULT_BLOCK_INT8,
      ZPP_QUANT_DEFAULT_BLOCK_INT4, ZPP_QUANT_DEFAULT_BLOCK_INT2);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
