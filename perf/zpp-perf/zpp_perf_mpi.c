/*
 * MPI for zpp-perf: the mpirun launch (MPI_Init, the unique id by
 * MPI_Bcast) and the --baseline mpi rows: the same operation, on the same
 * host buffers and the same verifiable input, through MPI_Allgather,
 * MPI_Reduce_scatter_block, MPI_Allreduce, MPI_Alltoall, MPI_Bcast,
 * MPI_Reduce, MPI_Gather, MPI_Scatter, MPI_Alltoallv and
 * (sendrecv) MPI_Irecv + MPI_Send + MPI_Wait with the pair partner,
 * timed and checked exactly like ours, in the rounds that alternate with
 * ours (prepare, time per round, finish: zpp_perf.h).
 *
 * Where MPI has no equivalent the baseline does what a user of MPI would:
 *   - fp16 and bf16 reductions: user-defined ops (MPI has no 16-bit float
 *     types), which are slower than MPI's built-in ones;
 *   - avg: MPI_SUM, then a division of the output on every rank, inside the
 *     timed call;
 *   - broadcast: MPI_Bcast is in place; the root's output is filled from its
 *     input once, outside the timed loop, since it never changes.
 * Counts above INT_MAX (MPI's int counts) leave the row without a baseline.
 */
#include "zpp_perf.h"
#include "zpp_build_config.h"

#if ZPP_HAVE_MPI
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "quant_kernels/zpp_half.h"

int zppPerfMpiAvailable(void) { return 1; }

int zppPerfMpiLaunched(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMIX_RANK") != NULL ||
         getenv("PMI_SIZE") != NULL;
}

