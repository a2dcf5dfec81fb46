/*
 * The codec front end: sizes, segment headers, argument checks and the choice
 * of CPU implementation. Every public function validates everything before it
 * writes anything, so that outputs stay untouched on error, then hands
 * validated arguments to the implementation in use.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "names.h"
#include "params.h"
#include "quant_kernels/quant_impl.h"
#include "quant_kernels/zpp_quant.h"

/* ---- implementation choice -------------------------------------------------- */

static _Atomic(const zppQuantImpl_t*) activeImpl = NULL;
static pthread_once_t implOnce = PTHREAD_ONCE_INIT;

#if defined(ZPP_QUANT_HAVE_AVX2)
static int cpuRunsAvx2(void) {
  /* libgcc's check includes the OS saving YMM state (XGETBV). */
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("popcnt");
}
#endif

#if defined(ZPP_QUANT_HAVE_AVX512)
static int cpuRunsAvx512(void) {
  /* Every extension quant_avx512.c is compiled for; libgcc's avx512 checks
   * include the OS saving the ZMM and mask state (XGETBV). */
  return cpuRunsAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi") &&
         __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("avx512bf16");
}
#endif

#if defined(ZPP_QUANT_HAVE_ROT_AVX512)
static int cpuRunsRotAvx512(void) {
  /* quant_rotate_avx512.c's extensions: a subset of cpuRunsAvx512's. */
  return cpuRunsAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq");
}
#endif

/* The rotated kernels called `name` that this CPU and build run; NULL for
 * "scalar" (the reference) and for what cannot run (*runs = 0). */
static const zppQuantRotImpl_t* rotGet(const char* name, int* runs) {
  *runs = strcmp(name, "scalar") == 0;
#if defined(ZPP_QUANT_HAVE_AVX2)
  if (strcmp(name, "avx2") == 0 && cpuRunsAvx2()) {
    *runs = 1;
    return &zppQuantRotImplAvx2;
  }
#endif
#if defined(ZPP_QUANT_HAVE_ROT_AVX512)
  if (strcmp(name, "avx512") == 0 && cpuRunsRotAvx512()) {
    *runs = 1;
    return &zppQuantRotImplAvx512;
  }
#endif
  return NULL;
}

/* The best rotated kernels this CPU runs. */
static const zppQuantRotImpl_t* rotBest(void) {
  int runs;
  const zppQuantRotImpl_t* r = rotGet("avx512", &runs);
  return r != NULL ? r : rotGet("avx2", &runs);
}

static _Atomic(const zppQuantRotImpl_t*) activeRot = NULL;

const zppQuantImpl_t* zppQuantImplGet(const char* name) {
  if (name == NULL) return NULL;
  if (strcmp(name, "scalar") == 0) return &zppQuantImplScalar;
#if defined(ZPP_QUANT_HAVE_AVX2)
  if (strcmp(name, "avx2") == 0 && cpuRunsAvx2()) return &zppQuantImplAvx2;
#endif
#if defined(ZPP_QUANT_HAVE_AVX512)
  if (strcmp(name, "avx512") == 0 && cpuRunsAvx512()) return &zppQuantImplAvx512;
#endif
  return NULL;
}

/* ZPP_QUANT_IMPL: auto (AVX-512 when the CPU has it, else AVX2 when it has
 * that), avx512, avx2 or scalar. A value we cannot honour is not an error the
 * codecs could return (every codec call would fail), so it is a warning at
 * the default log level naming what is used instead: never a silent
 * fallback. */
