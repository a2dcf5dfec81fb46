#include "zpp_quant.h"
const char* zppQuantImplName(void) { return "none"; }