int zppPerfMpiInit(int* argc, char*** argv) {
  if (MPI_Init(argc, argv) != MPI_SUCCESS) {
    fprintf(stderr, "zpp-perf: MPI_Init failed\n");
    return -1;
  }
  /* Errors come back as codes, so the tool reports them and exits cleanly. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return 0;
}

static MPI_Op zppPerfMpiOps[2][4]; /* [fp16, bf16][sum, prod, max, min] */
static int zppPerfMpiOpMade[2][4];

void zppPerfMpiFinalize(void) {
  for (int t = 0; t < 2; t++)
    for (int o = 0; o < 4; o++)
      if (zppPerfMpiOpMade[t][o]) {
        MPI_Op_free(&zppPerfMpiOps[t][o]);
        zppPerfMpiOpMade[t][o] = 0;
      }
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

int zppPerfMpiRankSize(int* rank, int* size) {
  if (MPI_Comm_rank(MPI_COMM_WORLD, rank) != MPI_SUCCESS ||
      MPI_Comm_size(MPI_COMM_WORLD, size) != MPI_SUCCESS) {
    fprintf(stderr, "zpp-perf: MPI_Comm_rank/size failed\n");
    return -1;
  }
  return 0;
}

int zppPerfMpiBcastId(zppUniqueId* id, int ok) {
  unsigned char buf[sizeof *id + 1];
  memcpy(buf, id, sizeof *id);
  buf[sizeof *id] = (unsigned char)(ok ? 1 : 0);
  if (MPI_Bcast(buf, (int)sizeof buf, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) return 0;
  memcpy(id, buf, sizeof *id);
  return buf[sizeof *id] != 0;
}

/* fp16/bf16 reductions: widen to fp32, combine, round back (RNE), which is
 * what a careful MPI user writes. */
#define ZPP_PERF_MPI_OP(name, toF, fromF, expr)                         \
  static void name(void* in, void* inout, int* len, MPI_Datatype* dt) { \
    (void)dt;                                                           \
    const uint16_t* x = in;                                             \
    uint16_t* y = inout;                                                \
    for (int i = 0; i < *len; i++) {                                    \
      float a = toF(x[i]), b = toF(y[i]);                               \
      y[i] = fromF(expr);                                               \
    }                                                                   \
  }
ZPP_PERF_MPI_OP(zppPerfHalfSum, zppHalfToFloat, zppFloatToHalf, a + b)
ZPP_PERF_MPI_OP(zppPerfHalfProd, zppHalfToFloat, zppFloatToHalf, a* b)
ZPP_PERF_MPI_OP(zppPerfHalfMax, zppHalfToFloat, zppFloatToHalf, a > b ? a : b)
ZPP_PERF_MPI_OP(zppPerfHalfMin, zppHalfToFloat, zppFloatToHalf, a < b ? a : b)
ZPP_PERF_MPI_OP(zppPerfBf16Sum, zppBf16ToFloat, zppFloatToBf16, a + b)
ZPP_PERF_MPI_OP(zppPerfBf16Prod, zppBf16ToFloat, zppFloatToBf16, a* b)
ZPP_PERF_MPI_OP(zppPerfBf16Max, zppBf16ToFloat, zppFloatToBf16, a > b ? a : b)
ZPP_PERF_MPI_OP(zppPerfBf16Min, zppBf16ToFloat, zppFloatToBf16, a < b ? a : b)

static MPI_Datatype zppPerfMpiType(zppDataType_t t) {
  switch (t) {
    case zppInt8: return MPI_INT8_T;
    case zppUint8: return MPI_UINT8_T;
    case zppInt32: return MPI_INT32_T;
    case zppUint32: return MPI_UINT32_T;
    case zppInt64: return MPI_INT64_T;
    case zppUint64: return MPI_UINT64_T;
    case zppFloat32: return MPI_FLOAT;
    case zppFloat64: return MPI_DOUBLE;
    default: return MPI_UINT16_T; /* fp16, bf16: moved as 16-bit words */
  }
}

static MPI_Op zppPerfMpiOp(zppDataType_t t, zppRedOp_t op) {
  int o = op == zppProd ? 1 : op == zppMax ? 2 : op == zppMin ? 3 : 0; /* avg: sum */
  if (t == zppFloat16 || t == zppBfloat16) {
    static MPI_User_function* const fns[2][4] = {
        {zppPerfHalfSum, zppPerfHalfProd, zppPerfHalfMax, zppPerfHalfMin},
        {zppPerfBf16Sum, zppPerfBf16Prod, zppPerfBf16Max, zppPerfBf16Min}};
    int k = t == zppBfloat16;
    if (!zppPerfMpiOpMade[k][o]) {
      MPI_Op_create(fns[k][o], 1, &zppPerfMpiOps[k][o]);
      zppPerfMpiOpMade[k][o] = 1;
    }
    return zppPerfMpiOps[k][o];
  }
  static const MPI_Op builtin[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
  return builtin[o];
}

/* avg = sum / n, in the element type (integers truncate, like C). */
static void zppPerfMpiDivide(const zppPerfCall_t* c, size_t count) {
  for (size_t i = 0; i < count; i++) {
    double v = zppPerfLoad(c->dtype, c->recv, i);
    if (zppPerfTypeIsFloat(c->dtype))
      v /= c->nranks;
    else
      v = trunc(v / c->nranks);
    zppPerfStore(c->dtype, c->recv, i, v);
  }
}

/* MPI_Alltoallv with perf_check.h's uneven parts (int counts: the row has
 * no baseline past INT_MAX elements, see prepare). */
static int zppPerfMpiAlltoallv(const zppPerfCall_t* c, MPI_Datatype dt) {
  const int n = c->nranks;
  int* v = malloc(4 * (size_t)n * sizeof(int));
  if (v == NULL) return MPI_ERR_NO_MEM;
  for (int p = 0; p < n; p++) {
    v[p] = (int)zppPerfVCount(c->apiCount, c->rank, p, n);
    v[n + p] = (int)zppPerfVSendDispl(c->apiCount, c->rank, p, n);
    v[2 * n + p] = (int)zppPerfVCount(c->apiCount, p, c->rank, n);
    v[3 * n + p] = (int)zppPerfVRecvDispl(c->apiCount, p, c->rank, n);
  }
  int rc = MPI_Alltoallv(c->send, v, v + n, dt, c->recv, v + 2 * n, v + 3 * n, dt, MPI_COMM_WORLD);
  free(v);
  return rc;
}

static int zppPerfMpiOnce(const zppPerfCall_t* c) {
  MPI_Datatype dt = zppPerfMpiType(c->dtype);
  int n = (int)c->apiCount;
  int rc;
  switch (c->coll) {
    case ZPP_PERF_ALLGATHER: return MPI_Allgather(c->send, n, dt, c->recv, n, dt, MPI_COMM_WORLD);
    case ZPP_PERF_REDUCESCATTER:
      rc = MPI_Reduce_scatter_block(c->send, c->recv, n, dt, zppPerfMpiOp(c->dtype, c->redop),
                                    MPI_COMM_WORLD);
      if (rc == MPI_SUCCESS && c->redop == zppAvg) zppPerfMpiDivide(c, c->apiCount);
      return rc;
    case ZPP_PERF_ALLREDUCE:
      rc = MPI_Allreduce(c->send, c->recv, n, dt, zppPerfMpiOp(c->dtype, c->redop), MPI_COMM_WORLD);
      if (rc == MPI_SUCCESS && c->redop == zppAvg) zppPerfMpiDivide(c, c->apiCount);
      return rc;
    case ZPP_PERF_ALLTOALL: return MPI_Alltoall(c->send, n, dt, c->recv, n, dt, MPI_COMM_WORLD);
    case ZPP_PERF_BROADCAST: return MPI_Bcast(c->recv, n, dt, c->root, MPI_COMM_WORLD);
    case ZPP_PERF_REDUCE:
      rc = MPI_Reduce(c->send, c->recv, n, dt, zppPerfMpiOp(c->dtype, c->redop), c->root,
                      MPI_COMM_WORLD);
      if (rc == MPI_SUCCESS && c->redop == zppAvg && c->rank == c->root)
        zppPerfMpiDivide(c, c->apiCount);
      return rc;
    case ZPP_PERF_GATHER: return MPI_Gather(c->send, n, dt, c->recv, n, dt, c->root, MPI_COMM_WORLD);
    case ZPP_PERF_SCATTER: return MPI_Scatter(c->send, n, dt, c->recv, n, dt, c->root, MPI_COMM_WORLD);
    case ZPP_PERF_ALLTOALLV: return zppPerfMpiAlltoallv(c, dt);
    case ZPP_PERF_SENDRECV: {
      /* MPI_Send and MPI_Recv as a pair exchange is written without
       * deadlock: the receive posted first, then the blocking send. */
      int peer = zppPerfPartner(c->rank, c->nranks);
      MPI_Request req;
      rc = MPI_Irecv(c->recv, n, dt, peer, 7, MPI_COMM_WORLD, &req);
      if (rc != MPI_SUCCESS) return rc;
      rc = MPI_Send(c->send, n, dt, peer, 7, MPI_COMM_WORLD);
      int rw = MPI_Wait(&req, MPI_STATUS_IGNORE);
      return rc != MPI_SUCCESS ? rc : rw;
    }
    default: return MPI_ERR_OTHER;
  }
}

static zppResult_t zppPerfMpiFail(const zppPerfCall_t* c, const char* what, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fprintf(stderr, "zpp-perf: rank %d: MPI baseline %s failed: %s\n", c->rank, what, msg);
  return zppRemoteError;
}

/* The root's output is its input before every MPI_Bcast (in place). */
static void zppPerfMpiBcastInput(const zppPerfCall_t* c, const zppPerfCounts_t* counts) {
  if (c->coll == ZPP_PERF_BROADCAST && c->rank == c->root)
    memcpy(c->recv, c->send, counts->recvCount * zppTypeSize(c->dtype));
}

zppResult_t zppPerfMpiPrepare(zppPerfBaseRow_t* row) {
  const zppPerfArgs_t* a = row->args;
  const zppPerfCall_t* c = row->call;
  const zppPerfCounts_t* counts = row->counts;
  zppPerfCheckResult_t none = {0, 0.0, 0.0, -1};
  row->present = 0;
  row->chk = none;
  if (counts->sendCount > INT_MAX || counts->recvCount > INT_MAX) return zppSuccess;
  zppPerfCheckSpec_t spec = {c->coll, c->dtype, c->redop, c->nranks, c->rank, c->root, c->apiCount};
  int rc;
  if (a->check) {
    zppPerfFillSentinel(c->dtype, c->recv, counts->recvCount);
    zppPerfMpiBcastInput(c, counts);
    if ((rc = zppPerfMpiOnce(c)) != MPI_SUCCESS) return zppPerfMpiFail(c, zppPerfCollName(c->coll), rc);
    zppPerfCheckRecv(&spec, c->recv, counts->recvCount, NULL, NULL, &row->chk);
  }
  zppPerfMpiBcastInput(c, counts);
  zppPerfCall_t at = *c;
  for (int i = 0; i < a->warmup; i++) {
    zppPerfCallAt(&at, i);
    if ((rc = zppPerfMpiOnce(&at)) != MPI_SUCCESS)
      return zppPerfMpiFail(c, zppPerfCollName(c->coll), rc);
  }
  row->present = 1;
  return zppSuccess;
}

zppResult_t zppPerfMpiTime(const zppPerfBaseRow_t* row, double* times, int n) {
  const zppPerfCall_t* c = row->call;
  /* Our own broadcast rounds in between write the root's buffer too: the
   * same data when ours is right, but the baseline must not rely on it. */
  zppPerfMpiBcastInput(c, row->counts);
  /* Every rank done with our round, and our traffic out of the links,
   * before MPI's first call is timed (see zppPerfRunRow). */
  int rc0 = MPI_Barrier(MPI_COMM_WORLD);
  if (rc0 != MPI_SUCCESS) return zppPerfMpiFail(c, "barrier between rounds", rc0);
  zppPerfCall_t at = *c;
  for (int i = 0; i < n; i++) {
    zppPerfCallAt(&at, i);
    double t0 = MPI_Wtime();
    int rc = zppPerfMpiOnce(&at);
    times[i] = MPI_Wtime() - t0;
    if (rc != MPI_SUCCESS) return zppPerfMpiFail(c, zppPerfCollName(c->coll), rc);
  }
  return zppSuccess;
}

zppResult_t zppPerfMpiFinish(const zppPerfBaseRow_t* row, const double* times, int n,
                             zppPerfBaseResult_t* base) {
  const zppPerfCall_t* c = row->call;
  memset(base, 0, sizeof *base);
  double* tmax = malloc((size_t)n * sizeof *tmax);
  if (tmax == NULL) {
    fprintf(stderr, "zpp-perf: out of memory\n");
    return zppSystemError;
  }
  double errIn = row->chk.maxError, errOut = 0, wrongIn = (double)row->chk.wrong, wrongOut = 0;
  int rc;
  if ((rc = MPI_Allreduce(times, tmax, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD)) != MPI_SUCCESS ||
      (rc = MPI_Allreduce(&errIn, &errOut, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD)) != MPI_SUCCESS ||
      (rc = MPI_Allreduce(&wrongIn, &wrongOut, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD)) !=
          MPI_SUCCESS) {
    free(tmax);
    return zppPerfMpiFail(c, "reducing its timings", rc);
  }
  zppPerfBaseFill(row, "mpi", tmax, n, wrongOut, errOut, base);
  free(tmax);
  return zppSuccess;
}

#else /* !ZPP_HAVE_MPI: the launch falls back to the environment */

int zppPerfMpiAvailable(void) { return 0; }
int zppPerfMpiLaunched(void) { return 0; }
int zppPerfMpiInit(int* argc, char*** argv) { return -1; }
void zppPerfMpiFinalize(void) {}
int zppPerfMpiBcastId(zppUniqueId* id, int ok) { return 0; }
int zppPerfMpiRankSize(int* rank, int* size) { return -1; }
zppResult_t zppPerfMpiPrepare(zppPerfBaseRow_t* row) { return zppInvalidUsage; }
zppResult_t zppPerfMpiTime(const zppPerfBaseRow_t* row, double* times, int n) {
  return zppInvalidUsage;
}
zppResult_t zppPerfMpiFinish(const zppPerfBaseRow_t* row, const double* times, int n,
                             zppPerfBaseResult_t* base) {
  return zppInvalidUsage;
}

#endif
