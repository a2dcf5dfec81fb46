/*
 * LD_PRELOAD shim for tests: every ucp_ep_create() first sleeps a random
 * 0..ZPP_TEST_SLOW_CONNECT_US microseconds (default 20000), drawn per call
 * from the process id, as a rank starved of CPU on a loaded machine would.
 * It widens, without changing any behaviour, the window in which one rank
 * still makes its endpoints while the others have left zppCommInitRank:
 * test_coll_faults mismatch under it failed 18 runs in 20 before creation
 * ended with every endpoint wired up on every rank (shmat EINVAL on a
 * peer's removed System V segment, tcp connections refused, UCX assertions).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

typedef ucs_status_t (*epCreateFn)(ucp_worker_h, const ucp_ep_params_t*, ucp_ep_h*);

ucs_status_t ucp_ep_create(ucp_worker_h worker, const ucp_ep_params_t* params, ucp_ep_h* ep) {
  static epCreateFn real;
  static unsigned seed;
  if (real == NULL) real = (epCreateFn)dlsym(RTLD_NEXT, "ucp_ep_create");
  if (real == NULL) return UCS_ERR_UNSUPPORTED;
  if (seed == 0) seed = (unsigned)getpid();
  const char* e = getenv("ZPP_TEST_SLOW_CONNECT_US");
  long maxUs = e ? atol(e) : 20000;
  if (maxUs > 0) usleep((useconds_t)(rand_r(&seed) % maxUs));
  return real(worker, params, ep);
}