static void implInit(void) {
  const char* want = zppEnvGetString("ZPP_QUANT_IMPL");
  const zppQuantImpl_t* avx2 = zppQuantImplGet("avx2");
  const zppQuantImpl_t* avx512 = zppQuantImplGet("avx512");
  const zppQuantImpl_t* best = avx512 ? avx512 : avx2 ? avx2 : &zppQuantImplScalar;
  const zppQuantImpl_t* use = best;
  if (want[0] == '\0' || strcasecmp(want, "auto") == 0) {
    use = best;
  } else if (strcasecmp(want, "scalar") == 0) {
    use = &zppQuantImplScalar;
  } else if (strcasecmp(want, "avx2") == 0) {
    if (avx2 != NULL)
      use = avx2;
    else
      ZPP_WARN(QUANT, "ZPP_QUANT_IMPL=avx2, but %s: using the scalar codecs",
#if defined(ZPP_QUANT_HAVE_AVX2)
               "this CPU lacks AVX2 or F16C"
#else
               "this build has no AVX2 codecs (not an x86-64 compiler with -mavx2 -mf16c)"
#endif
      );
  } else if (strcasecmp(want, "avx512") == 0) {
    if (avx512 != NULL)
      use = avx512;
    else
      ZPP_WARN(QUANT, "ZPP_QUANT_IMPL=avx512, but %s: using %s",
#if defined(ZPP_QUANT_HAVE_AVX512)
               "this CPU lacks one of AVX-512 F/BW/VL/VBMI/VBMI2/BF16, AVX2, F16C",
#else
               "this build has no AVX-512 codecs (not an x86-64 compiler with -mavx512vbmi2 "
               "-mavx512bf16)",
#endif
               best->name);
  } else {
    ZPP_WARN(QUANT, "ZPP_QUANT_IMPL='%s' is not one of auto, avx512, avx2, scalar: using auto (%s)",
             want, best->name);
  }
  /* The rotated kernels: the best where the choice is auto (or avx512, or
   * unknown), else the plain choice's own. */
  int runs;
  const zppQuantRotImpl_t* rot = rotBest();
  if (strcasecmp(want, "scalar") == 0)
    rot = NULL;
  else if (strcasecmp(want, "avx2") == 0)
    rot = rotGet("avx2", &runs);
  ZPP_INFO(QUANT, "CPU codecs: %s, rotated %s", use->name, rot != NULL ? rot->name : "scalar");
  atomic_store(&activeRot, rot);
  atomic_store(&activeImpl, use);
}

const zppQuantImpl_t* zppQuantImplActive(void) {
  pthread_once(&implOnce, implInit);
  return atomic_load(&activeImpl);
}

zppResult_t zppQuantImplSelect(const char* name) {
  pthread_once(&implOnce, implInit);
  if (name == NULL ||
      (strcmp(name, "scalar") != 0 && strcmp(name, "avx2") != 0 && strcmp(name, "avx512") != 0))
    ZPP_FAIL(zppInvalidArgument, QUANT, "unknown codec implementation '%s' (scalar, avx2, avx512)",
             name ? name : "(null)");
  const zppQuantImpl_t* impl = zppQuantImplGet(name);
  if (impl == NULL)
    ZPP_FAIL(zppInvalidUsage, QUANT, "codec implementation '%s' cannot run on this CPU or build", name);
  int runs;
  const zppQuantRotImpl_t* rot = rotGet(name, &runs);
  if (!runs) rot = rotBest(); /* avx512 codecs in a build without the rotated ones */
  atomic_store(&activeRot, rot);
  atomic_store(&activeImpl, impl);
  return zppSuccess;
}

const zppQuantRotImpl_t* zppQuantRotImplActive(void) {
  pthread_once(&implOnce, implInit);
  return atomic_load(&activeRot);
}

const zppQuantRotImpl_t* zppQuantRotImplFor(int bits) {
  const zppQuantRotImpl_t* rot = zppQuantRotImplActive();
  return rot != NULL && zppQuantRotImplHas(rot, bits) ? rot : NULL;
}

const char* zppQuantRotImplName(void) {
  const zppQuantRotImpl_t* rot = zppQuantRotImplActive();
  return rot != NULL ? rot->name : "scalar";
}

zppResult_t zppQuantRotImplSelect(const char* name) {
  pthread_once(&implOnce, implInit);
  if (name == NULL ||
      (strcmp(name, "scalar") != 0 && strcmp(name, "avx2") != 0 && strcmp(name, "avx512") != 0))
    ZPP_FAIL(zppInvalidArgument, QUANT,
             "unknown rotated codec implementation '%s' (scalar, avx2, avx512)",
             name ? name : "(null)");
  int runs;
  const zppQuantRotImpl_t* rot = rotGet(name, &runs);
  if (!runs)
    ZPP_FAIL(zppInvalidUsage, QUANT,
             "rotated codec implementation '%s' cannot run on this CPU or build", name);
  atomic_store(&activeRot, rot);
  return zppSuccess;
}

const char* zppQuantImplName(void) { return zppQuantImplActive()->name; }

/* ---- sizes and headers ----------------------------------------------------------- */

