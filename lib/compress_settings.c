/* ZeRO++ compression settings of a communicator; see compress_settings.h. */
#include "lib/compress_settings.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "params.h"
#include "lib/comm.h"
#include "quant_kernels/zpp_quant.h"

static const char* envNames[ZPP_COMPRESS_NFIELDS] = {
    "ZPP_QWZ_BITS",  "ZPP_QGZ_BITS",     "ZPP_QUANT_BLOCK",       "ZPP_COMPRESS_MIN_BYTES",
    "ZPP_HPZ_GROUP", "ZPP_QUANT_ROTATE", "ZPP_QGZ_ERROR_FEEDBACK"};

static zppResult_t checkQwzBits(int v, const char* from) {
  ZPP_ARGCHECK(v == 0 || v == 4 || v == 8, "%s: qwzBits=%d: expected 0 (off), 4 or 8%s", from, v,
               v == 2 ? " (2 bits is for gradients: qgzBits, with error feedback)" : "");
  return zppSuccess;
}

static zppResult_t checkQgzBits(int v, const char* from) {
  ZPP_ARGCHECK(v == 0 || v == 2 || v == 4 || v == 8, "%s: qgzBits=%d: expected 0 (off), 2, 4 or 8",
               from, v);
  return zppSuccess;
}

static zppResult_t checkBlock(int v, const char* from) {
  ZPP_ARGCHECK(v == 0 || zppQuantValidParams(8, v),
               "%s: quantBlock=%d: expected 0 (codec default) or a power of two in [%d, %d]", from, v,
               ZPP_QUANT_MIN_BLOCK, ZPP_QUANT_MAX_BLOCK);
  return zppSuccess;
}

/* An int field: the config's value when set, else the environment's, else
 * the default; `from` says which. */
static zppResult_t resolveInt(int configValue, int field, int64_t lo, int64_t hi, int* out,
                              const char** from) {
  if (configValue != ZPP_CONFIG_UNDEF_INT) {
    *out = configValue;
    *from = "config";
    return zppSuccess;
  }
  const char* name = envNames[field];
  int64_t v = 0;
  if (zppEnvIsSet(name)) {
    ZPPCHECK(zppEnvGetInt(name, &v));
    *from = name;
  } else {
    ZPPCHECK(zppEnvGetInt(name, &v)); /* the table's default */
    *from = "default";
  }
  ZPP_ARGCHECK(v >= lo && v <= hi, "%s=%lld out of range [%lld, %lld]", name, (long long)v,
               (long long)lo, (long long)hi);
  *out = (int)v;
  return zppSuccess;
}

