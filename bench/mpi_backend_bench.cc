// The seam's cost: ronde's MPI backend against OpenMPI's own MPI_Allreduce (blocking, and the
// nonblocking form the backend polls), and against ronde's native backend, in one job under
// mpirun. The variants run interleaved, round after round, so a load that comes and goes on a
// shared machine touches them alike; each figure is the median over rounds of the slowest
// rank's mean time per call.
//
//   mpirun -np 2 --oversubscribe --allow-run-as-root mpi_backend_bench [MiB] [rounds] [calls]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "ronde/communicator.h"

namespace {

using Clock = std::chrono::steady_clock;

double slowestSeconds(const std::function<void()>& call, int calls) {
  MPI_Barrier(MPI_COMM_WORLD);
  auto start = Clock::now();
  for (int i = 0; i < calls; ++i) call();
  double mine = std::chrono::duration<double>(Clock::now() - start).count() / calls;
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const double mib = argc > 1 ? std::atof(argv[1]) : 16;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  const int calls = argc > 3 ? std::atoi(argv[3]) : 10;
  ::setenv("RONDE_CPU_OPERATIONS", "mpi", 1);
  auto mpi_backend = ronde::Communicator::fromEnvironment();  // initialises MPI
  ::setenv("RONDE_CPU_OPERATIONS", "native", 1);
  auto native = ronde::Communicator::fromEnvironment();
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const size_t count = static_cast<size_t>(mib * 1024 * 1024 / sizeof(float));
  std::vector<float> in(count, 1.0f), out(count);

  struct Variant {
    const char* name;
    std::function<void()> call;
    std::vector<double> seconds;
  };
  const int n = static_cast<int>(count);
  std::vector<char> descriptor(64, 0), gathered(64 * static_cast<size_t>(size));
  std::vector<Variant> variants = {
      {"raw MPI_Allreduce",
       [&] { MPI_Allreduce(in.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
       {}},
      {"raw MPI_Iallreduce+MPI_Wait",
       [&] {
         MPI_Request request;
         MPI_Iallreduce(in.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
         MPI_Wait(&request, MPI_STATUS_IGNORE);
       },
       {}},
      // The backend's two parts apart, to tell which one costs: its descriptor check (a
      // 64-byte allgather before each call) and its wait (MPI_Test in a loop, not MPI_Wait).
      {"  64 B Iallgather + Iallreduce",
       [&] {
         MPI_Request request;
         MPI_Iallgather(descriptor.data(), 64, MPI_BYTE, gathered.data(), 64, MPI_BYTE,
                        MPI_COMM_WORLD, &request);
         MPI_Wait(&request, MPI_STATUS_IGNORE);
         MPI_Iallreduce(in.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
         MPI_Wait(&request, MPI_STATUS_IGNORE);
       },
       {}},
      {"  Iallreduce + MPI_Test loop",
       [&] {
         MPI_Request request;
         MPI_Iallreduce(in.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
         for (int done = 0; !done;) MPI_Test(&request, &done, MPI_STATUS_IGNORE);
       },
       {}},
      {"ronde mpi backend",
       [&] {
         mpi_backend->allreduce(in.data(), out.data(), count, ronde::DataType::kFloat32,
                                ronde::ReduceOp::kSum);
       },
       {}},
      {"ronde native backend",
       [&] {
         native->allreduce(in.data(), out.data(), count, ronde::DataType::kFloat32,
                           ronde::ReduceOp::kSum);
       },
       {}},
  };
  for (Variant& v : variants) v.call();  // warm up: first-touch, connections
  for (int r = 0; r < rounds; ++r) {
    for (Variant& v : variants) v.seconds.push_back(slowestSeconds(v.call, calls));
  }
  if (out[count - 1] != static_cast<float>(size)) {
    std::fprintf(stderr, "rank %d: wrong result %f\n", rank, out[count - 1]);
    return 1;
  }
  if (rank == 0) {
    const double raw = median(variants[0].seconds);
    std::printf("allreduce of %.4g MiB float32 on %d ranks (native: %s), %d rounds x %d calls\n",
                mib, size, native->transportName().c_str(), rounds, calls);
    for (const Variant& v : variants) {
      const double t = median(v.seconds);
      std::printf("  %-32s %9.3f ms  %+6.1f%% vs raw MPI_Allreduce\n", v.name, t * 1e3,
                  (t / raw - 1) * 100);
    }
  }
  native.reset();
  mpi_backend.reset();
  return 0;
}
