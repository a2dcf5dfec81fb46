/* zpp-info: what this build of zpp is and every parameter it reads. */
#include <stdio.h>
#include <string.h>

#include "zpp.h"
#include "zpp_build_config.h"
#include "core/params.h"
#include "quant_kernels/zpp_quant.h"

static const char* yesNo(int v) { return v ? "yes" : "no"; }

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf(
          "usage: zpp-info\n  prints the version, the build options and every ZPP_* environment "
          "parameter with its default, current value and meaning\n");
      return 0;
    }
    fprintf(stderr, "zpp-info: unknown argument '%s' (try --help)\n", argv[i]);
    return 2;
  }
  int version = 0;
  zppGetVersion(&version);
  printf("zpp %d.%d.%d (version code %d)\n", version / 10000, (version / 100) % 100, version % 100,
         version);
  printf("\nbuild:\n");
  printf("  build type        %s\n", ZPP_BUILD_TYPE);
  printf("  C compiler        %s\n", ZPP_C_COMPILER);
  printf("  CUDA kernels      %s%s%s\n", yesNo(ZPP_HAVE_CUDA), ZPP_HAVE_CUDA ? ", sm " : "",
         ZPP_HAVE_CUDA ? ZPP_CUDA_ARCHS : "");
  printf("  NCCL transport    %s\n", yesNo(ZPP_HAVE_NCCL));
  printf("  UCX transport     %s\n", yesNo(ZPP_HAVE_UCX));
  printf("  MPI baselines     %s\n", yesNo(ZPP_HAVE_MPI));
  printf("  Google Benchmark  %s\n", yesNo(ZPP_HAVE_BENCHMARK));
  printf("  CPU codec         %s (rotated: %s)\n", zppQuantImplName(), zppQuantRotImplName());

  printf("\nenvironment parameters (value shown is what this process would use):\n");
  for (int i = 0; i < zppEnvCount(); i++) {
    const zppEnvInfo_t* p = zppEnvAt(i);
    const char* value = zppEnvGetString(p->name);
    printf("  %-24s = %-12s%s\n", p->name, value[0] ? value : "(unset)",
           zppEnvIsSet(p->name) ? "  [from environment]" : "");
    printf("  %-24s   %s\n", "", p->help);
  }
  return 0;
}
