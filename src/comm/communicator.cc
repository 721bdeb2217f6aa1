// The parts of Communicator shared by every implementation: async forms and conveniences.
#include "ronde/communicator.h"

#include <numeric>

#include "backends/backend_registry.h"
#include "comm/failure_watching_store.h"

namespace ronde {

CommOptions CommOptions::fromSettings(const Settings& s) {
  CommOptions o;
  o.hostname = s.hostname;
  o.interface = s.interface;
  o.secret = s.secret;
  o.transport = s.transport;
  o.backend = s.cpu_operations;
  o.timeout = Duration(static_cast<int64_t>(s.timeout_seconds * 1000));
  o.start_timeout = Duration(static_cast<int64_t>(s.start_timeout_seconds * 1000));
  o.small_allreduce_bytes = s.small_allreduce_bytes;
  o.shm_chunk_bytes = s.shm_chunk_bytes;
  o.tcp_chunk_bytes = s.tcp_chunk_bytes;
  o.hierarchical_allreduce = s.hierarchical_allreduce;
  o.hierarchical_chunk_bytes = s.hierarchical_chunk_bytes;
  o.hierarchical_allgather = s.hierarchical_allgather;
  o.hierarchical_reducescatter = s.hierarchical_reducescatter;
  if (s.shm_allreduce != ShmAllreduce::kAuto)
    o.shm_direct_read = s.shm_allreduce == ShmAllreduce::kDirect;
  return o;
}

void Communicator::setTuning(const CommTuning&) {
  throw makeError(ErrorCode::kConfig, "the ", transportName(),
                  " backend cannot change its algorithm knobs at run time");
}

std::string Communicator::describeRank(int r) const {
  return "rank " + std::to_string(r) + " (host " + host(r) + ")";
}

std::unique_ptr<Communicator> Communicator::subCommunicator(const std::vector<int>&,
                                                            const std::string&) {
  throw makeError(ErrorCode::kConfig, "the ", transportName(),
                  " communicator cannot build a communicator over a subset of its ranks");
}

std::unique_ptr<Communicator> Communicator::deviceCommunicator(const std::string& backend,
                                                               const std::string& name,
                                                               int cuda_device) {
  const CommOptions* mine = formationOptions();
  if (mine == nullptr) {
    throw makeError(ErrorCode::kConfig, "the ", transportName(), " communicator cannot build a ",
                    backend, " communicator beside itself");
  }
  const Backend& chosen = deviceBackend(backend);  // Error(kConfig) when not built
  if (size() > 1 && !mine->store) {
    throw makeError(ErrorCode::kConfig, "a ", backend, " communicator beside the ",
                    transportName(), " communicator needs ronde's rendezvous store, and ",
                    describeRank(rank()), " has none (start the job with `ronde run`, or set ",
                    "RONDE_STORE_ADDRESS)");
  }
  std::vector<int> everyone(static_cast<size_t>(size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  CommOptions options = subsetOptions(*mine, everyone, name);
  options.cuda_device = cuda_device;
  return chosen.create(options);
}

bool Communicator::supportsReduction(DataType, ReduceOp op) const {
  return op != ReduceOp::kAdasum;  // not elementwise: the runtime runs it over allreduces
}

int Communicator::indexInSubset(const std::vector<int>& ranks) const {
  int mine = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size() || (i > 0 && ranks[i] <= ranks[i - 1])) {
      throw makeError(ErrorCode::kInvalidArgument,
                      "a sub-communicator needs sorted, distinct ranks below ", size(),
                      "; got rank ", ranks[i], " at position ", i);
    }
    if (ranks[i] == rank()) mine = static_cast<int>(i);
  }
  if (mine < 0) {
    throw makeError(ErrorCode::kInvalidArgument, describeRank(rank()),
                    " is not among the ranks of the sub-communicator it was asked to join");
  }
  return mine;
}

CommOptions Communicator::subsetOptions(const CommOptions& mine, const std::vector<int>& ranks,
                                        const std::string& name) const {
  CommOptions options = mine;
  options.rank = indexInSubset(ranks);
  options.size = static_cast<int>(ranks.size());
  options.hostname = host(rank());
  options.rank_labels.clear();
  for (int r : ranks) {
    options.rank_labels.push_back(mine.rank_labels.empty() ? r
                                                           : mine.rank_labels[static_cast<size_t>(r)]);
  }
  if (mine.store) {
    // Formed inside a running job: a member that fails meanwhile is reported at once (its
    // published failure), not after the start timeout.
    std::shared_ptr<Store> failures = mine.failure_store ? mine.failure_store : mine.store;
    options.store = std::make_shared<FailureWatchingStore>(
        std::make_shared<PrefixStore>(mine.store, name), std::move(failures));
  }
  return options;
}

void Communicator::allgather(const void* in, void* out, size_t count, DataType type) {
  allgatherv(in, out, std::vector<size_t>(static_cast<size_t>(size()), count), type);
}

std::shared_ptr<Work> Communicator::allreduceAsync(const void* in, void* out, size_t count,
                                                   DataType type, ReduceOp op, Scaling scaling) {
  return enqueue([=, this] { allreduce(in, out, count, type, op, scaling); });
}

std::shared_ptr<Work> Communicator::allgathervAsync(const void* in, void* out,
                                                    std::vector<size_t> counts, DataType type) {
  return enqueue([=, this, counts = std::move(counts)] { allgatherv(in, out, counts, type); });
}

std::shared_ptr<Work> Communicator::broadcastAsync(void* buffer, size_t count, DataType type,
                                                   int root) {
  return enqueue([=, this] { broadcast(buffer, count, type, root); });
}

std::shared_ptr<Work> Communicator::alltoallvAsync(const void* in, std::vector<size_t> send_counts,
                                                   void* out, std::vector<size_t> recv_counts,
                                                   DataType type) {
  return enqueue([=, this, send_counts = std::move(send_counts), recv_counts = std::move(recv_counts)] {
    alltoallv(in, send_counts, out, recv_counts, type);
  });
}

std::shared_ptr<Work> Communicator::reducescatterAsync(const void* in, void* out,
                                                       std::vector<size_t> counts, DataType type,
                                                       ReduceOp op, Scaling scaling) {
  return enqueue([=, this, counts = std::move(counts)] {
    reducescatter(in, out, counts, type, op, scaling);
  });
}

std::shared_ptr<Work> Communicator::barrierAsync() {
  return enqueue([this] { barrier(); });
}

}  // namespace ronde
