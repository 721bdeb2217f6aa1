// The ceiling: one thread's memcpy between two buffers of each size, timed like the
// collectives (harness.h). Bandwidth is bytes copied per second.
//
//   memcpy_bench [--sizes=4K:256M] [--trials=3] [--trial-seconds=0.15]
#include <cstring>
#include <vector>

#include "harness.h"

int main(int argc, char** argv) {
  using namespace ronde::bench;
  Args args(argc, argv);
  const std::vector<size_t> sizes = args.getSizes();
  const int trials = args.getInt("trials", 3);
  const double trial_seconds = std::stod(args.get("trial-seconds", "0.15"));
  args.finish();

  for (size_t bytes : sizes) {
    std::vector<char> source(bytes, 1);
    std::vector<char> target(bytes, 0);
    RankOps ops;
    ops.run = [&] { std::memcpy(target.data(), source.data(), bytes); };
    ops.barrier = [] {};
    ops.max = [](double value) { return value; };
    printMemcpyResult(bytes, timeCollective(ops, bytes, trials, trial_seconds));
  }
  return 0;
}
