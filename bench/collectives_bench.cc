// ronde's collectives over its own transports: N ranks forked from this program meet
// through a TCP store served here and time allreduce (float32 sum), allgather and broadcast
// from 4 KiB to 256 MiB. Rank 0 prints one RESULT line per size (format in harness.h).
//
//   collectives_bench --ranks=2 --transport=shm|tcp [--sizes=4K:256M]
//       [--collectives=allreduce,allgather,broadcast] [--trials=3] [--trial-seconds=0.15]
//       [--bind=core|none]
//       [--shm-chunk=256K] [--tcp-chunk=512K] [--small-allreduce=64K] [--shm-direct=1|0]
//       [--huge-pages=0|1] [--label=ronde]
//
// The chunk and threshold flags override CommOptions so that they can be tuned from here;
// --shm-direct forces one shared-memory allreduce (without it the communicator times both).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/huge_page_buffer.h"
#include "harness.h"
#include "ronde/communicator.h"

namespace {

using ronde::Communicator;
using ronde::DataType;
using ronde::ReduceOp;
using namespace ronde::bench;

struct Config {
  int ranks = 2;
  std::string transport;
  ronde::TransportKind transport_kind = ronde::TransportKind::kShm;
  std::vector<size_t> sizes;
  std::vector<Collective> collectives;
  int trials = 3;
  bool bind = true;  // rank r on CPU r (modulo the CPUs), like mpirun --bind-to core
  double trial_seconds = 0.15;
  int64_t shm_chunk = 0;         // 0: ronde's default
  int64_t tcp_chunk = 0;         // 0: ronde's default
  int64_t small_allreduce = -1;  // -1: ronde's default
  // CommOptions::shm_direct_read (0: stage through the slots); unset: the communicator's own
  // choice (timed at construction).
  std::optional<bool> shm_direct;
  // Input and output on transparent huge pages, as the runtime's fusion buffer is: what page
  // pinning costs the direct shm allreduce. Not for comparisons with the peers, whose
  // programs use ordinary allocations.
  bool huge_pages = false;
  std::string label = "ronde";
};

// A rank's buffer: an ordinary vector, or (--huge-pages=1) one on transparent huge pages.
class BenchBuffer {
 public:
  explicit BenchBuffer(bool huge) : huge_(huge) {}
  void resize(size_t count) {
    if (huge_) {
      data_ = reinterpret_cast<float*>(pages_.sized(count * sizeof(float)));
      std::fill(data_, data_ + count, 0.0f);  // fault every page in before timing
    } else {
      vector_.assign(count, 0.0f);
      data_ = vector_.data();
    }
  }
  float* data() { return data_; }

