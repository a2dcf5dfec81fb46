/* zpp-train under mpirun (see train_mpi.c); stubs when MPI is not built. */
#ifndef ZPP_EXAMPLE_TRAIN_MPI_H_
#define ZPP_EXAMPLE_TRAIN_MPI_H_

#include "zpp.h"

int trMpiAvailable(void);
int trMpiLaunched(void);
int trMpiInit(int* argc, char*** argv);
void trMpiFinalize(void);
int trMpiRankSize(int* rank, int* size);
int trMpiBcastId(zppUniqueId* id, int ok);

#endif /* ZPP_EXAMPLE_TRAIN_MPI_H_ */