int zppQuantValidParams(int bits, int block) {
  if (bits != 2 && bits != 4 && bits != 8) return 0;
  if (block < ZPP_QUANT_MIN_BLOCK || block > ZPP_QUANT_MAX_BLOCK) return 0;
  return (block & (block - 1)) == 0;
}

void zppQuantAddResidual(const void* in, zppDataType_t dtype, zppQuantResid_t e, size_t n, float* x) {
  zppQuantImplActive()->addResidual(in, dtype, e, n, x);
}

void zppQuantNewResidual(const float* x, const float* y, zppQuantResid_t e, size_t n,
                         zppQuantResid_t out) {
  zppQuantImplActive()->newResidual(x, y, e, n, out);
}

int zppQuantDefaultBlock(int bits) {
  return bits == 8   ? ZPP_QUANT_DEFAULT_BLOCK_INT8
         : bits == 4 ? ZPP_QUANT_DEFAULT_BLOCK_INT4
         : bits == 2 ? ZPP_QUANT_DEFAULT_BLOCK_INT2
                     : 0;
}

size_t zppQuantPackedSize(size_t count, int bits, int block) {
  if (!zppQuantValidParams(bits, block)) return 0;
  /* Counts so large that the size wraps are invalid too (0), not a small
   * buffer that the caller would then overrun. */
  if (count > (SIZE_MAX - 64) / 2) return 0;
  size_t total =
      zppQuantEscOffset(count, bits, block) + ZPP_QUANT_ESC_TABLE_BYTES * zppQuantNumGroups(count);
  return (total + 15) & ~(size_t)15;
}

static void writeHeader(uint8_t* p, size_t count, int bits, int block) {
  uint32_t magic = ZPP_QUANT_MAGIC;
  uint64_t c = (uint64_t)count;
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(magic >> (8 * i));
  p[4] = (uint8_t)bits;
  p[5] = (uint8_t)zppQuantLog2(block);
  p[6] = 0;
  p[7] = 0;
  for (int i = 0; i < 8; i++) p[8 + i] = (uint8_t)(c >> (8 * i));
}

static zppQuantHeader_t readHeader(const uint8_t* p) {
  zppQuantHeader_t h;
  h.magic = 0;
  for (int i = 0; i < 4; i++) h.magic |= (uint32_t)p[i] << (8 * i);
  h.bits = p[4];
  h.blockLog2 = p[5];
  h.reserved = (uint16_t)(p[6] | (p[7] << 8));
  h.count = 0;
  for (int i = 0; i < 8; i++) h.count |= (uint64_t)p[8 + i] << (8 * i);
  return h;
}

static zppResult_t checkParams(const char* fn, int bits, int block) {
  if (!zppQuantValidParams(bits, block))
    ZPP_FAIL(zppInvalidArgument, QUANT,
             "%s: bits %d / block %d invalid (bits 2, 4 or 8, block a power of two in [%d, %d])", fn,
             bits, block, ZPP_QUANT_MIN_BLOCK, ZPP_QUANT_MAX_BLOCK);
  return zppSuccess;
}

static zppResult_t checkDtype(const char* fn, zppDataType_t dtype) {
  if (dtype != zppFloat32 && dtype != zppFloat16 && dtype != zppBfloat16)
    ZPP_FAIL(zppInvalidArgument, QUANT, "%s: data type %d unsupported (fp32, fp16 or bf16)", fn,
             (int)dtype);
  return zppSuccess;
}

static zppResult_t checkCount(const char* fn, size_t count, int bits, int block) {
  if (zppQuantPackedSize(count, bits, block) == 0)
    ZPP_FAIL(zppInvalidArgument, QUANT, "%s: count %zu too large", fn, count);
  return zppSuccess;
}

/* Why a header does not match (count, bits, block), or NULL when it does.
 * The usual cause of a mismatch is ranks configured with different
 * compression settings, or a segment read at the wrong offset. */
