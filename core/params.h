/*
 * The one table of environment parameters. Every ZPP_* variable the library
 * reads is a row of the table in params.c, with its default and help text, so
 * that zpp-info can print them all and a typo is easy to spot. Reading a name
 * that is not in the table is a programming error and is logged.
 */
#ifndef ZPP_PARAMS_H_
#define ZPP_PARAMS_H_

#include <stdint.h>

#include "zpp.h"

typedef enum { ZPP_ENV_INT, ZPP_ENV_STRING, ZPP_ENV_BOOL } zppEnvType_t;

typedef struct {
  const char* name;
  zppEnvType_t type;
  const char* defaultValue; /* as text; NULL or "" means unset */
  const char* help;
} zppEnvInfo_t;

/* The table, for tools that list it. */
int zppEnvCount(void);
const zppEnvInfo_t* zppEnvAt(int index);

/* The environment value, else the default (never NULL; "" when unset). */
const char* zppEnvGetString(const char* name);
/* 1 when the value comes from the environment rather than the default. */
int zppEnvIsSet(const char* name);
/* Integer and boolean parameters. A value that does not parse is an
 * invalid-argument error naming the variable; nothing is written then. */
zppResult_t zppEnvGetInt(const char* name, int64_t* value);
zppResult_t zppEnvGetBool(const char* name, int* value);

#endif /* ZPP_PARAMS_H_ */
