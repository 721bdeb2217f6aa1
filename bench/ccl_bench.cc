// The oneCCL peer: ccl::allreduce (float32 sum), ccl::allgather and ccl::broadcast through
// oneCCL's C++ API, timed exactly as collectives_bench times ronde (harness.h). Built only by
// bench/setup_peers.sh, against the oneccl-cpu wheel in .venv-peers; never by CMake or CI.
//
// Two ways to start it:
//   ccl_bench --ranks=2 [--bind=core|none] ...     forks the ranks itself (ATL ofi)
//   mpiexec -n 2 ccl_bench --store-dir=DIR ...     one rank per process, its rank and size
//                                                   from the launcher's PMI_RANK / PMI_SIZE
//                                                   (ATL mpi needs an MPI launcher)
// Either way rank 0 opens oneCCL's main KVS (a TCP socket server inside oneCCL, bound on the
// interface CCL_KVS_IFACE names; the runner sets lo) and hands its address to the other
// ranks through a file in a directory they share; they connect to it and the communicator
// is built over it. oneCCL's transport (its ATL: OFI with a provider, or MPI) and algorithms
// come from its CCL_* / FI_* environment, set by bench/run_collectives_bench.py and
// described in docs/benchmarks.md; --transport only labels the results.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "oneapi/ccl.hpp"