static const char* headerMismatch(const uint8_t* p, size_t count, int bits, int block, char* why,
                                  size_t len) {
  zppQuantHeader_t h = readHeader(p);
  if (h.magic == 0x3150515au)
    snprintf(why, len,
             "magic 0x%08x: a version 1 segment (no escapes), expected version 2 (ranks run different "
             "zpp versions?)",
             h.magic);
  else if (h.magic != ZPP_QUANT_MAGIC)
    snprintf(why, len, "magic 0x%08x, expected 0x%08x (not a zpp segment, or read at the wrong offset)",
             h.magic, ZPP_QUANT_MAGIC);
  else if (h.bits != bits)
    snprintf(why, len, "%d bits, expected %d (compression settings differ across ranks?)", h.bits,
             bits);
  else if (h.blockLog2 != zppQuantLog2(block))
    snprintf(why, len, "block 2^%d, expected %d = 2^%d (compression settings differ across ranks?)",
             h.blockLog2, block, zppQuantLog2(block));
  else if (h.reserved & ZPP_QUANT_FLAG_ROTATED)
    snprintf(why, len,
             "a rotated segment (flags bit 1), which only zppDequantizeEx decodes (ranks differ in "
             "the rotate setting?)");
  else if ((h.reserved & ~ZPP_QUANT_FLAG_MARKERS) != 0)
    snprintf(why, len, "flags and reserved field 0x%04x, expected 0 or 0x%04x", h.reserved,
             ZPP_QUANT_FLAG_MARKERS);
  else if (h.count != (uint64_t)count)
    snprintf(why, len, "%llu elements, expected %zu", (unsigned long long)h.count, count);
  else
    return NULL;
  return why;
}

zppResult_t zppQuantCheckHeader(const void* packed, size_t count, int bits, int block) {
  if (packed == NULL) ZPP_FAIL(zppInvalidArgument, QUANT, "zppQuantCheckHeader: packed is NULL");
  ZPPCHECK(checkParams("zppQuantCheckHeader", bits, block));
  char why[160];
  if (headerMismatch((const uint8_t*)packed, count, bits, block, why, sizeof why))
    ZPP_FAIL(zppInvalidUsage, QUANT, "packed segment header: %s", why);
  return zppSuccess;
}

/* n inputs at packed + k * stride: pointers, stride, and every header. */
static zppResult_t checkInputs(const char* fn, const void* packed, size_t stride, int n, size_t count,
                               int bits, int block) {
  if (packed == NULL) ZPP_FAIL(zppInvalidArgument, QUANT, "%s: packed is NULL", fn);
  if (n < 1) ZPP_FAIL(zppInvalidArgument, QUANT, "%s: n = %d inputs, need at least 1", fn, n);
  ZPPCHECK(checkParams(fn, bits, block));
  ZPPCHECK(checkCount(fn, count, bits, block));
  size_t size = zppQuantPackedSize(count, bits, block);
  if (n > 1 && stride < size)
    ZPP_FAIL(zppInvalidArgument, QUANT, "%s: stride %zu is less than one packed segment (%zu bytes)",
             fn, stride, size);
  if (n > 1 && stride > (SIZE_MAX - size) / (size_t)(n - 1))
    ZPP_FAIL(zppInvalidArgument, QUANT, "%s: stride %zu times %d inputs overflows", fn, stride, n);
  for (int k = 0; k < n; k++) {
    char why[160];
    if (headerMismatch((const uint8_t*)packed + (size_t)k * stride, count, bits, block, why,
                       sizeof why))
      ZPP_FAIL(zppInvalidUsage, QUANT, "%s: input %d of %d: packed segment header: %s", fn, k, n, why);
  }
  return zppSuccess;
}

/* Zero bytes between the data and the escape tables, and after the tables. */
static void writePadding(uint8_t* packed, size_t count, int bits, int block) {
  size_t dataEnd = zppQuantDataOffset(count, block) + zppQuantDataBytes(count, bits);
  size_t esc = zppQuantEscOffset(count, bits, block);
  size_t used = esc + ZPP_QUANT_ESC_TABLE_BYTES * zppQuantNumGroups(count);
  memset(packed + dataEnd, 0, esc - dataEnd);
  memset(packed + used, 0, zppQuantPackedSize(count, bits, block) - used);
}

/* Header, the implementation's scales and data, the escapes, padding. */
static void quantizeSegment(const zppQuantImpl_t* impl, const void* in, zppDataType_t dtype,
                            size_t count, int bits, int block, uint8_t* packed) {
  writeHeader(packed, count, bits, block);
  if (count > 0) {
    /* The implementation's hints (quant_impl.h): on the stack up to 4M
     * elements, else on the heap; without them the escape pass scans. */
    uint8_t stackHints[1024];
    size_t ngroups = zppQuantNumGroups(count);
    uint8_t* hints = ngroups <= sizeof stackHints ? stackHints : (uint8_t*)malloc(ngroups);
    impl->quantize(in, dtype, count, bits, block, packed, hints);
    zppQuantEscEncode(in, dtype, count, bits, block, packed, hints);
    if (hints != stackHints) free(hints);
  }
  writePadding(packed, count, bits, block);
}

