/* A user's first program against an installed zpp: the header it was compiled
 * with and the library it loaded must both be the version that was installed.
 * Prints "zpp <header version> <library version>". */
#include <stdio.h>
#include <zpp.h>

int main(void) {
  int loaded = 0;
  zppResult_t r = zppGetVersion(&loaded);
  if (r != zppSuccess) {
    fprintf(stderr, "hello_zpp: zppGetVersion: %s\n", zppGetErrorString(r));
    return 1;
  }
  if (loaded != ZPP_VERSION_CODE) {
    fprintf(stderr, "hello_zpp: header %d, library %d\n", ZPP_VERSION_CODE, loaded);
    return 1;
  }
  printf("zpp %d.%d.%d %d (%s)\n", ZPP_MAJOR, ZPP_MINOR, ZPP_PATCH, loaded,
         zppGetErrorString(zppSuccess));
  return 0;
}