 private:
  bool huge_;
  std::vector<float> vector_;
  ronde::HugePageBuffer pages_;
  float* data_ = nullptr;
};

// Runs one collective at one size: checks the result once, then times it.
bool benchOne(Communicator& comm, const Config& config, Collective collective, size_t bytes) {
  const int rank = comm.rank();
  const int n = comm.size();
  const size_t count = bytes / sizeof(float);
  ronde::bench::RankOps ops;
  ops.barrier = [&] { comm.barrier(); };
  ops.max = [&](double value) {
    comm.allreduce(&value, &value, 1, DataType::kFloat64, ReduceOp::kMax);
    return value;
  };

  size_t errors = 0;
  BenchBuffer in(config.huge_pages);
  BenchBuffer out(config.huge_pages);
  switch (collective) {
    case Collective::kAllreduce:
      in.resize(count);
      out.resize(count);
      fillAllreduceInput(in.data(), count, rank);
      comm.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
      errors = countAllreduceErrors(out.data(), count, n);
      ops.run = [&] {
        comm.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
      };
      break;
    case Collective::kAllgather: {
      const size_t per_rank = count / n;
      in.resize(per_rank);
      out.resize(per_rank * n);
      fillAllgatherInput(in.data(), per_rank, rank);
      comm.allgather(in.data(), out.data(), per_rank, DataType::kFloat32);
      errors = countAllgatherErrors(out.data(), per_rank, n);
      ops.run = [&, per_rank] {
        comm.allgather(in.data(), out.data(), per_rank, DataType::kFloat32);
      };
      break;
    }
    case Collective::kBroadcast:
      out.resize(count);
      if (rank == 0) fillBroadcastRoot(out.data(), count);
      comm.broadcast(out.data(), count, DataType::kFloat32, 0);
      errors = countBroadcastErrors(out.data(), count);
      ops.run = [&] { comm.broadcast(out.data(), count, DataType::kFloat32, 0); };
      break;
  }
  if (errors > 0) {
    std::fprintf(stderr, "VERIFY FAILED: %s %s rank %d, %s: %zu of %zu elements wrong\n",
                 config.label.c_str(), collectiveName(collective), rank, formatBytes(bytes).c_str(),
                 errors, count);
    return false;
  }
  const Timing timing = timeCollective(ops, bytes, config.trials, config.trial_seconds);
  if (rank == 0) printResult(config.label, config.transport, collective, n, bytes, timing);
  return true;
}

int runRank(int rank, const Config& config, int store_port) {
  ronde::CommOptions options;
  options.rank = rank;
  options.size = config.ranks;
  options.store = ronde::makeTcpStore("127.0.0.1", store_port, "", ronde::Duration(30000));
  options.transport = config.transport_kind;
  options.interface = "127.0.0.1";
  if (config.shm_chunk > 0) options.shm_chunk_bytes = config.shm_chunk;
  if (config.tcp_chunk > 0) options.tcp_chunk_bytes = config.tcp_chunk;
  if (config.small_allreduce >= 0) options.small_allreduce_bytes = config.small_allreduce;
  options.shm_direct_read = config.shm_direct;
  auto comm = Communicator::create(options);
  if (rank == 0) {
    std::fprintf(stderr,
                 "%s: %d ranks over %s (shm chunk %lld, tcp chunk %lld, small %lld, large shm "
                 "allreduce %s)\n",
                 config.label.c_str(), config.ranks, comm->transportName().c_str(),
                 static_cast<long long>(options.shm_chunk_bytes),
                 static_cast<long long>(options.tcp_chunk_bytes),
                 static_cast<long long>(options.small_allreduce_bytes),
                 comm->tuning().shm_direct_read ? "direct" : "staged");
  }
  for (Collective collective : config.collectives) {
    for (size_t bytes : config.sizes) {
      if (!benchOne(*comm, config, collective, bytes)) return 1;
    }
  }
  comm->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args(argc, argv);
  Config config;
  config.ranks = args.getInt("ranks", 2);
  config.transport = args.get("transport", "shm");
  config.sizes = args.getSizes();
  config.collectives = args.getCollectives("allreduce,allgather,broadcast");
  config.trials = args.getInt("trials", 3);
  config.bind = args.get("bind", "core") == "core";
  config.trial_seconds = std::stod(args.get("trial-seconds", "0.15"));
  config.shm_chunk = args.getBytes("shm-chunk", 0);
  config.tcp_chunk = args.getBytes("tcp-chunk", 0);
  config.small_allreduce = args.getBytes("small-allreduce", -1);
  const int shm_direct = args.getInt("shm-direct", -1);
  if (shm_direct >= 0) config.shm_direct = shm_direct != 0;
  config.huge_pages = args.getInt("huge-pages", 0) != 0;
  config.label = args.get("label", "ronde");
  args.finish();
  if (config.transport == "shm") {
    config.transport_kind = ronde::TransportKind::kShm;
  } else if (config.transport == "tcp") {
    config.transport_kind = ronde::TransportKind::kTcp;
  } else {
    std::fprintf(stderr, "--transport wants shm or tcp, got '%s'\n", config.transport.c_str());
    return 2;
  }

  // The store serves the children's rendezvous from a thread of this (parent) process.
  ronde::TcpStoreServer server("127.0.0.1", 0, "");
  const int port = server.port();
  return runForkedRanks(config.ranks, config.bind, [&](int rank) {
    try {
      return runRank(rank, config, port);
    } catch (const ronde::Error& e) {
      std::fprintf(stderr, "rank %d: [%s] %s\n", rank, ronde::errorCodeName(e.code()), e.what());
      return 1;
    }
  });
}