namespace {

using namespace ronde::bench;

constexpr auto kAddressTimeout = std::chrono::seconds(60);

struct Config {
  int ranks = 2;
  std::vector<size_t> sizes;
  std::vector<Collective> collectives;
  int trials = 3;
  bool bind = true;
  double trial_seconds = 0.15;
  std::string transport;
};

std::string hostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// Rank 0 publishes the main KVS address; the rename makes it appear whole or not at all.
void publishAddress(const std::string& dir, const ccl::kvs::address_type& address) {
  const std::string path = dir + "/kvs_address";
  {
    std::ofstream out(path + ".tmp", std::ios::binary);
    out.write(address.data(), static_cast<std::streamsize>(address.size()));
    if (!out) throw std::runtime_error("cannot write " + path + ".tmp");
  }
  std::filesystem::rename(path + ".tmp", path);
}

ccl::kvs::address_type awaitAddress(const std::string& dir, int rank) {
  const std::string path = dir + "/kvs_address";
  const auto deadline = std::chrono::steady_clock::now() + kAddressTimeout;
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("rank " + std::to_string(rank) + " on " + hostName() +
                               ": no oneCCL KVS address from rank 0 in " + path + " after " +
                               std::to_string(kAddressTimeout.count()) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ccl::kvs::address_type address{};
  std::ifstream in(path, std::ios::binary);
  in.read(address.data(), static_cast<std::streamsize>(address.size()));
  if (in.gcount() != static_cast<std::streamsize>(address.size())) {
    throw std::runtime_error("rank " + std::to_string(rank) + ": short KVS address in " + path);
  }
  return address;
}

bool benchOne(ccl::communicator& comm, const Config& config, Collective collective, size_t bytes) {
  const int rank = comm.rank();
  const int n = comm.size();
  const size_t count = bytes / sizeof(float);
  RankOps ops;
  ops.barrier = [&] { ccl::barrier(comm).wait(); };
  ops.max = [&](double value) {
    double result = 0;
    ccl::allreduce(&value, &result, 1, ccl::reduction::max, comm).wait();
    return result;
  };

  size_t errors = 0;
  std::vector<float> in;
  std::vector<float> out;
  switch (collective) {
    case Collective::kAllreduce:
      in.resize(count);
      out.resize(count);
      fillAllreduceInput(in.data(), count, rank);
      ccl::allreduce(in.data(), out.data(), count, ccl::reduction::sum, comm).wait();
      errors = countAllreduceErrors(out.data(), count, n);
      ops.run = [&] {
        ccl::allreduce(in.data(), out.data(), count, ccl::reduction::sum, comm).wait();
      };
      break;
    case Collective::kAllgather: {
      const size_t per_rank = count / n;
      in.resize(per_rank);
      out.resize(per_rank * n);
      fillAllgatherInput(in.data(), per_rank, rank);
      // allgatherv with equal counts: the call every oneCCL release has (frameworks use it).
      const std::vector<size_t> counts(n, per_rank);
      ccl::allgatherv(in.data(), per_rank, out.data(), counts, comm).wait();
      errors = countAllgatherErrors(out.data(), per_rank, n);
      ops.run = [&, per_rank, counts] {
        ccl::allgatherv(in.data(), per_rank, out.data(), counts, comm).wait();
      };
      break;
    }
    case Collective::kBroadcast:
      out.resize(count);
      if (rank == 0) fillBroadcastRoot(out.data(), count);
      ccl::broadcast(out.data(), count, 0, comm).wait();
      errors = countBroadcastErrors(out.data(), count);
      ops.run = [&] { ccl::broadcast(out.data(), count, 0, comm).wait(); };
      break;
  }
  if (errors > 0) {
    std::fprintf(stderr, "VERIFY FAILED: oneccl %s rank %d on %s, %s: %zu of %zu elements wrong\n",
                 collectiveName(collective), rank, hostName().c_str(), formatBytes(bytes).c_str(),
                 errors, count);
    return false;
  }
  const Timing timing = timeCollective(ops, bytes, config.trials, config.trial_seconds);
  if (rank == 0) printResult("oneccl", config.transport, collective, n, bytes, timing);
  return true;
}

int runRank(int rank, int ranks, const Config& config, const std::string& store_dir) {
  try {
    ccl::init();
    std::shared_ptr<ccl::kvs> kvs;
    if (rank == 0) {
      kvs = ccl::create_main_kvs();
      publishAddress(store_dir, kvs->get_address());
    } else {
      kvs = ccl::create_kvs(awaitAddress(store_dir, rank));
    }
    auto comm = ccl::create_communicator(ranks, rank, kvs);
    for (Collective collective : config.collectives) {
      for (size_t bytes : config.sizes) {
        if (!benchOne(comm, config, collective, bytes)) return 1;
      }
    }
    ccl::barrier(comm).wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oneccl rank %d on %s failed: %s\n", rank, hostName().c_str(), e.what());
    return 1;
  }
  return 0;
}

int envInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::stoi(value) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  Args args(argc, argv);
  Config config;
  // Under mpiexec (hydra) every process is one rank; alone, this program forks them.
  const int launched_rank = envInt("PMI_RANK", -1);
  config.ranks = args.getInt("ranks", envInt("PMI_SIZE", 2));
  config.sizes = args.getSizes();
  config.collectives = args.getCollectives("allreduce,allgather,broadcast");
  config.trials = args.getInt("trials", 3);
  config.bind = args.get("bind", "core") == "core";
  config.trial_seconds = std::stod(args.get("trial-seconds", "0.15"));
  config.transport = args.get("transport", "ofi");
  std::string store_dir = args.get("store-dir", "");
  args.finish();

  if (launched_rank >= 0) {
    if (store_dir.empty()) {
      std::fprintf(stderr,
                   "ccl_bench: under a launcher (PMI_RANK=%d), --store-dir=DIR must "
                   "name a fresh directory every rank can reach\n",
                   launched_rank);
      return 2;
    }
    return runRank(launched_rank, config.ranks, config, store_dir);
  }
  const bool own_dir = store_dir.empty();
  if (own_dir) {
    char dir_template[] = "/tmp/ccl_bench.XXXXXX";
    if (mkdtemp(dir_template) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    store_dir = dir_template;
  }
  const int code = runForkedRanks(config.ranks, config.bind, [&](int rank) {
    // Every forked rank is on this host: say so, as a launcher would, rather than let oneCCL
    // guess its node-local layout from the ATL.
    setenv("CCL_LOCAL_RANK", std::to_string(rank).c_str(), 0);
    setenv("CCL_LOCAL_SIZE", std::to_string(config.ranks).c_str(), 0);
    return runRank(rank, config.ranks, config, store_dir);
  });
  if (own_dir) std::filesystem::remove_all(store_dir);
  return code;
}
