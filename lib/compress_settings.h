/*
 * The communicator's ZeRO++ compression settings: which plain calls are
 * compressed (qwZ on all-gather, qgZ on reduce-scatter), the codec block,
 * the size under which calls stay plain, the hpZ group size, and whether
 * qgZ runs with error feedback.
 * Explicit config beats the environment (ZPP_QWZ_BITS, ZPP_QGZ_BITS,
 * ZPP_QUANT_BLOCK, ZPP_COMPRESS_MIN_BYTES, ZPP_HPZ_GROUP, ZPP_QUANT_ROTATE,
 * ZPP_QGZ_ERROR_FEEDBACK), which beats the
 * defaults (in the parameter table, core/params.c: compression off, so
 * that a trainer that only renamed its NCCL calls stays exact until it asks);
 * the communicator logs at INFO what it applied.
 */
#ifndef ZPP_COMPRESS_SETTINGS_H_
#define ZPP_COMPRESS_SETTINGS_H_

#include <stddef.h>

#include "zpp.h"

struct zppComm;

/* A field a caller's config has (its version's layout reaches past it). */
#define ZPP_CONFIG_HAS(c, field) ((c)->size >= offsetof(zppConfig_t, field) + sizeof((c)->field))

enum {
  ZPP_COMPRESS_QWZ_BITS,
  ZPP_COMPRESS_QGZ_BITS,
  ZPP_COMPRESS_BLOCK,
  ZPP_COMPRESS_MIN_BYTES,
  ZPP_COMPRESS_HPZ_GROUP,
  ZPP_COMPRESS_ROTATE,
  ZPP_COMPRESS_QGZ_EF,
  ZPP_COMPRESS_NFIELDS
};

typedef struct {
  int qwzBits;                            /* 0 (plain zppAllGather), 8 or 4 */
  int qgzBits;                            /* 0 (plain zppReduceScatter), 8, 4 or 2 */
  int quantBlock;                         /* 0: the codec's default for the bits in use */
  size_t compressMinBytes;                /* plain calls moving fewer bytes stay plain */
  int hpzGroupSize;                       /* 0: the node */
  int quantRotate;                        /* 1: rotated blocks (ZPP_QUANT_ROTATE) */
  int qgzErrorFeedback;                   /* 1: qgZ calls need residual handles */
  const char* from[ZPP_COMPRESS_NFIELDS]; /* "config", the variable's name, or "default" */
} zppCompressSettings_t;

/* Validates and resolves (config may be NULL). Nothing is written on error. */
zppResult_t zppCompressResolve(const zppConfig_t* config, zppCompressSettings_t* out);

/* Stores the resolved settings in the communicator and logs them (INFO). */
void zppCompressApply(struct zppComm* comm, const zppCompressSettings_t* s);

/* The block for bits under these settings (quantBlock, else the codec's
 * default for the bits). */
int zppCompressBlock(const zppCompressSettings_t* s, int bits);

/* The codec flags for these settings: ZPP_QUANT_ROTATE when quantRotate. */
unsigned zppCompressQuantFlags(const zppCompressSettings_t* s);

#endif /* ZPP_COMPRESS_SETTINGS_H_ */
