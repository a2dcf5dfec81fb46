/*
 * The choice of CPU implementation: ZPP_QUANT_IMPL is read once, on first
 * use, so each setting runs in a fresh child process. auto (or unset) picks
 * AVX-512 when the CPU (and build) has it, else AVX2 when it has that; scalar
 * always works; avx512 or avx2 where unavailable, or a value we do not know,
 * is a warning naming what is used instead. The rotated kernels follow the
 * choice, except that auto and avx512 take the rotated AVX-512 kernels
 * wherever they run (they need less than the plain AVX-512 codecs).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "quant_testlib.h"

/* Runs zppQuantImplName() and zppQuantRotImplName() in a child with
 * ZPP_QUANT_IMPL = value (NULL: unset); returns the names ("plain rotated"),
 * and stderr in err. */
static void runChild(const char* value, char* name, size_t nameLen, char* err, size_t errLen) {
  int outPipe[2], errPipe[2];
  REQUIRE(pipe(outPipe) == 0 && pipe(errPipe) == 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(outPipe[1], 1);
    dup2(errPipe[1], 2);
    setenv("ZPP_DEBUG", "WARN", 1);
    if (value)
      setenv("ZPP_QUANT_IMPL", value, 1);
    else
      unsetenv("ZPP_QUANT_IMPL");
    /* A codec call works whatever the setting. */
    float x[40], y[40];
    uint8_t seg[128];
    for (int i = 0; i < 40; i++) x[i] = (float)i;
    int ok = zppQuantize(x, zppFloat32, 40, 8, 32, seg) == zppSuccess &&
             zppDequantize(seg, 40, 8, 32, y, zppFloat32) == zppSuccess && y[39] == 39.0f;
    printf("%s %s%s", zppQuantImplName(), zppQuantRotImplName(), ok ? "" : " (codec failed)");
    fflush(stdout);
    _exit(0);
  }
  close(outPipe[1]);
  close(errPipe[1]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ssize_t n = read(outPipe[0], name, nameLen - 1);
  name[n > 0 ? n : 0] = '\0';
  n = read(errPipe[0], err, errLen - 1);
  err[n > 0 ? n : 0] = '\0';
  close(outPipe[0]);
  close(errPipe[0]);
}

int main(void) {
  int haveAvx2 = zppQuantImplGet("avx2") != NULL; /* does not choose anything yet */
  int haveAvx512 = zppQuantImplGet("avx512") != NULL;
  CHECK(!haveAvx512 || haveAvx2); /* the AVX-512 file calls the AVX2 one */
  const char* best = haveAvx512 ? "avx512" : haveAvx2 ? "avx2" : "scalar";
  if (!haveAvx2)
    printf("note: no AVX2+F16C here: avx2 requests must fall back to scalar with a warning\n");
  if (!haveAvx512)
    printf("note: no AVX-512 codecs here: avx512 requests must fall back to %s with a warning\n", best);
  struct {
    const char* value;
    const char* want;
    int warns;
  } cases[] = {
      {NULL, best, 0},
      {"auto", best, 0},
      {"AUTO", best, 0},
      {"", best, 0},
      {"scalar", "scalar", 0},
      {"Scalar", "scalar", 0},
      {"avx2", haveAvx2 ? "avx2" : "scalar", !haveAvx2},
      {"AVX2", haveAvx2 ? "avx2" : "scalar", !haveAvx2},
      {"avx512", haveAvx512 ? "avx512" : best, !haveAvx512},
      {"Avx512", haveAvx512 ? "avx512" : best, !haveAvx512},
      {"avx512f", best, 1},
      {"sclar", best, 1},
  };
  enum { NCASES = sizeof cases / sizeof cases[0] };
  char names[NCASES][64];
  for (size_t c = 0; c < NCASES; c++) {
    char* name = names[c];
    char err[4096];
    runChild(cases[c].value, name, sizeof names[c], err, sizeof err);
    const char* shown = cases[c].value ? cases[c].value : "(unset)";
    char* rot = strchr(name, ' ');
    REQUIRE(rot != NULL);
    *rot = '\0';
    CHECK_MSG(strcmp(name, cases[c].want) == 0, "ZPP_QUANT_IMPL=%s chose '%s', want '%s'", shown, name,
              cases[c].want);
    memmove(name, rot + 1, strlen(rot + 1) + 1); /* keep the rotated name, checked below */
    int warned = strstr(err, "ZPP_QUANT_IMPL") != NULL && strstr(err, "WARN") != NULL;
    CHECK_MSG(warned == cases[c].warns, "ZPP_QUANT_IMPL=%s: warning %s expected; stderr: %s", shown,
              cases[c].warns ? "" : "not", err);
  }
  /* The rotated kernels of each setting (the parent may choose now: the
   * children have run). */
  const int haveRot512 = zppQuantRotImplSelect("avx512") == zppSuccess;
  CHECK(!haveAvx512 || haveRot512); /* the rotated file needs a subset */
  const char* bestRot = haveRot512 ? "avx512" : haveAvx2 ? "avx2" : "scalar";
  for (size_t c = 0; c < NCASES; c++) {
    const char* v = cases[c].value ? cases[c].value : "";
    const char* want = strcasecmp(v, "scalar") == 0 ? "scalar"
                       : strcasecmp(v, "avx2") == 0 ? (haveAvx2 ? "avx2" : "scalar")
                                                    : bestRot;
    CHECK_MSG(strcmp(names[c], want) == 0, "ZPP_QUANT_IMPL=%s chose rotated '%s', want '%s'",
              cases[c].value ? cases[c].value : "(unset)", names[c], want);
  }

  /* Selection by name for tests and benchmarks. */
  CHECK(zppQuantImplSelect("scalar") == zppSuccess);
  CHECK(strcmp(zppQuantImplName(), "scalar") == 0);
  CHECK(zppQuantImplSelect("avx2") == (haveAvx2 ? zppSuccess : zppInvalidUsage));
  CHECK(strcmp(zppQuantImplName(), haveAvx2 ? "avx2" : "scalar") == 0);
  CHECK(zppQuantImplSelect("avx512") == (haveAvx512 ? zppSuccess : zppInvalidUsage));
  CHECK(strcmp(zppQuantImplName(), best) == 0);
  CHECK(zppQuantImplSelect("fast") == zppInvalidArgument);
  CHECK(zppQuantImplSelect("AVX512") == zppInvalidArgument); /* names are exact here */
  CHECK(strcmp(zppQuantImplName(), best) == 0);              /* a refused request changes nothing */
  CHECK(zppQuantImplGet("avx512") == NULL || strcmp(zppQuantImplGet("avx512")->name, "avx512") == 0);
  /* The rotated kernels alone; zppQuantImplSelect sets both. */
  CHECK(zppQuantRotImplSelect("scalar") == zppSuccess && zppQuantRotImplActive() == NULL);
  CHECK(strcmp(zppQuantRotImplName(), "scalar") == 0);
  CHECK(zppQuantRotImplSelect("avx512") == (haveRot512 ? zppSuccess : zppInvalidUsage));
  CHECK(zppQuantRotImplSelect("avx2") == (haveAvx2 ? zppSuccess : zppInvalidUsage));
  CHECK(zppQuantRotImplSelect("sse9") == zppInvalidArgument &&
        zppQuantRotImplSelect(NULL) == zppInvalidArgument);
  CHECK(strcmp(zppQuantRotImplName(), haveAvx2 ? "avx2" : "scalar") == 0);
  CHECK(zppQuantImplSelect("scalar") == zppSuccess && strcmp(zppQuantRotImplName(), "scalar") == 0);
  if (haveAvx2)
    CHECK(zppQuantImplSelect("avx2") == zppSuccess && strcmp(zppQuantRotImplName(), "avx2") == 0);
  return zppTestExit("test_quant_dispatch");
}
