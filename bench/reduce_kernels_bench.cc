// Throughput of the reduction kernels against memcpy, per instruction set.
// Usage: reduce_kernels_bench [bytes per buffer, default 16 MiB]
// GB/s counts every byte read and written: (sources + 1) * bytes per call.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/reduce_kernels.h"

namespace {

using Clock = std::chrono::steady_clock;

template <class Fn>
double bestSeconds(Fn&& fn) {
  fn();  // warm the pages and caches
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    int calls = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      fn();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < 0.1);
    best = std::min(best, elapsed / calls);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ronde;
  const size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (16u << 20);
  std::vector<unsigned char> a(bytes, 0x3c), b(bytes, 0x3c), c(bytes, 0x3c), out(bytes);

  const double copy_s = bestSeconds([&] { std::memcpy(out.data(), a.data(), bytes); });
  std::printf("buffer %zu bytes\nmemcpy                        %7.1f GB/s\n", bytes,
              2 * bytes / copy_s / 1e9);

  const DataType types[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                            DataType::kFloat64, DataType::kInt32, DataType::kUInt8};
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kBaseline}) {
    if (!kernelIsaSupported(isa)) continue;
    setKernelIsaForTesting(isa);
    for (DataType type : types) {
      const size_t count = bytes / dataTypeSize(type);
      const void* two[2] = {a.data(), b.data()};
      const void* three[3] = {a.data(), b.data(), c.data()};
      const double many2 = bestSeconds([&] {
        reduceMany(out.data(), two, 2, count, type, ReduceOp::kSum, 1.0);
      });
      const double many3 = bestSeconds([&] {
        reduceMany(out.data(), three, 3, count, type, ReduceOp::kSum, 0.5);
      });
      const double into = bestSeconds([&] {
        reduceInto(out.data(), a.data(), count, type, ReduceOp::kSum);
      });
      std::printf("%-8s %-9s sum  many(2) %7.1f GB/s  many(3,scaled) %7.1f GB/s  into %7.1f GB/s\n",
                  kernelIsaName(isa), dataTypeName(type), 3 * bytes / many2 / 1e9,
                  4 * bytes / many3 / 1e9, 3 * bytes / into / 1e9);
    }
  }
  return 0;
}
