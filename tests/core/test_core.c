/* The runtime basics: result codes match NCCL's, strings exist, the
 * parameter table parses and rejects what it must. */
#include <stdlib.h>
#include <string.h>

#include "zpp.h"
#include "core/params.h"
#include "testutil.h"

int main(void) {
  /* NCCL's numeric values, so a trainer's existing checks keep working. */
  CHECK_EQ_INT(zppSuccess, 0);
  CHECK_EQ_INT(zppUnhandledCudaError, 1);
  CHECK_EQ_INT(zppSystemError, 2);
  CHECK_EQ_INT(zppInternalError, 3);
  CHECK_EQ_INT(zppInvalidArgument, 4);
  CHECK_EQ_INT(zppInvalidUsage, 5);
  CHECK_EQ_INT(zppRemoteError, 6);
  CHECK_EQ_INT(zppInProgress, 7);
  CHECK_EQ_INT(zppFloat16, 6);
  CHECK_EQ_INT(zppFloat32, 7);
  CHECK_EQ_INT(zppBfloat16, 9);
  CHECK_EQ_INT(zppSum, 0);
  CHECK_EQ_INT(zppAvg, 4);
  CHECK_EQ_INT(zppTypeSize(zppBfloat16), 2);
  CHECK_EQ_INT(zppTypeSize(zppFloat64), 8);
  CHECK_EQ_INT(zppTypeSize((zppDataType_t)42), 0);

  int version = -1;
  CHECK(zppGetVersion(&version) == zppSuccess);
  CHECK_EQ_INT(version, ZPP_VERSION_CODE);
  CHECK(zppGetVersion(NULL) == zppInvalidArgument);
  for (int r = 0; r <= zppNumResults; r++) CHECK(zppGetErrorString((zppResult_t)r) != NULL);
  CHECK(strcmp(zppGetErrorString((zppResult_t)99), "unknown result code") == 0);

  /* Every table row has a name, help and a default that parses as its type. */
  CHECK(zppEnvCount() > 0);
  for (int i = 0; i < zppEnvCount(); i++) {
    const zppEnvInfo_t* p = zppEnvAt(i);
    CHECK(p != NULL && p->name != NULL && strncmp(p->name, "ZPP_", 4) == 0);
    CHECK(p->help != NULL && p->help[0] != '\0');
    unsetenv(p->name);
    if (p->type == ZPP_ENV_INT) {
      int64_t v;
      CHECK_MSG(zppEnvGetInt(p->name, &v) == zppSuccess, "default of %s", p->name);
    } else if (p->type == ZPP_ENV_BOOL) {
      int v;
      CHECK_MSG(zppEnvGetBool(p->name, &v) == zppSuccess, "default of %s", p->name);
    }
  }
  CHECK(zppEnvAt(-1) == NULL && zppEnvAt(zppEnvCount()) == NULL);

  /* A malformed value is an error, and the output is left untouched. */
  setenv("ZPP_DEBUG", "12abc", 1);
  int64_t untouched = 1234;
  CHECK(zppEnvGetInt("ZPP_DEBUG", &untouched) == zppInvalidArgument);
  CHECK_EQ_INT(untouched, 1234);
  setenv("ZPP_DEBUG", "0x10", 1);
  CHECK(zppEnvGetInt("ZPP_DEBUG", &untouched) == zppSuccess);
  CHECK_EQ_INT(untouched, 16);
  setenv("ZPP_DEBUG", "maybe", 1);
  int flag = 5;
  CHECK(zppEnvGetBool("ZPP_DEBUG", &flag) == zppInvalidArgument);
  CHECK_EQ_INT(flag, 5);
  setenv("ZPP_DEBUG", "on", 1);
  CHECK(zppEnvGetBool("ZPP_DEBUG", &flag) == zppSuccess);
  CHECK_EQ_INT(flag, 1);
  CHECK(zppEnvIsSet("ZPP_DEBUG"));
  unsetenv("ZPP_DEBUG");
  CHECK(!zppEnvIsSet("ZPP_DEBUG"));
  CHECK(strcmp(zppEnvGetString("ZPP_DEBUG"), "WARN") == 0);
  return zppTestExit("test_core");
}
