// What the collective benchmarks share, so that ronde, OpenMPI and Gloo are measured the
// same way: the sizes, the warm-up and iteration counts, how a time is taken, the data
// patterns that make every result checkable, and the one-line result format that
// run_collectives_bench.py turns into tables.
//
// Conventions (those of nccl-tests): `bytes` is the allreduce or broadcast buffer and the
// allgather output (each rank contributes bytes / ranks). Bus bandwidth scales the
// algorithm bandwidth (bytes / time) by 2(N-1)/N for allreduce, (N-1)/N for allgather and 1
// for broadcast, so that every collective is compared with the link speed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ronde::bench {

enum class Collective { kAllreduce, kAllgather, kBroadcast };

const char* collectiveName(Collective collective);
double busBandwidthFactor(Collective collective, int ranks);

// --name=value flags. Every flag must be read once; finish() rejects the rest.
class Args {
 public:
  Args(int argc, char** argv);
  std::string get(const std::string& name, const std::string& fallback);
  int getInt(const std::string& name, int fallback);
  // Accepts a plain number or a K/M/G (binary) suffix: "4K", "256M".
  int64_t getBytes(const std::string& name, int64_t fallback);
  // --sizes=4K:256M: the powers of four from the first to the second bound.
  std::vector<size_t> getSizes();
  // --collectives=allreduce,allgather,broadcast
  std::vector<Collective> getCollectives(const std::string& fallback);
  void finish();

 private:
  std::map<std::string, std::string> values_;
  std::string program_;
};

int64_t parseBytes(const std::string& text);
std::string formatBytes(size_t bytes);

// One rank's view of the collective under test, supplied by each benchmark.
struct RankOps {
  std::function<void()> run;          // one collective on buffers prepared beforehand
  std::function<void()> barrier;      // all ranks meet
  std::function<double(double)> max;  // the maximum of a value over the ranks
};

struct Timing {
  double median_seconds = 0;  // per collective: the median of the trials
  double best_seconds = 0;    // per collective: the fastest trial
  int iterations = 0;         // per trial
  int trials = 0;
};

// Warms up, then picks an iteration count that makes a trial last about `trial_seconds`
// (at least 1, at most 2000, the same on every rank) and runs `trials` trials. A trial's time
// is the slowest rank's average per collective.
Timing timeCollective(const RankOps& ops, size_t bytes, int trials, double trial_seconds);

// Checkable data: exact in float32 for every size and rank count used here.
void fillAllreduceInput(float* data, size_t count, int rank);
size_t countAllreduceErrors(const float* data, size_t count, int ranks);
void fillAllgatherInput(float* data, size_t count, int rank);
size_t countAllgatherErrors(const float* data, size_t count_per_rank, int ranks);
void fillBroadcastRoot(float* data, size_t count);
size_t countBroadcastErrors(const float* data, size_t count);

// Prints "RESULT impl=... transport=... collective=... ranks=... bytes=... us=... busbw=..."
// on stdout: the format run_collectives_bench.py reads.
void printResult(const std::string& impl, const std::string& transport, Collective collective,
                 int ranks, size_t bytes, const Timing& timing);
void printMemcpyResult(size_t bytes, const Timing& timing);

// Forks `ranks` children that each run `body(rank)` and exit with its return value; waits
// for them all. Returns 0 when every child exited 0. Children die with the parent. With
// `bind`, rank r runs only on the r-th allowed CPU (modulo their number), as mpirun
// --bind-to core does: on a small shared host the scheduler may otherwise stack two ranks
// on one core, and a spinning rank then holds the core its peer needs.
int runForkedRanks(int ranks, bool bind, const std::function<int(int rank)>& body);

}  // namespace ronde::bench
