// ronde's side of the namespace-host allgather benchmark: every rank contributes MiB / size
// mebibytes of float32 (rank r's block holds r * 1000 + i % 997), one checked warm-up, then
// `iterations` timed allgathers between barriers; rank 0 prints the same line as
// `mpi_allreduce --allgather` so run_netns_bench.py parses both alike.
//
//   ronde run -np 4 -H a:2,b:2 allgather_job [MiB of the whole output] [iterations]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ronde/communicator.h"

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 10;
  try {
    auto comm = ronde::Communicator::fromEnvironment();
    const size_t n = static_cast<size_t>(comm->size());
    const size_t per_rank = mib * 1024 * 1024 / sizeof(float) / n;
    auto value = [](size_t rank, size_t i) { return static_cast<float>(rank * 1000 + i % 997); };
    std::vector<float> mine(per_rank), all(per_rank * n);
    for (size_t i = 0; i < per_rank; ++i) mine[i] = value(static_cast<size_t>(comm->rank()), i);
    comm->allgather(mine.data(), all.data(), per_rank, ronde::DataType::kFloat32);
    size_t wrong = 0;
    for (size_t r = 0; r < n; ++r) {
      for (size_t i = 0; i < per_rank; ++i) wrong += all[r * per_rank + i] != value(r, i);
    }
    if (wrong > 0) {
      std::fprintf(stderr, "rank %d: %zu of %zu elements wrong\n", comm->rank(), wrong, all.size());
      return 1;
    }
    comm->barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int it = 0; it < iterations; ++it) {
      comm->allgather(mine.data(), all.data(), per_rank, ronde::DataType::kFloat32);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (comm->rank() == 0) {
      std::printf("ronde allgather: %zu ranks over %s, %zu MiB float32, result correct, "
                  "%.2f ms per allgather\n",
                  n, comm->transportName().c_str(), mib, seconds / iterations * 1e3);
    }
    return 0;
  } catch (const ronde::Error& e) {
    std::fprintf(stderr, "allgather_job failed: [%s] %s\n", ronde::errorCodeName(e.code()),
                 e.what());
    return 2;
  }
}
