// ronde's side of the namespace-host allgather and reduce-scatter benchmarks: MiB mebibytes of
// float32 in the whole buffer, MiB / size in each rank's block; one checked warm-up, then
// `iterations` timed calls between barriers; rank 0 prints the same line as
// `mpi_allreduce --allgather` / `--reducescatter` so run_netns_bench.py parses both alike.
//
//   ronde run -np 4 -H a:2,b:2 blocks_job allgather|reducescatter [MiB] [iterations]
//
// allgather: rank r's block holds r * 1000 + i % 997. reducescatter: rank r's input holds
// (r + 1) * (g % 13 + 1) at element g, so block r of the sum is n(n+1)/2 * (g % 13 + 1).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ronde/communicator.h"

int main(int argc, char** argv) {
  const bool gather = argc > 1 && std::strcmp(argv[1], "allgather") == 0;
  if (argc < 2 || (!gather && std::strcmp(argv[1], "reducescatter") != 0)) {
    std::fprintf(stderr, "usage: blocks_job allgather|reducescatter [MiB] [iterations]\n");
    return 2;
  }
  const size_t mib = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 64;
  const int iterations = argc > 3 ? std::atoi(argv[3]) : 10;
  try {
    auto comm = ronde::Communicator::fromEnvironment();
    const size_t n = static_cast<size_t>(comm->size());
    const size_t me = static_cast<size_t>(comm->rank());
    const size_t per_rank = mib * 1024 * 1024 / sizeof(float) / n;
    std::vector<float> block(per_rank), whole(per_rank * n);
    const std::vector<size_t> counts(n, per_rank);
    auto gathered = [](size_t rank, size_t i) { return static_cast<float>(rank * 1000 + i % 997); };
    auto scattered = [&](size_t g) { return static_cast<float>(n * (n + 1) / 2 * (g % 13 + 1)); };
    auto call = [&] {
      if (gather) {
        comm->allgather(block.data(), whole.data(), per_rank, ronde::DataType::kFloat32);
      } else {
        comm->reducescatter(whole.data(), block.data(), counts, ronde::DataType::kFloat32,
                            ronde::ReduceOp::kSum);
      }
    };
    for (size_t i = 0; i < per_rank; ++i) block[i] = gathered(me, i);
    for (size_t g = 0; g < whole.size(); ++g) {
      whole[g] = static_cast<float>((me + 1) * (g % 13 + 1));
    }
    call();
    size_t wrong = 0;
    if (gather) {
      for (size_t r = 0; r < n; ++r) {
        for (size_t i = 0; i < per_rank; ++i) wrong += whole[r * per_rank + i] != gathered(r, i);
      }
    } else {
      for (size_t i = 0; i < per_rank; ++i) wrong += block[i] != scattered(me * per_rank + i);
    }
    if (wrong > 0) {
      std::fprintf(stderr, "rank %zu: %zu elements wrong\n", me, wrong);
      return 1;
    }
    comm->barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int it = 0; it < iterations; ++it) call();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (me == 0) {
      std::printf("ronde %s: %zu ranks over %s, %zu MiB float32, result correct, "
                  "%.2f ms per %s\n",
                  argv[1], n, comm->transportName().c_str(), mib, seconds / iterations * 1e3,
                  argv[1]);
    }
    return 0;
  } catch (const ronde::Error& e) {
    std::fprintf(stderr, "blocks_job failed: [%s] %s\n", ronde::errorCodeName(e.code()), e.what());
    return 2;
  }
}
