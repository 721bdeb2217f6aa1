// The runtime's costs, measured on N ranks forked from this program (shared memory):
//   1. a step of 200 allreduces of 16 KiB each, fused versus RONDE_FUSION_THRESHOLD=0;
//   2. one 64 MiB allreduce through the runtime versus the raw Communicator::allreduce, and a
//      step of 16 allreduces of 1 MiB versus the raw allreduce of 16 MiB (run it with
//      --fusion-max-tensor-bytes=0 too: that fuses them into one 16 MiB buffer, as Horovod);
//   3. the negotiation cost of a step of 200 tensors once the cache knows them;
//   4. the latency of a lone 4 KiB allreduce through the runtime versus the raw one, back to
//      back and after a pause long enough for the runtime to go idle.
// Usage: runtime_bench [--ranks=2] [--steps=200] [--cycle-ms=1] [--fusion-max-tensor-bytes=N]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ronde/runtime.h"
#include "ronde/store.h"

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Options {
  int ranks = 2;
  int steps = 200;
  double cycle_ms = 1.0;
  int64_t fusion_max_tensor_bytes = ronde::Settings{}.fusion_max_tensor_bytes;
};

std::unique_ptr<ronde::Communicator> communicator(int rank, const Options& o, int port,
                                                  const std::string& prefix) {
  ronde::CommOptions options;
  options.rank = rank;
  options.size = o.ranks;
  options.store = std::make_shared<ronde::PrefixStore>(
      ronde::makeTcpStore("127.0.0.1", port, "", std::chrono::seconds(30)), prefix);
  return ronde::Communicator::create(options);
}

// Runs `steps` steps of `count` allreduces of `elements` floats; returns each step's seconds.
std::vector<double> timeSteps(ronde::Runtime& rt, int steps, int count, size_t elements) {
  std::vector<std::shared_ptr<ronde::HostTensor>> tensors;
  for (int i = 0; i < count; ++i) {
    tensors.push_back(std::make_shared<ronde::HostTensor>(
        ronde::DataType::kFloat32, std::vector<int64_t>{static_cast<int64_t>(elements)}));
  }
  std::vector<std::shared_ptr<ronde::Handle>> handles(static_cast<size_t>(count));
  std::vector<double> samples;
  auto run = [&](int n) {
    for (int s = 0; s < n; ++s) {
      auto start = Clock::now();
      for (int i = 0; i < count; ++i) {
        ronde::Request r;
        r.name = "grad." + std::to_string(i);
        r.input = r.output = tensors[static_cast<size_t>(i)];
        handles[static_cast<size_t>(i)] = rt.enqueue(std::move(r));
      }
      for (auto& h : handles) h->wait();
      samples.push_back(since(start));
    }
  };
  run(5);  // warm-up: negotiated once, then cached
  samples.clear();
  run(steps);
  return samples;
}

