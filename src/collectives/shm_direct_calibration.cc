// Which of the two large-band shared-memory allreduces is faster on this host, measured: the
// direct path moves fewer bytes (2.5 S per rank against 4.5 S for 2 ranks), but every byte it
// moves goes through the kernel, which pins each 4 KiB page of the peer's buffer first; the
// staged path copies more, in user space, through the segment every rank has mapped. Which
// wins depends on the CPU, the kernel and the hypervisor: on an AMD EPYC KVM guest (kernel
// 6.18) staging was 2.2-2.8x faster from 256 KiB to 256 MiB, where a loaded Intel guest had
// favoured the direct path by its byte count (docs/benchmarks.md). So it is timed, not guessed.
#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "collectives/shm_collectives.h"

namespace ronde {
namespace {

// Large enough to be past the small band and to cross several pages per rank, small enough to
// take well under a millisecond per call on either path (the whole timing, buffers' first
// touch included, adds about 7 ms to a communicator's start).
constexpr size_t kCalibrationElements = 512 * 1024;  // 2 MiB of float32
constexpr int kRounds = 4;                            // the first warms pages and caches up

double secondsOf(const ShmOp& op, const std::vector<float>& in, std::vector<float>& out) {
  const auto start = std::chrono::steady_clock::now();
  shmAllreduce(op, in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum, 1.0, 1.0);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

bool shmDirectReadIsFaster(const ShmOp& base) {
  std::vector<float> in(kCalibrationElements, 1.0f);
  std::vector<float> out(kCalibrationElements, 0.0f);
  ShmOp op = base;
  op.descriptor = OpDescriptor{};
  op.descriptor.kind = CollectiveKind::kAllreduce;
  op.descriptor.count = kCalibrationElements;
  op.descriptor.type = DataType::kFloat32;
  op.descriptor.op = ReduceOp::kSum;
  // Best of the rounds after the first, the two paths alternating so that a disturbance
  // hits both alike.
  double best[2] = {std::numeric_limits<double>::infinity(),
                    std::numeric_limits<double>::infinity()};
  for (int round = 0; round < kRounds; ++round) {
    for (int direct = 0; direct < 2; ++direct) {
      op.direct_read = direct == 1;
      const double seconds = secondsOf(op, in, out);
      if (round > 0) best[direct] = std::min(best[direct], seconds);
    }
  }
  // Every local rank must choose alike: each takes the slowest rank's best time of each path.
  op.direct_read = false;
  op.descriptor.count = 2;
  op.descriptor.type = DataType::kFloat64;
  op.descriptor.op = ReduceOp::kMax;
  shmAllreduce(op, best, best, 2, DataType::kFloat64, ReduceOp::kMax, 1.0, 1.0);
  // Staging is the safer default (it copes better with descheduled peers), so the direct path
  // must win clearly.
  return best[1] < 0.9 * best[0];
}

}  // namespace ronde
