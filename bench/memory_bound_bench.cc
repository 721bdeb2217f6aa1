// The memory-traffic bound of a shared-memory allreduce on this machine: the direct
// algorithm's data movement (shm_direct_allreduce.cc) done by threads of one process with
// plain memcpy and the same reduction kernel, with no system calls and one barrier per call
// where ronde synchronises. Each thread is pinned to core (rank mod cores), like the
// benchmarks' bound ranks, and moves what a rank moves per call of S bytes:
//   read 1/n of each peer's input into a 64 KiB private block, reduce its share from n
//   sources into its output, copy that share into each peer's output.
// That is 2 - 1/n bytes read and 1 byte written per byte of S through memory, the least any
// scheme moves (docs/collectives.md). Also prints each core's plain memcpy of S bytes with
// every core copying at once, the bandwidth the bound is made of.
//
//   memory_bound_bench [--ranks=2] [--sizes=256K:16M] [--trials=3] [--trial-seconds=0.15]
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/reduce_kernels.h"
#include "harness.h"

namespace {

using namespace ronde::bench;

constexpr size_t kBlockBytes = 64 * 1024;  // as shm_direct_allreduce.cc

// The shared state of the "ranks": a barrier and a max over them.
class Team {
 public:
  explicit Team(int n) : n_(n), barrier_(n), values_(static_cast<size_t>(n)) {}
  void meet() { barrier_.arrive_and_wait(); }
  double max(int rank, double value) {
    values_[static_cast<size_t>(rank)] = value;
    meet();
    const double result = *std::max_element(values_.begin(), values_.end());
    meet();  // nobody rewrites its value before every rank has read them all
    return result;
  }
  int size() const { return n_; }

 private:
  int n_;
  std::barrier<> barrier_;
  std::vector<double> values_;
};

void pinToCore(int rank) {
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<int>(rank % std::max(1L, cores)), &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

struct Buffers {
  std::vector<std::vector<float>> in, out;
};

// One rank's direct-algorithm allreduce of `count` floats, as ronde's minus its syscalls.
void directAllreduce(Team& team, Buffers& b, int me, size_t count, std::vector<float>& blocks) {
  const int n = team.size();
  const size_t base = count / static_cast<size_t>(n), extra = count % static_cast<size_t>(n);
  const auto share = [&](int r) {
    const auto u = static_cast<size_t>(r);
    return std::pair<size_t, size_t>{base * u + std::min(u, extra), base + (u < extra ? 1 : 0)};
  };
  const auto [start, len] = share(me);
  const size_t block = kBlockBytes / sizeof(float);
  std::vector<const void*> srcs(static_cast<size_t>(n));
  float* out = b.out[static_cast<size_t>(me)].data();
  for (size_t done = 0; done < len; done += block) {
    const size_t piece = std::min(block, len - done);
    const size_t at = start + done;
    for (int i = 0; i < n; ++i) {
      const auto u = static_cast<size_t>(i);
      if (i == me) {
        srcs[u] = b.in[u].data() + at;
        continue;
      }
      std::memcpy(blocks.data() + u * block, b.in[u].data() + at, piece * sizeof(float));
      srcs[u] = blocks.data() + u * block;
    }
    ronde::reduceMany(out + at, srcs.data(), n, piece, ronde::DataType::kFloat32,
                      ronde::ReduceOp::kSum, 1.0);
  }
  for (int k = 1; k < n; ++k) {
    const auto peer = static_cast<size_t>((me + k) % n);
    std::memcpy(b.out[peer].data() + start, out + start, len * sizeof(float));
  }
  team.meet();
}

void runRank(Team& team, Buffers& b, int me, const std::vector<size_t>& sizes, int trials,
             double trial_seconds, std::mutex& print) {
  pinToCore(me);
  const int n = team.size();
  std::vector<float> blocks(kBlockBytes / sizeof(float) * static_cast<size_t>(n));
  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    auto& in = b.in[static_cast<size_t>(me)];
    auto& out = b.out[static_cast<size_t>(me)];
    in.assign(count, static_cast<float>(me + 1));
    out.assign(count, 0.0f);
    team.meet();
    RankOps ops;
    ops.barrier = [&] { team.meet(); };
    ops.max = [&](double v) { return team.max(me, v); };

    ops.run = [&] { directAllreduce(team, b, me, count, blocks); };
    const Timing bound = timeCollective(ops, bytes, trials, trial_seconds);
    const float want = static_cast<float>(n * (n + 1) / 2);
    const size_t wrong = static_cast<size_t>(
        std::count_if(out.begin(), out.end(), [&](float v) { return v != want; }));

    std::vector<float> copy(count);
    ops.run = [&] { std::memcpy(copy.data(), in.data(), bytes); };
    const Timing memcpy_all = timeCollective(ops, bytes, trials, trial_seconds);
    if (me == 0) {
      std::lock_guard<std::mutex> lock(print);
      if (wrong != 0) std::printf("# %zu wrong elements at %zu bytes\n", wrong, bytes);
      printResult("bound", "threads", Collective::kAllreduce, n, bytes, bound);
      std::printf(
          "RESULT impl=memcpy transport=all-cores collective=memcpy ranks=%d bytes=%zu "
          "iterations=%d trials=%d us=%.3f best_us=%.3f busbw=%.3f\n",
          n, bytes, memcpy_all.iterations, memcpy_all.trials, memcpy_all.median_seconds * 1e6,
          memcpy_all.best_seconds * 1e6, bytes / memcpy_all.median_seconds / 1e9);
      std::fflush(stdout);
    }
    team.meet();
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args(argc, argv);
  const int ranks = args.getInt("ranks", 2);
  const std::vector<size_t> sizes = args.getSizes();
  const int trials = args.getInt("trials", 3);
  const double trial_seconds = std::stod(args.get("trial-seconds", "0.15"));
  args.finish();

  Team team(ranks);
  Buffers buffers;
  buffers.in.resize(static_cast<size_t>(ranks));
  buffers.out.resize(static_cast<size_t>(ranks));
  std::mutex print;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back(
        [&, r] { runRank(team, buffers, r, sizes, trials, trial_seconds, print); });
  }
  for (auto& t : threads) t.join();
  return 0;
}
