#include "params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"

/* Keep sorted by subsystem, then name. */
static const zppParamInfo_t paramTable[] = {
    /* logging */
    {"ZPP_DEBUG", ZPP_PARAM_STRING, "WARN", "log level: NONE, ERROR, WARN, INFO, DEBUG or TRACE"},
    {"ZPP_DEBUG_SUBSYS", ZPP_PARAM_STRING, "ALL",
     "subsystems to log, comma separated (INIT,QUANT,BOOT,TOPO,NET,COLL,CUDA,ENV,PERF); ^ excludes"},
    {"ZPP_DEBUG_FILE", ZPP_PARAM_STRING, "", "log to this file instead of stderr; %h = host, %p = pid"},
    /* communicator, bootstrap, topology */
    {"ZPP_TIMEOUT", ZPP_PARAM_INT, "300",
     "seconds any wait may take (rendezvous, bootstrap, collectives) before it fails with an "
     "error; zppConfig_t.timeoutSec overrides"},
    {"ZPP_HOSTID", ZPP_PARAM_STRING, "",
     "node identity of this rank (default: the host name); ranks with the same id form one node, "
     "which is how one machine plays several; zppConfig_t.hostId overrides"},
    {"ZPP_TOPO_FILE", ZPP_PARAM_STRING, "",
     "file of \"rank host-id\" lines that replaces every rank's host id at communicator init "
     "(must be the same file on every rank)"},
    {"ZPP_SOCKET_IFNAME", ZPP_PARAM_STRING, "",
     "network interface of the bootstrap (exact name, else first name starting with it); "
     "default: the first non-loopback interface that is up, else loopback"},
    {"ZPP_ROOT", ZPP_PARAM_STRING, "",
     "host:port of the rendezvous root for zppCommInitFromEnv (rank 0 listens there); default "
     "MASTER_ADDR and MASTER_PORT + ZPP_MASTER_PORT_OFFSET"},
    {"ZPP_MASTER_PORT_OFFSET", ZPP_PARAM_INT, "1",
     "zppCommInitFromEnv's root listens on MASTER_PORT plus this, because torch's own store "
     "already listens on MASTER_PORT under torchrun"},
    {"ZPP_SECRET", ZPP_PARAM_STRING, "",
     "shared secret of zppCommInitFromEnv's rendezvous (same on every rank); unset: derived from "
     "the root address and the launcher's job id, which keeps other jobs out but is no secret"},
    /* codecs */
    {"ZPP_QUANT_IMPL", ZPP_PARAM_STRING, "auto",
     "CPU codec implementation: auto (AVX2+F16C when the CPU has them), avx2 or scalar"},
};

static const int paramCount = (int)(sizeof(paramTable) / sizeof(paramTable[0]));

int zppParamCount(void) { return paramCount; }

const zppParamInfo_t* zppParamAt(int index) {
  return (index >= 0 && index < paramCount) ? &paramTable[index] : NULL;
}

static const zppParamInfo_t* findParam(const char* name) {
  for (int i = 0; i < paramCount; i++)
    if (strcmp(paramTable[i].name, name) == 0) return &paramTable[i];
  /* Not through the logger: the logger itself reads parameters. */
  fprintf(stderr, "zpp: internal error: parameter %s is not in the parameter table\n", name);
  return NULL;
}

const char* zppParamGetString(const char* name) {
  const zppParamInfo_t* p = findParam(name);
  const char* env = getenv(name);
  if (env) return env;
  return (p && p->defaultValue) ? p->defaultValue : "";
}

int zppParamIsSet(const char* name) { return getenv(name) != NULL; }

zppResult_t zppParamGetInt(const char* name, int64_t* value) {
  const char* text = zppParamGetString(name);
  char* end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 0);
  if (text[0] == '\0' || end == text || *end != '\0' || errno != 0)
    ZPP_FAIL(zppInvalidArgument, ENV, "%s='%s' is not an integer", name, text);
  *value = (int64_t)v;
  return zppSuccess;
}

zppResult_t zppParamGetBool(const char* name, int* value) {
  const char* text = zppParamGetString(name);
  if (strcmp(text, "1") == 0 || strcasecmp(text, "true") == 0 || strcasecmp(text, "yes") == 0 ||
      strcasecmp(text, "on") == 0) {
    *value = 1;
  } else if (strcmp(text, "0") == 0 || strcasecmp(text, "false") == 0 || strcasecmp(text, "no") == 0 ||
             strcasecmp(text, "off") == 0) {
    *value = 0;
  } else {
    ZPP_FAIL(zppInvalidArgument, ENV, "%s='%s' is not a boolean (0/1, true/false, yes/no, on/off)", name,
             text);
  }
  return zppSuccess;
}
