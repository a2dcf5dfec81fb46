/*
 * zpp-train under mpirun: MPI only carries the unique id from rank 0 to
 * the others (as an NCCL program does with MPI_Bcast); every byte of
 * training goes through zpp. Without MPI in the build, mpirun still works
 * through the environment (OMPI_COMM_WORLD_* with MASTER_ADDR/PORT).
 */
#include "train_mpi.h"

#include <stdio.h>
#include <stdlib.h>

#include "zpp_build_config.h"

#if ZPP_HAVE_MPI
#include <mpi.h>

int trMpiAvailable(void) { return 1; }

int trMpiLaunched(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMIX_RANK") != NULL ||
         getenv("PMI_SIZE") != NULL;
}

int trMpiInit(int* argc, char*** argv) {
  if (MPI_Init(argc, argv) != MPI_SUCCESS) {
    fprintf(stderr, "zpp-train: MPI_Init failed\n");
    return -1;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return 0;
}

void trMpiFinalize(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

int trMpiRankSize(int* rank, int* size) {
  if (MPI_Comm_rank(MPI_COMM_WORLD, rank) != MPI_SUCCESS ||
      MPI_Comm_size(MPI_COMM_WORLD, size) != MPI_SUCCESS) {
    fprintf(stderr, "zpp-train: MPI_Comm_rank/size failed\n");
    return -1;
  }
  return 0;
}

/* Rank 0's id goes to everyone, with a flag saying whether rank 0 has one:
 * a failed zppGetUniqueId must not leave the others waiting on a root that
 * does not exist. Returns 1 when the id is good. */
int trMpiBcastId(zppUniqueId* id, int ok) {
  unsigned char buf[sizeof *id + 1];
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    buf[0] = (unsigned char)(ok ? 1 : 0);
    for (size_t i = 0; i < sizeof *id; i++) buf[1 + i] = (unsigned char)id->internal[i];
  }
  if (MPI_Bcast(buf, (int)sizeof buf, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) return 0;
  for (size_t i = 0; i < sizeof *id; i++) id->internal[i] = (char)buf[1 + i];
  return buf[0] == 1;
}

#else

int trMpiAvailable(void) { return 0; }
int trMpiLaunched(void) { return 0; }
int trMpiInit(int* argc, char*** argv) { return -1; }
void trMpiFinalize(void) {}
int trMpiRankSize(int* rank, int* size) { return -1; }
int trMpiBcastId(zppUniqueId* id, int ok) { return 0; }

#endif
