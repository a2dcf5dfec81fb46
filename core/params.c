#include "params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"

/* Keep sorted by subsystem, then name. */
static const zppEnvInfo_t paramTable[] = {
    /* logging */
    {"ZPP_DEBUG", ZPP_ENV_STRING, "WARN", "log level: NONE, ERROR, WARN, INFO, DEBUG or TRACE"},
    {"ZPP_DEBUG_SUBSYS", ZPP_ENV_STRING, "ALL",
     "subsystems to log, comma separated (INIT,QUANT,BOOT,TOPO,NET,COLL,CUDA,ENV,PERF); ^ excludes"},
    {"ZPP_DEBUG_FILE", ZPP_ENV_STRING, "", "log to this file instead of stderr; %h = host, %p = pid"},
    /* communicator, bootstrap, topology */
    {"ZPP_TIMEOUT", ZPP_ENV_INT, "300",
     "seconds any wait may take (rendezvous, bootstrap, collectives) before it fails with an "
     "error; zppConfig_t.timeoutSec overrides"},
    {"ZPP_COMM_BLOCKING", ZPP_ENV_INT, "1",
     "0: communicators are created in the background (init, split, shrink and grow return "
     "zppInProgress; zppCommGetAsyncError says when ready), as NCCL's config.blocking = 0; "
     "zppConfig_t.blocking overrides"},
    {"ZPP_HOSTID", ZPP_ENV_STRING, "",
     "node identity of this rank (default: SLURMD_NODENAME under Slurm, else the host name); "
     "ranks with the same id form one node, "
     "which is how one machine plays several; zppConfig_t.hostId overrides"},
    {"ZPP_TOPO_FILE", ZPP_ENV_STRING, "",
     "file of \"rank host-id\" lines that replaces every rank's host id at communicator init "
     "(must be the same file on every rank)"},
    {"ZPP_SOCKET_IFNAME", ZPP_ENV_STRING, "",
     "network interface of the bootstrap (exact name, else first name starting with it); "
     "default: the first non-loopback interface that is up, else loopback"},
    {"ZPP_ROOT", ZPP_ENV_STRING, "",
     "host:port of the rendezvous root for zppCommInitFromEnv (rank 0 listens there); default "
     "MASTER_ADDR and MASTER_PORT + ZPP_MASTER_PORT_OFFSET; under srun, what of those is unset "
     "comes from the step's first node and a port derived from SLURM_JOB_ID and SLURM_STEP_ID"},
    {"ZPP_MASTER_PORT_OFFSET", ZPP_ENV_INT, "1",
     "zppCommInitFromEnv's root listens on MASTER_PORT plus this, because torch's own store "
     "already listens on MASTER_PORT under torchrun"},
    {"ZPP_SECRET", ZPP_ENV_STRING, "",
     "shared secret of zppCommInitFromEnv's rendezvous (same random string on every rank); "
     "required unless ZPP_UNAUTHENTICATED_RENDEZVOUS=1"},
    {"ZPP_UNAUTHENTICATED_RENDEZVOUS", ZPP_ENV_BOOL, "0",
     "1 lets zppCommInitFromEnv run without ZPP_SECRET: the secret is then derived from the root "
     "address and the launcher's job id, which keeps other jobs out but not anyone who can reach "
     "the root"},
    /* host transport (UCX) */
    {"ZPP_UCX_NET_DEVICES", ZPP_ENV_STRING, "",
     "network devices UCX may use (its UCX_NET_DEVICES syntax, e.g. eth0 or mlx5_0:1) for this "
     "library's context; default: UCX's choice"},
    {"ZPP_UCX_SHM", ZPP_ENV_BOOL, "1",
     "shared memory between ranks of one node; 0 sends intra-node traffic over the network too. "
     "Between nodes it is always network only"},
    {"ZPP_SHM_SMALL_BYTES", ZPP_ENV_INT, "8192",
     "messages of at most this many bytes between ranks of one node go through zpp's own "
     "shared-memory rings (lower latency than UCX's); 0: through UCX. Off with ZPP_UCX_SHM=0"},
    {"ZPP_UCX_RNDV", ZPP_ENV_BOOL, "0",
     "1 keeps UCX's rendezvous protocol (single-copy cma reads inside a node). Off by default: in "
     "UCX 1.13 a cma read from a peer that died aborts the reading process, so one dead rank "
     "would take its healthy neighbours down (docs/transports.md)"},
    {"ZPP_UCX_CONNECT_ALL", ZPP_ENV_INT, "256",
     "communicators of up to this many ranks make every endpoint at creation, while all nodes are "
     "reachable (UCX 1.13 connects tcp blocking: a connection first made after a link went down "
     "hangs for minutes); larger ones connect on first use"},
    {"ZPP_UCX_BUSY_POLL_US", ZPP_ENV_INT, "-1",
     "microseconds an idle wait polls without yielding the core, before it starts yielding; -1: "
     "20 when the ranks on this machine have a core each (union of their CPU affinities), 0 when "
     "they outnumber the cores"},
    {"ZPP_UCX_SPIN_US", ZPP_ENV_INT, "50",
     "microseconds an idle wait polls (yielding the core each time) before it sleeps on the "
     "worker's event fd"},
    /* plain collectives on host buffers */
    {"ZPP_ALGO_ALLGATHER", ZPP_ENV_STRING, "auto",
     "all-gather algorithm: auto, ring, rd (recursive doubling; Bruck on other than a power of two "
     "ranks) or bruck"},
    {"ZPP_ALGO_REDUCESCATTER", ZPP_ENV_STRING, "auto",
     "reduce-scatter algorithm: auto, ring (pipelined), direct or rd (recursive-doubling all-reduce)"},
    {"ZPP_ALGO_ALLREDUCE", ZPP_ENV_STRING, "auto",
     "all-reduce algorithm: auto, ring (reduce-scatter + all-gather) or rd (recursive doubling)"},
    {"ZPP_ALGO_BROADCAST", ZPP_ENV_STRING, "auto",
     "broadcast algorithm: auto, pipeline (chain), binomial or flat (the root sends to every rank)"},
    {"ZPP_ALGO_REDUCE", ZPP_ENV_STRING, "auto",
     "reduce algorithm: auto, rsg (ring reduce-scatter, then a gather to the root) or binomial"},
    {"ZPP_ALLGATHER_SMALL_BYTES", ZPP_ENV_INT, "16384",
     "all-gathers of fewer bytes (all ranks' data) use Bruck instead of the ring"},
    {"ZPP_REDUCESCATTER_SMALL_BYTES", ZPP_ENV_INT, "16384",
     "reduce-scatters of fewer input bytes send directly instead of around the ring"},
    {"ZPP_ALLREDUCE_SMALL_BYTES", ZPP_ENV_INT, "16384",
     "all-reduces of fewer bytes use recursive doubling instead of the ring"},
    {"ZPP_BROADCAST_SMALL_BYTES", ZPP_ENV_INT, "16384",
     "broadcasts of fewer bytes use a binomial tree instead of the pipelined chain"},
    {"ZPP_REDUCE_SMALL_BYTES", ZPP_ENV_INT, "65536",
     "reduces of fewer bytes use a binomial tree instead of reduce-scatter + gather"},
    {"ZPP_PIPELINE_CHUNK_BYTES", ZPP_ENV_INT, "262144",
     "chunk size of the pipelined algorithms (ring reduce-scatter, chain broadcast); must match "
     "on every rank"},
    {"ZPP_PIPELINE_DEPTH", ZPP_ENV_INT, "4", "chunks (or all-to-all steps) in flight at once"},
    /* codecs */
    {"ZPP_QUANT_IMPL", ZPP_ENV_STRING, "auto",
     "CPU codec implementation: auto (AVX-512 when the CPU has F/BW/VL/VBMI/VBMI2/BF16, else "
     "AVX2+F16C when it has them; the rotated codec's AVX-512 kernels need only F/BW/DQ), avx512, "
     "avx2 or scalar"},
    /* ZeRO++ compression (lib/compress_settings.c; zppConfig_t fields override) */
    {"ZPP_QWZ_BITS", ZPP_ENV_INT, "0",
     "zppAllGather of fp32/fp16/bf16 runs as qwZ with 8 or 4 bits; 0 keeps it plain; "
     "zppConfig_t.qwzBits overrides"},
    {"ZPP_QGZ_BITS", ZPP_ENV_INT, "0",
     "zppReduceScatter (sum, avg) of fp32/fp16/bf16 runs as qgZ with 4, 8 or 2 bits (2: with "
     "error feedback, ZPP_QGZ_ERROR_FEEDBACK); 0 keeps it plain; zppConfig_t.qgzBits overrides"},
    {"ZPP_QGZ_ERROR_FEEDBACK", ZPP_ENV_INT, "0",
     "1: qgZ keeps what each quantization dropped and adds it to the next step's gradient; needs a "
     "residual handle per gradient (zppGradCreate, torch_zpp.fsdp.error_feedback): qgZ calls without "
     "one fail; must match on every rank; zppConfig_t.qgzErrorFeedback overrides"},
    {"ZPP_QUANT_BLOCK", ZPP_ENV_INT, "0",
     "elements per quantization scale, a power of two in [32, 4096]; 0: 256 for int8, 64 for int4, "
     "256 for int2; "
     "zppConfig_t.quantBlock overrides"},
    {"ZPP_QUANT_ROTATE", ZPP_ENV_INT, "0",
     "1: qwZ, hpZ's secondary copy and qgZ rotate each block (random signs, Walsh-Hadamard) before "
     "quantizing, which spreads outliers (docs/codecs.md, Rotation); 0: plain blocks; must match on "
     "every rank; zppConfig_t.quantRotate overrides"},
    {"ZPP_COMPRESS_MIN_BYTES", ZPP_ENV_INT, "1048576",
     "plain calls moving fewer bytes (all ranks' data) stay uncompressed, where latency beats "
     "bandwidth; zppConfig_t.compressMinBytes overrides"},
    {"ZPP_HPZ_GROUP", ZPP_ENV_INT, "0",
     "ranks of an hpZ group (sharing one copy of the secondary partition); 0: the node; must "
     "divide every node's rank count; zppConfig_t.hpzGroupSize overrides"},
    /* fault injection for tests and zpp-health (lib/fault.c; off by default) */
    {"ZPP_FAULT", ZPP_ENV_STRING, "",
     "make a rank misbehave on purpose (empty: off): KIND[:OPT,...][;...], KIND slow "
     "(rate=200mbit and/or delay_us=N per message), corrupt (flips a bit in every message sent), "
     "hang (the sending thread stops for good) or die (SIGKILL); OPT rank=R (launcher rank: RANK, "
     "OMPI_COMM_WORLD_RANK, PMI_RANK; omitted: every rank), after=N (from the N-th message), "
     "prob=P (a fraction of the collectives), seed=S (fixed draws). See docs/zpp-health.md"},
};

