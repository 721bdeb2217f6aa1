// The Gloo peer: gloo::allreduce with the ring algorithm (float32 sum with gloo's own
// reduction), gloo::allgather and gloo::broadcast over Gloo's TCP transport on loopback,
// timed exactly as collectives_bench times ronde (harness.h). N ranks are forked from this
// program and meet through a gloo::rendezvous::FileStore in a fresh temporary directory.
//
//   gloo_bench --ranks=2 [--sizes=4K:256M] [--collectives=allreduce,allgather,broadcast]
//       [--trials=3] [--trial-seconds=0.15] [--bind=core|none]
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using namespace ronde::bench;
using ReduceFn = void (*)(void*, const void*, const void*, size_t);

constexpr uint32_t kTimedTag = 1;
constexpr uint32_t kControlTag = 2;

struct Config {
  int ranks = 2;
  std::vector<size_t> sizes;
  std::vector<Collective> collectives;
  int trials = 3;
  bool bind = true;  // rank r on CPU r (modulo the CPUs), like mpirun --bind-to core
  double trial_seconds = 0.15;
};

bool benchOne(const std::shared_ptr<gloo::Context>& context, const Config& config,
              Collective collective, size_t bytes) {
  const int rank = context->rank;
  const int n = context->size;
  const size_t count = bytes / sizeof(float);
  RankOps ops;
  ops.barrier = [&] {
    gloo::BarrierOptions options(context);
    options.setTag(kControlTag);
    gloo::barrier(options);
  };
  ops.max = [&](double value) {
    gloo::AllreduceOptions options(context);
    options.setOutput(&value, 1);
    options.setReduceFunction(static_cast<ReduceFn>(&gloo::max<double>));
    options.setTag(kControlTag);
    gloo::allreduce(options);
    return value;
  };

  size_t errors = 0;
  std::vector<float> in;
  std::vector<float> out;
  switch (collective) {
    case Collective::kAllreduce: {
      in.resize(count);
      out.resize(count);
      fillAllreduceInput(in.data(), count, rank);
      // Built once per size: the unbound buffers are registered once, as a framework would.
      auto options = std::make_shared<gloo::AllreduceOptions>(context);
      options->setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      options->setInput(in.data(), count);
      options->setOutput(out.data(), count);
      options->setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
      options->setTag(kTimedTag);
      gloo::allreduce(*options);
      errors = countAllreduceErrors(out.data(), count, n);
      ops.run = [options] { gloo::allreduce(*options); };
      break;
    }
    case Collective::kAllgather: {
      const size_t per_rank = count / n;
      in.resize(per_rank);
      out.resize(per_rank * n);
      fillAllgatherInput(in.data(), per_rank, rank);
      auto options = std::make_shared<gloo::AllgatherOptions>(context);
      options->setInput(in.data(), per_rank);
      options->setOutput(out.data(), per_rank * n);
      options->setTag(kTimedTag);
      gloo::allgather(*options);
      errors = countAllgatherErrors(out.data(), per_rank, n);
      ops.run = [options] { gloo::allgather(*options); };
      break;
    }
    case Collective::kBroadcast: {
      out.resize(count);
      if (rank == 0) fillBroadcastRoot(out.data(), count);
      auto options = std::make_shared<gloo::BroadcastOptions>(context);
      options->setOutput(out.data(), count);
      options->setRoot(0);
      options->setTag(kTimedTag);
      gloo::broadcast(*options);
      errors = countBroadcastErrors(out.data(), count);
      ops.run = [options] { gloo::broadcast(*options); };
      break;
    }
  }
  if (errors > 0) {
    std::fprintf(stderr, "VERIFY FAILED: gloo %s rank %d, %s: %zu of %zu elements wrong\n",
                 collectiveName(collective), rank, formatBytes(bytes).c_str(), errors, count);
    return false;
  }
  const Timing timing = timeCollective(ops, bytes, config.trials, config.trial_seconds);
  if (rank == 0) printResult("gloo", "tcp", collective, n, bytes, timing);
  return true;
}

int runRank(int rank, const Config& config, const std::string& store_dir) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(store_dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, config.ranks);
  context->setTimeout(std::chrono::seconds(300));
  context->connectFullMesh(store, device);
  for (Collective collective : config.collectives) {
    for (size_t bytes : config.sizes) {
      if (!benchOne(context, config, collective, bytes)) return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args(argc, argv);
  Config config;
  config.ranks = args.getInt("ranks", 2);
  config.sizes = args.getSizes();
  config.collectives = args.getCollectives("allreduce,allgather,broadcast");
  config.trials = args.getInt("trials", 3);
  config.bind = args.get("bind", "core") == "core";
  config.trial_seconds = std::stod(args.get("trial-seconds", "0.15"));
  args.finish();

  char dir_template[] = "/tmp/gloo_bench.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string store_dir = dir_template;
  const int code = runForkedRanks(config.ranks, config.bind,
                                  [&](int rank) { return runRank(rank, config, store_dir); });
  std::filesystem::remove_all(store_dir);
  return code;
}