void runRank(int rank, const Options& o, int port) {
  const size_t big = 64u << 20;
  std::vector<float> buffer(big / sizeof(float), 1.0f);
  std::vector<float> small(200, 1.0f);
  auto raw = communicator(rank, o, port, "raw");
  ronde::Settings settings;
  settings.cycle_time_ms = o.cycle_ms;
  settings.fusion_max_tensor_bytes = o.fusion_max_tensor_bytes;
  auto rt = ronde::Runtime::init(settings, communicator(rank, o, port, "runtime"));
  auto tensor = std::make_shared<ronde::HostTensor>(
      ronde::DataType::kFloat32, std::vector<int64_t>{static_cast<int64_t>(buffer.size())});

  // Rounds alternate the variants, so that a change in the machine's load hits both alike.
  std::vector<double> fused, unfused, raw_big, runtime_big, raw_small, tiny;
  std::vector<double> fused_large, raw_large;
  std::vector<float> large(16 * (1u << 20) / sizeof(float), 1.0f);
  std::vector<double> lone_raw, lone_runtime, lone_after_pause;
  std::vector<float> lone(1024, 1.0f);
  auto lone_tensor =
      std::make_shared<ronde::HostTensor>(ronde::DataType::kFloat32, std::vector<int64_t>{1024});
  double negotiation = 0, cached = 0, responses = 0, collectives = 0, tiny_steps = 0;
  const int rounds = 5;
  for (int round = 0; round < rounds; ++round) {
    rt->setFusionThreshold(128ll << 20);
    for (double v : timeSteps(*rt, o.steps / rounds, 200, 16 * 1024 / sizeof(float)))
      fused.push_back(v);
    rt->setFusionThreshold(0);
    for (double v : timeSteps(*rt, o.steps / rounds, 200, 16 * 1024 / sizeof(float)))
      unfused.push_back(v);
    rt->setFusionThreshold(128ll << 20);

    for (int i = 0; i < 3; ++i) {
      auto start = Clock::now();
      raw->allreduce(buffer.data(), buffer.data(), buffer.size(), ronde::DataType::kFloat32,
                     ronde::ReduceOp::kSum);
      raw_big.push_back(since(start));
      ronde::Request r;
      r.name = "big";
      r.input = r.output = tensor;
      start = Clock::now();
      rt->enqueue(std::move(r))->wait();
      runtime_big.push_back(since(start));
    }
    // Fused or not as --fusion-max-tensor-bytes says; the raw allreduce runs on an ordinary
    // vector, as a user's buffer would be.
    for (double v : timeSteps(*rt, 10, 16, (1u << 20) / sizeof(float))) fused_large.push_back(v);
    for (int i = 0; i < 10; ++i) {
      auto start = Clock::now();
      raw->allreduce(large.data(), large.data(), large.size(), ronde::DataType::kFloat32,
                     ronde::ReduceOp::kSum);
      raw_large.push_back(since(start));
    }
    for (int i = 0; i < 200; ++i) {
      auto start = Clock::now();
      raw->allreduce(small.data(), small.data(), small.size(), ronde::DataType::kFloat32,
                     ronde::ReduceOp::kSum);
      raw_small.push_back(since(start));
    }

    // A lone 4 KiB allreduce: nothing else in flight, so all it can wait for is the runtime.
    for (int i = 0; i < 200; ++i) {
      auto start = Clock::now();
      raw->allreduce(lone.data(), lone.data(), lone.size(), ronde::DataType::kFloat32,
                     ronde::ReduceOp::kSum);
      lone_raw.push_back(since(start));
      ronde::Request r;
      r.name = "lone";
      r.input = r.output = lone_tensor;
      start = Clock::now();
      rt->enqueue(std::move(r))->wait();
      lone_runtime.push_back(since(start));
    }
    for (int i = 0; i < 10; ++i) {
      raw->barrier();  // the ranks start the pause together
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      ronde::Request r;
      r.name = "lone";
      r.input = r.output = lone_tensor;
      auto start = Clock::now();
      rt->enqueue(std::move(r))->wait();
      lone_after_pause.push_back(since(start));
    }

    // Negotiation of cached steps of 200 one-element tensors.
    timeSteps(*rt, 5, 200, 1);
    ronde::RuntimeStats before = rt->stats();
    for (double v : timeSteps(*rt, o.steps / rounds, 200, 1)) tiny.push_back(v);
    ronde::RuntimeStats after = rt->stats();
    tiny_steps += o.steps / rounds + 5;
    negotiation += after.negotiation_seconds - before.negotiation_seconds;
    cached += static_cast<double>(after.cached_responses - before.cached_responses);
    responses += static_cast<double>(after.responses - before.responses);
    collectives += static_cast<double>(after.collectives - before.collectives);
  }
  rt->shutdown();

  if (rank == 0) {
    std::printf("ranks=%d cycle_ms=%.2f fusion_max_tensor_bytes=%lld transport=%s (medians)\n",
                o.ranks, o.cycle_ms, static_cast<long long>(o.fusion_max_tensor_bytes),
                raw->transportName().c_str());
    std::printf(
        "200 x 16 KiB allreduce step: fused %.3f ms, unfused (threshold 0) %.3f ms, speedup "
        "%.2fx\n",
        median(fused) * 1e3, median(unfused) * 1e3, median(unfused) / median(fused));
    std::printf("64 MiB allreduce: raw %.3f ms, runtime %.3f ms, overhead %+.1f%%\n",
                median(raw_big) * 1e3, median(runtime_big) * 1e3,
                100 * (median(runtime_big) / median(raw_big) - 1));
    std::printf("16 x 1 MiB allreduce step: runtime %.3f ms, raw 16 MiB allreduce %.3f ms, "
                "ratio %.2fx\n",
                median(fused_large) * 1e3, median(raw_large) * 1e3,
                median(raw_large) / median(fused_large));
    std::printf(
        "200 x 4 B cached step: %.1f us per step (raw 800 B allreduce %.1f us); negotiation %.1f "
        "us per "
        "step; %.0f%% decided by the cache; %.2f collectives per step\n",
        median(tiny) * 1e6, median(raw_small) * 1e6, negotiation / tiny_steps * 1e6,
        100 * cached / responses, collectives / tiny_steps);
    std::printf(
        "lone 4 KiB allreduce: runtime %.1f us back to back, %.1f us after a 30 ms pause "
        "(raw %.1f us)\n",
        median(lone_runtime) * 1e6, median(lone_after_pause) * 1e6, median(lone_raw) * 1e6);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--ranks=", 0) == 0)
      o.ranks = std::stoi(a.substr(8));
    else if (a.rfind("--steps=", 0) == 0)
      o.steps = std::stoi(a.substr(8));
    else if (a.rfind("--cycle-ms=", 0) == 0)
      o.cycle_ms = std::stod(a.substr(11));
    else if (a.rfind("--fusion-max-tensor-bytes=", 0) == 0)
      o.fusion_max_tensor_bytes = std::stoll(a.substr(26));
    else {
      std::fprintf(stderr,
                   "usage: %s [--ranks=2] [--steps=200] [--cycle-ms=1] "
                   "[--fusion-max-tensor-bytes=N]\n",
                   argv[0]);
      return 2;
    }
  }
  ronde::TcpStoreServer server("127.0.0.1", 0, "");
  std::vector<pid_t> children;
  for (int rank = 0; rank < o.ranks; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        runRank(rank, o, server.port());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    children.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  return failures == 0 ? 0 : 1;
}
