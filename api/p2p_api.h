/*
 * What the other entry points need of point-to-point's groups
 * (api/p2p_api.c).
 */
#ifndef ZPP_P2P_API_H_
#define ZPP_P2P_API_H_

#include "zpp.h"

/* zppInvalidUsage, naming the call, inside a zppGroupStart/zppGroupEnd on
 * this thread (collectives are not recorded in groups); the group then
 * fails at its zppGroupEnd. */
zppResult_t zppApiCheckNoGroup(const char* name);

#endif /* ZPP_P2P_API_H_ */
