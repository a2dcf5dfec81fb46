/*
 * Fault injection: makes a rank misbehave on purpose, so that zpp-health
 * (and tests of failure handling) can be checked against faults whose
 * culprit is known. Off unless ZPP_FAULT is set; when it is not, the hook
 * costs one relaxed atomic load per message.
 *
 *   ZPP_FAULT = SPEC[;SPEC...]
 *   SPEC      = KIND[:OPT[,OPT...]]
 *
 *   slow      every message this rank sends waits for a token bucket of
 *             rate=RATE (bits/s: 200mbit, 1gbit, 500k, a bare number is
 *             bit/s; default 100mbit) and/or delay_us=N per message: a slow
 *             NIC or link. Without rank=, every rank: an emulated network
 *             for runs on one machine.
 *   corrupt   flips one bit in the middle of every message this rank sends,
 *             in place in the buffer being sent (the caller's send buffer or
 *             the library's staging buffer), as bad memory or a bad NIC on
 *             the sending side would
 *   hang      the sending thread stops for good (sleeps forever): the rank
 *             stops answering but its process lives, like a stuck driver
 *   die       the process kills itself with SIGKILL
 *
 *   rank=R    which process: R is its launcher rank (RANK, else
 *             OMPI_COMM_WORLD_RANK, else PMI_RANK), so that the fault
 *             follows the process into every communicator it makes; without
 *             a launcher rank, the rank in the communicator sending. Omitted:
 *             every rank.
 *   after=N   start at the N-th message this process sends (default 1)
 *   prob=P    only a fraction P of the collectives (drawn per collective
 *             sequence number): a rank that is only sometimes slow or wrong
 *   seed=S    the draws of prob= from seed S instead of the clock, so that a
 *             test sees the same pattern every run
 *
 * For each kind the first SPEC that matches the process applies, so put the
 * specific ones first: "slow:rank=2,rate=40mbit;slow:rate=400mbit".
 * A value that does not parse is logged at ERROR and injects nothing.
 */
#ifndef ZPP_FAULT_H_
#define ZPP_FAULT_H_

#include <stddef.h>
#include <stdint.h>

#define ZPP_FAULT_MAX_SPECS 16

typedef enum {
  ZPP_FAULT_SLOW = 0,
  ZPP_FAULT_CORRUPT = 1,
  ZPP_FAULT_HANG = 2,
  ZPP_FAULT_DIE = 3,
  ZPP_FAULT_NUM_KINDS = 4
} zppFaultKind_t;

typedef struct {
  zppFaultKind_t kind;
  int rank;       /* -1: every rank */
  double rateBps; /* slow: bits per second (0: no rate limit) */
  double delayUs; /* slow: extra microseconds per message */
  double prob;    /* fraction of collectives affected, (0, 1] */
  uint64_t after; /* first message (1-based) the fault applies to */
  uint64_t seed;  /* prob= draws: 0 from the clock, else this */
} zppFaultSpec_t;

typedef struct {
  int n;
  zppFaultSpec_t spec[ZPP_FAULT_MAX_SPECS];
} zppFaultSet_t;

/* Parses a ZPP_FAULT value ("" gives an empty set). Returns 0, or -1 with
 * the reason in err (which names the offending part). */
int zppFaultParse(const char* text, zppFaultSet_t* out, char* err, size_t errLen);

/* The hook, called once per message from the host transport's send path
 * before the message is posted. commRank is the sender's rank in the
 * communicator, seq the collective's sequence number. May sleep (slow),
 * modify buf (corrupt), never return (hang) or kill the process (die). */
void zppFaultOnSend(int commRank, const void* buf, size_t bytes, uint32_t seq);

/* 1 when ZPP_FAULT is set and valid (whether or not it matches this rank). */
int zppFaultEnabled(void);

#endif /* ZPP_FAULT_H_ */