static const int paramCount = (int)(sizeof(paramTable) / sizeof(paramTable[0]));

int zppEnvCount(void) { return paramCount; }

const zppEnvInfo_t* zppEnvAt(int index) {
  return (index >= 0 && index < paramCount) ? &paramTable[index] : NULL;
}

static const zppEnvInfo_t* findParam(const char* name) {
  for (int i = 0; i < paramCount; i++)
    if (strcmp(paramTable[i].name, name) == 0) return &paramTable[i];
  /* Not through the logger: the logger itself reads parameters. */
  fprintf(stderr, "zpp: internal error: parameter %s is not in the parameter table\n", name);
  return NULL;
}

const char* zppEnvGetString(const char* name) {
  const zppEnvInfo_t* p = findParam(name);
  const char* env = getenv(name);
  if (env) return env;
  return (p && p->defaultValue) ? p->defaultValue : "";
}

int zppEnvIsSet(const char* name) { return getenv(name) != NULL; }

zppResult_t zppEnvGetInt(const char* name, int64_t* value) {
  const char* text = zppEnvGetString(name);
  char* end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 0);
  if (text[0] == '\0' || end == text || *end != '\0' || errno != 0)
    ZPP_FAIL(zppInvalidArgument, ENV, "%s='%s' is not an integer", name, text);
  *value = (int64_t)v;
  return zppSuccess;
}

zppResult_t zppEnvGetBool(const char* name, int* value) {
  const char* text = zppEnvGetString(name);
  if (strcmp(text, "1") == 0 || strcasecmp(text, "true") == 0 || strcasecmp(text, "yes") == 0 ||
      strcasecmp(text, "on") == 0) {
    *value = 1;
  } else if (strcmp(text, "0") == 0 || strcasecmp(text, "false") == 0 || strcasecmp(text, "no") == 0 ||
             strcasecmp(text, "off") == 0) {
    *value = 0;
  } else {
    ZPP_FAIL(zppInvalidArgument, ENV, "%s='%s' is not a boolean (0/1, true/false, yes/no, on/off)",
             name, text);
  }
  return zppSuccess;
}
