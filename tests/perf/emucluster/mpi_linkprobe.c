/* Proves that OpenMPI under `emucluster.sh --mpi` sends between nodes over
 * the shaped links and not over shared memory: rank 0 streams a buffer to
 * every other rank and reports the rate. Across nodes the rate must stay at
 * or below the link's; a rate far above it means the bytes bypassed the link
 * (e.g. shared memory across namespaces). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long bytes = argc > 1 ? atol(argv[1]) : 4L << 20;
  int reps = argc > 2 ? atoi(argv[2]) : 2;
  char* buf = malloc((size_t)bytes);
  if (!buf) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  memset(buf, rank, (size_t)bytes);
  const char* host = getenv("ZPP_HOSTID");
  printf("rank %d hostid %s\n", rank, host ? host : "(unset)");
  fflush(stdout);

  for (int peer = 1; peer < size; peer++) {
    MPI_Barrier(MPI_COMM_WORLD);
    char ack = 0;
    if (rank == 0) {
      /* One warm-up message opens the connection outside the timed part. */
      MPI_Send(buf, 1, MPI_CHAR, peer, 0, MPI_COMM_WORLD);
      MPI_Recv(&ack, 1, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      double t0 = MPI_Wtime();
      for (int r = 0; r < reps; r++) MPI_Send(buf, (int)bytes, MPI_CHAR, peer, 0, MPI_COMM_WORLD);
      MPI_Recv(&ack, 1, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      double dt = MPI_Wtime() - t0;
      printf("link 0->%d bytes %ld seconds %.6f rate_bps %.0f\n", peer, bytes * reps, dt,
             (double)bytes * reps * 8.0 / dt);
      fflush(stdout);
    } else if (rank == peer) {
      MPI_Recv(buf, 1, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(&ack, 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
      for (int r = 0; r < reps; r++)
        MPI_Recv(buf, (int)bytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(&ack, 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
    }
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