zppResult_t zppCompressResolve(const zppConfig_t* config, zppCompressSettings_t* out) {
  zppCompressSettings_t s;
  memset(&s, 0, sizeof(s));
  const int undef = ZPP_CONFIG_UNDEF_INT;
  ZPPCHECK(resolveInt(config ? config->qwzBits : undef, ZPP_COMPRESS_QWZ_BITS, 0, 8, &s.qwzBits,
                      &s.from[ZPP_COMPRESS_QWZ_BITS]));
  ZPPCHECK(checkQwzBits(s.qwzBits, s.from[ZPP_COMPRESS_QWZ_BITS]));
  ZPPCHECK(resolveInt(config ? config->qgzBits : undef, ZPP_COMPRESS_QGZ_BITS, 0, 8, &s.qgzBits,
                      &s.from[ZPP_COMPRESS_QGZ_BITS]));
  ZPPCHECK(checkQgzBits(s.qgzBits, s.from[ZPP_COMPRESS_QGZ_BITS]));
  ZPPCHECK(resolveInt(config ? config->quantBlock : undef, ZPP_COMPRESS_BLOCK, 0, ZPP_QUANT_MAX_BLOCK,
                      &s.quantBlock, &s.from[ZPP_COMPRESS_BLOCK]));
  ZPPCHECK(checkBlock(s.quantBlock, s.from[ZPP_COMPRESS_BLOCK]));
  ZPPCHECK(resolveInt(config ? config->hpzGroupSize : undef, ZPP_COMPRESS_HPZ_GROUP, 0, 1 << 20,
                      &s.hpzGroupSize, &s.from[ZPP_COMPRESS_HPZ_GROUP]));
  ZPP_ARGCHECK(s.hpzGroupSize >= 0, "%s: hpzGroupSize=%d must be 0 (the node) or positive",
               s.from[ZPP_COMPRESS_HPZ_GROUP], s.hpzGroupSize);
  ZPPCHECK(resolveInt(config ? config->quantRotate : undef, ZPP_COMPRESS_ROTATE, 0, 1, &s.quantRotate,
                      &s.from[ZPP_COMPRESS_ROTATE]));
  ZPP_ARGCHECK(s.quantRotate == 0 || s.quantRotate == 1,
               "%s: quantRotate=%d: expected 0 (off) or 1 (on)", s.from[ZPP_COMPRESS_ROTATE],
               s.quantRotate);
  int efConfig = config && ZPP_CONFIG_HAS(config, qgzErrorFeedback) ? config->qgzErrorFeedback : undef;
  ZPPCHECK(resolveInt(efConfig, ZPP_COMPRESS_QGZ_EF, 0, 1, &s.qgzErrorFeedback,
                      &s.from[ZPP_COMPRESS_QGZ_EF]));
  ZPP_ARGCHECK(s.qgzErrorFeedback == 0 || s.qgzErrorFeedback == 1,
               "%s: qgzErrorFeedback=%d: expected 0 (off) or 1 (on)", s.from[ZPP_COMPRESS_QGZ_EF],
               s.qgzErrorFeedback);

  if (config && config->compressMinBytes != ZPP_CONFIG_UNDEF_SIZE) {
    s.compressMinBytes = config->compressMinBytes;
    s.from[ZPP_COMPRESS_MIN_BYTES] = "config";
  } else {
    const char* name = envNames[ZPP_COMPRESS_MIN_BYTES];
    int64_t v = 0;
    ZPPCHECK(zppEnvGetInt(name, &v));
    ZPP_ARGCHECK(v >= 0, "%s=%lld must not be negative", name, (long long)v);
    s.compressMinBytes = (size_t)v;
    s.from[ZPP_COMPRESS_MIN_BYTES] = zppEnvIsSet(name) ? name : "default";
  }
  *out = s;
  return zppSuccess;
}

int zppCompressBlock(const zppCompressSettings_t* s, int bits) {
  if (s->quantBlock > 0) return s->quantBlock;
  return zppQuantDefaultBlock(bits);
}

unsigned zppCompressQuantFlags(const zppCompressSettings_t* s) {
  return s->quantRotate ? ZPP_QUANT_ROTATE : 0u;
}

void zppCompressApply(struct zppComm* comm, const zppCompressSettings_t* s) {
  comm->compress = *s;
  char block[32];
  if (s->quantBlock > 0)
    snprintf(block, sizeof(block), "%d", s->quantBlock);
  else
    snprintf(block, sizeof(block), "int8 %d / int4 %d / int2 %d", ZPP_QUANT_DEFAULT_BLOCK_INT8,
             ZPP_QUANT_DEFAULT_BLOCK_INT4, ZPP_QUANT_DEFAULT_BLOCK_INT2);
  char group[32];
  if (s->hpzGroupSize > 0)
    snprintf(group, sizeof(group), "%d", s->hpzGroupSize);
  else
    snprintf(group, sizeof(group), "node");
  char gather[16] = "plain", reduce[16] = "plain";
  if (s->qwzBits) snprintf(gather, sizeof(gather), "qwZ int%d", s->qwzBits);
  if (s->qgzBits) snprintf(reduce, sizeof(reduce), "qgZ int%d", s->qgzBits);
  ZPP_INFO(INIT,
           "comm %s rank %d: compression: all-gather %s (%s), reduce-scatter %s (%s), block %s "
           "(%s), plain below %zu bytes (%s), hpZ group %s (%s), rotation %s (%s), qgZ error "
           "feedback %s (%s)",
           comm->name, comm->rank, gather, s->from[ZPP_COMPRESS_QWZ_BITS], reduce,
           s->from[ZPP_COMPRESS_QGZ_BITS], block, s->from[ZPP_COMPRESS_BLOCK], s->compressMinBytes,
           s->from[ZPP_COMPRESS_MIN_BYTES], group, s->from[ZPP_COMPRESS_HPZ_GROUP],
           s->quantRotate ? "on" : "off", s->from[ZPP_COMPRESS_ROTATE],
           s->qgzErrorFeedback ? "on" : "off", s->from[ZPP_COMPRESS_QGZ_EF]);
}
