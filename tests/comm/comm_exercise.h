/*
 * Every kind of call on a communicator, results checked element for element (tests of
 * communicators made by shrink and grow, tests/comm/).
 */
#ifndef ZPP_TESTS_COMM_EXERCISE_H_
#define ZPP_TESTS_COMM_EXERCISE_H_

#include "zpp.h"

/* All-reduce, all-gather, reduce-scatter, broadcast from the last rank, qgZ's reduce-scatter
 * (plain and counted as a fallback on nodes of different sizes, else int4 within its bound) and
 * qwZ's all-gather (8-bit, within its bound), hpZ's forward and backward gathers (the same bits);
 * tag varies the data. Returns the number of wrong
 * results (0: all right), after printing them with zppGetLastError(comm). */
int zppExerciseComm(zppComm_t comm, int tag);

#endif /* ZPP_TESTS_COMM_EXERCISE_H_ */