/* ---- the codecs -------------------------------------------------------------------- */

zppResult_t zppQuantFrame(const char* fn, const void* in, zppDataType_t dtype, size_t count, int bits,
                          int block, void* packed) {
  ZPPCHECK(checkParams(fn, bits, block));
  ZPPCHECK(checkDtype(fn, dtype));
  ZPPCHECK(checkCount(fn, count, bits, block));
  if (packed == NULL) ZPP_FAIL(zppInvalidArgument, QUANT, "%s: packed is NULL", fn);
  if (in == NULL && count > 0)
    ZPP_FAIL(zppInvalidArgument, QUANT, "%s: in is NULL with count %zu", fn, count);
  writeHeader((uint8_t*)packed, count, bits, block);
  writePadding((uint8_t*)packed, count, bits, block);
  return zppSuccess;
}

zppResult_t zppQuantize(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                        void* packed) {
  ZPPCHECK(checkParams("zppQuantize", bits, block));
  ZPPCHECK(checkDtype("zppQuantize", dtype));
  ZPPCHECK(checkCount("zppQuantize", count, bits, block));
  if (packed == NULL) ZPP_FAIL(zppInvalidArgument, QUANT, "zppQuantize: packed is NULL");
  if (in == NULL && count > 0)
    ZPP_FAIL(zppInvalidArgument, QUANT, "zppQuantize: in is NULL with count %zu", count);
  quantizeSegment(zppQuantImplActive(), in, dtype, count, bits, block, (uint8_t*)packed);
  return zppSuccess;
}

zppResult_t zppDequantize(const void* packed, size_t count, int bits, int block, void* out,
                          zppDataType_t dtype) {
  ZPPCHECK(checkDtype("zppDequantize", dtype));
  if (out == NULL && count > 0)
    ZPP_FAIL(zppInvalidArgument, QUANT, "zppDequantize: out is NULL with count %zu", count);
  ZPPCHECK(checkInputs("zppDequantize", packed, 0, 1, count, bits, block));
  if (count > 0) {
    zppQuantImplActive()->dequantize((const uint8_t*)packed, count, bits, block, out, dtype);
    zppQuantEscDequantize((const uint8_t*)packed, count, bits, block, out, dtype);
  }
  return zppSuccess;
}

zppResult_t zppDequantizeAccumulate(const void* packed, size_t stride, int n, size_t count, int bits,
                                    int block, float* acc, int accumulate) {
  if (acc == NULL && count > 0)
    ZPP_FAIL(zppInvalidArgument, QUANT, "zppDequantizeAccumulate: acc is NULL with count %zu", count);
  ZPPCHECK(checkInputs("zppDequantizeAccumulate", packed, stride, n, count, bits, block));
  if (count > 0) {
    zppQuantImplActive()->accumulate((const uint8_t*)packed, stride, n, count, bits, block, acc,
                                     accumulate);
    zppQuantEscAccumulate((const uint8_t*)packed, stride, n, count, bits, block, acc);
  }
  return zppSuccess;
}

zppResult_t zppDequantizeSum(const void* packed, size_t stride, int n, size_t count, int bits,
                             int block, float divisor, void* out, zppDataType_t dtype) {
  ZPPCHECK(checkDtype("zppDequantizeSum", dtype));
  if (out == NULL && count > 0)
    ZPP_FAIL(zppInvalidArgument, QUANT, "zppDequantizeSum: out is NULL with count %zu", count);
  if (!isfinite(divisor) || divisor == 0.0f)
    ZPP_FAIL(zppInvalidArgument, QUANT, "zppDequantizeSum: divisor %g must be finite and non-zero",
             (double)divisor);
  ZPPCHECK(checkInputs("zppDequantizeSum", packed, stride, n, count, bits, block));
  if (count > 0) {
    zppQuantImplActive()->sum((const uint8_t*)packed, stride, n, count, bits, block, divisor, out,
                              dtype);
    zppQuantEscSum((const uint8_t*)packed, stride, n, count, bits, block, divisor, out, dtype);
  }
  return zppSuccess;
}

