// ronde's side of the startup benchmark: prints, on every rank, the wall clock
// (CLOCK_REALTIME, seconds) once Communicator::fromEnvironment() returned and a first barrier
// passed, i.e. the moment the job can run collectives. run_netns_bench.py subtracts the time
// it started the launcher. The MPI counterpart is `mpi_allreduce --init-probe`.
#include <time.h>

#include <cstdio>

#include "ronde/communicator.h"

int main() {
  try {
    auto comm = ronde::Communicator::fromEnvironment();
    comm->barrier();
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    std::printf("init-probe rank %d ready %.6f\n", comm->rank(),
                static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9);
    std::fflush(stdout);
    return 0;
  } catch (const ronde::Error& e) {
    std::fprintf(stderr, "init_probe failed: [%s] %s\n", ronde::errorCodeName(e.code()), e.what());
    return 2;
  }
}
