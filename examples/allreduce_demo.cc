// ronde's smallest real job: every rank allreduces a buffer, checks the result against the
// value it must have, and rank 0 prints the bus bandwidth. Start it with
//   ronde run -np 2 build/examples/allreduce_demo [MiB] [iterations]
// It exits non-zero on any wrong element, so it doubles as a smoke test.
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
    const int n = comm->size();
    const size_t count = mib * 1024 * 1024 / sizeof(float);
    std::vector<float> data(count);
    // Rank r holds r + 1 + (i % 7): the sum over ranks is known in closed form.
    auto fill = [&] {
      for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(comm->rank() + 1 + i % 7);
    };
    fill();
    comm->allreduce(data.data(), data.data(), count, ronde::DataType::kFloat32, ronde::ReduceOp::kSum);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float want = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7));
      if (data[i] != want) ++wrong;
    }
    if (wrong > 0) {
      std::fprintf(stderr, "rank %d: %zu of %zu elements wrong\n", comm->rank(), wrong, count);
      return 1;
    }
    comm->barrier();
    auto start = std::chrono::steady_clock::now();
    for (int it = 0; it < iterations; ++it) {
      comm->allreduce(data.data(), data.data(), count, ronde::DataType::kFloat32, ronde::ReduceOp::kSum);
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (comm->rank() == 0) {
      double bytes = static_cast<double>(count * sizeof(float));
      double busbw = 2.0 * (n - 1) / n * bytes * iterations / seconds / 1e9;
      std::printf("ronde allreduce: %d ranks over %s, %zu MiB float32, result correct, "
                  "%.2f ms per allreduce, bus bandwidth %.2f GB/s\n",
                  n, comm->transportName().c_str(), mib, seconds / iterations * 1e3, busbw);
    }
    return 0;
  } catch (const ronde::Error& e) {
    std::fprintf(stderr, "allreduce_demo failed: [%s] %s\n", ronde::errorCodeName(e.code()), e.what());
    return 2;
  }
}