zppResult_t zppQuantReduceRequant(const void* packed, size_t stride, int n, size_t count, int bits_in,
                                  int block_in, int bits_out, int block_out, void* packed_out) {
  const char* fn = "zppQuantReduceRequant";
  ZPPCHECK(checkParams(fn, bits_out, block_out));
  if (packed_out == NULL) ZPP_FAIL(zppInvalidArgument, QUANT, "%s: packed_out is NULL", fn);
  ZPPCHECK(checkInputs(fn, packed, stride, n, count, bits_in, block_in));
  ZPPCHECK(checkCount(fn, count, bits_out, block_out));
  /* Blocks are written while later inputs are still read: an output that
   * overlaps the inputs would corrupt them. */
  uintptr_t inLo = (uintptr_t)packed;
  uintptr_t inHi = inLo + (size_t)(n - 1) * stride + zppQuantPackedSize(count, bits_in, block_in);
  uintptr_t outLo = (uintptr_t)packed_out;
  uintptr_t outHi = outLo + zppQuantPackedSize(count, bits_out, block_out);
  if (outLo < inHi && inLo < outHi)
    ZPP_FAIL(zppInvalidArgument, QUANT, "%s: packed_out overlaps the inputs", fn);
  uint8_t* po = (uint8_t*)packed_out;
  writeHeader(po, count, bits_out, block_out);
  if (count > 0) {
    /* The implementation's hints, as in quantizeSegment. */
    uint8_t stackHints[1024];
    size_t ngroups = zppQuantNumGroups(count);
    uint8_t* hints = ngroups <= sizeof stackHints ? stackHints : (uint8_t*)malloc(ngroups);
    zppQuantImplActive()->reduceRequant((const uint8_t*)packed, stride, n, count, bits_in, block_in,
                                        bits_out, block_out, po, hints);
    zppQuantEscRequant((const uint8_t*)packed, stride, n, count, bits_in, block_in, bits_out, block_out,
                       po, hints);
    if (hints != stackHints) free(hints);
  }
  writePadding(po, count, bits_out, block_out);
  return zppSuccess;
}

zppResult_t zppQuantizeReordered(const void* in, zppDataType_t dtype, size_t part_count,
                                 size_t part_stride, int nparts, int local_size, int bits, int block,
                                 void* packed) {
  const char* fn = "zppQuantizeReordered";
  ZPPCHECK(checkParams(fn, bits, block));
  ZPPCHECK(checkDtype(fn, dtype));
  ZPPCHECK(checkCount(fn, part_count, bits, block));
  if (packed == NULL) ZPP_FAIL(zppInvalidArgument, QUANT, "%s: packed is NULL", fn);
  if (in == NULL && part_count > 0)
    ZPP_FAIL(zppInvalidArgument, QUANT, "%s: in is NULL with part_count %zu", fn, part_count);
  if (nparts < 1 || local_size < 1 || nparts % local_size != 0)
    ZPP_FAIL(zppInvalidArgument, QUANT,
             "%s: %d partitions do not split into nodes of %d local ranks (need W = N * L, L >= 1)", fn,
             nparts, local_size);
  if (part_stride < part_count)
    ZPP_FAIL(zppInvalidArgument, QUANT, "%s: part_stride %zu < part_count %zu (partitions overlap)", fn,
             part_stride, part_count);
  if (part_stride > 0 && (size_t)(nparts - 1) > SIZE_MAX / 4 / part_stride)
    ZPP_FAIL(zppInvalidArgument, QUANT, "%s: %d partitions of stride %zu overflow", fn, nparts,
             part_stride);
  const zppQuantImpl_t* impl = zppQuantImplActive();
  size_t esize = zppDtypeSize(dtype);
  size_t segSize = zppQuantPackedSize(part_count, bits, block);
  int nodes = nparts / local_size;
  /* Segment k = j * N + n holds partition p = n * L + j: local rank j's
   * partitions from every node, in node order, contiguous. */
  for (int k = 0; k < nparts; k++) {
    int j = k / nodes, node = k % nodes;
    size_t p = (size_t)node * (size_t)local_size + (size_t)j;
    const uint8_t* src = part_count ? (const uint8_t*)in + p * part_stride * esize : NULL;
    quantizeSegment(impl, src, dtype, part_count, bits, block, (uint8_t*)packed + (size_t)k * segSize);
  }
  return zppSuccess;
}
