/* OpenMPI's side of the namespace-host benchmark: the same job as examples/allreduce_demo
 * (float32 sum of MiB mebibytes, one checked warm-up, then `iterations` timed calls between
 * barriers), printing the same line so run_netns_bench.py parses both alike. --allgather and
 * --reducescatter run blocks_job.cc's jobs instead: MiB in the whole buffer, MiB / size in
 * each rank's block.
 *
 *   mpirun -np 4 ... mpi_allreduce [MiB] [iterations]
 *   mpirun -np 4 ... mpi_allreduce --allgather|--reducescatter [MiB] [iterations]
 *   mpirun -np 4 ... mpi_allreduce --init-probe
 *
 * --init-probe prints, on every rank, the wall clock (CLOCK_REALTIME, seconds) right after
 * MPI_Init and a barrier: the moment the job can communicate, for the startup table. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double wallSeconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

static int initProbe(void) {
  int rank = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  double ready = wallSeconds();
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  printf("init-probe rank %d ready %.6f\n", rank, ready);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}

static float gatheredValue(size_t rank, size_t i) { return (float)(rank * 1000 + i % 997); }

static int allgather(size_t mib, int iterations) {
  int rank = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const size_t per_rank = mib * 1024 * 1024 / sizeof(float) / (size_t)n;
  float* mine = malloc(per_rank * sizeof(float));
  float* all = malloc(per_rank * (size_t)n * sizeof(float));
  if (mine == NULL || all == NULL) MPI_Abort(MPI_COMM_WORLD, 3);
  for (size_t i = 0; i < per_rank; ++i) mine[i] = gatheredValue((size_t)rank, i);
  MPI_Allgather(mine, (int)per_rank, MPI_FLOAT, all, (int)per_rank, MPI_FLOAT, MPI_COMM_WORLD);
  size_t wrong = 0;
  for (size_t r = 0; r < (size_t)n; ++r) {
    for (size_t i = 0; i < per_rank; ++i) wrong += all[r * per_rank + i] != gatheredValue(r, i);
  }
  if (wrong > 0) {
    fprintf(stderr, "rank %d: %zu elements wrong\n", rank, wrong);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int it = 0; it < iterations; ++it) {
    MPI_Allgather(mine, (int)per_rank, MPI_FLOAT, all, (int)per_rank, MPI_FLOAT, MPI_COMM_WORLD);
  }
  double seconds = MPI_Wtime() - start;
  if (rank == 0) {
    printf("mpi allgather: %d ranks over tcp, %zu MiB float32, result correct, "
           "%.2f ms per allgather\n", n, mib, seconds / iterations * 1e3);
  }
  free(mine);
  free(all);
  MPI_Finalize();
  return 0;
}

static int reduceScatter(size_t mib, int iterations) {
  int rank = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const size_t per_rank = mib * 1024 * 1024 / sizeof(float) / (size_t)n;
  float* whole = malloc(per_rank * (size_t)n * sizeof(float));
  float* block = malloc(per_rank * sizeof(float));
  if (whole == NULL || block == NULL) MPI_Abort(MPI_COMM_WORLD, 3);
  for (size_t g = 0; g < per_rank * (size_t)n; ++g) whole[g] = (float)((rank + 1) * (g % 13 + 1));
  MPI_Reduce_scatter_block(whole, block, (int)per_rank, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  size_t wrong = 0;
  for (size_t i = 0; i < per_rank; ++i) {
    const size_t g = (size_t)rank * per_rank + i;
    wrong += block[i] != (float)((size_t)n * (size_t)(n + 1) / 2 * (g % 13 + 1));
  }
  if (wrong > 0) {
    fprintf(stderr, "rank %d: %zu elements wrong\n", rank, wrong);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int it = 0; it < iterations; ++it) {
    MPI_Reduce_scatter_block(whole, block, (int)per_rank, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  double seconds = MPI_Wtime() - start;
  if (rank == 0) {
    printf("mpi reducescatter: %d ranks over tcp, %zu MiB float32, result correct, "
           "%.2f ms per reducescatter\n", n, mib, seconds / iterations * 1e3);
  }
  free(whole);
  free(block);
  MPI_Finalize();
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc > 1 && strcmp(argv[1], "--init-probe") == 0) return initProbe();
  if (argc > 1 && strcmp(argv[1], "--allgather") == 0) {
    return allgather(argc > 2 ? strtoul(argv[2], NULL, 10) : 64, argc > 3 ? atoi(argv[3]) : 10);
  }
  if (argc > 1 && strcmp(argv[1], "--reducescatter") == 0) {
    return reduceScatter(argc > 2 ? strtoul(argv[2], NULL, 10) : 64,
                         argc > 3 ? atoi(argv[3]) : 10);
  }
  const size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
  const int iterations = argc > 2 ? atoi(argv[2]) : 10;
  int rank = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const int count = (int)(mib * 1024 * 1024 / sizeof(float));
  float* data = malloc((size_t)count * sizeof(float));
  if (data == NULL) MPI_Abort(MPI_COMM_WORLD, 3);
  for (int i = 0; i < count; ++i) data[i] = (float)(rank + 1 + i % 7);
  MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  size_t wrong = 0;
  for (int i = 0; i < count; ++i) {
    if (data[i] != (float)(n * (n + 1) / 2 + n * (i % 7))) ++wrong;
  }
  if (wrong > 0) {
    fprintf(stderr, "rank %d: %zu of %d elements wrong\n", rank, wrong, count);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int it = 0; it < iterations; ++it) {
    MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  double seconds = MPI_Wtime() - start;
  if (rank == 0) {
    double bytes = (double)count * sizeof(float);
    double busbw = 2.0 * (n - 1) / n * bytes * iterations / seconds / 1e9;
    printf("mpi allreduce: %d ranks over tcp, %zu MiB float32, result correct, "
           "%.2f ms per allreduce, bus bandwidth %.2f GB/s\n",
           n, mib, seconds / iterations * 1e3, busbw);
  }
  free(data);
  MPI_Finalize();
  return 0;
}
