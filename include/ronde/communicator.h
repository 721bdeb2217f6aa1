// The collective core: a Communicator joins `size` ranks and runs collectives on raw host
// buffers (pointer, element count, DataType) over ronde's own transports: shared memory
// between ranks of one host, TCP between hosts (or everywhere with RONDE_TRANSPORT=tcp).
//
// Contract (as in MPI and c10d): every rank of the communicator calls the same collectives in
// the same order with matching arguments. A disagreement (count, dtype, op, root) is detected
// and raised as Error(kMismatch) naming the ranks and values; a dead peer is Error(kPeerLost)
// naming its rank and host; every wait ends by the timeout (Error(kTimeout)). After any of
// these the communicator is aborted: later calls throw Error(kAborted) repeating the first
// error, and the caller builds a new communicator (this is how elastic training resets).
//
// Threads: the blocking collectives must not be called concurrently on one communicator.
// The async variants may be called from any thread; they run in submission order on the
// communicator's own worker thread. Destroying the communicator waits for queued work.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ronde/errors.h"
#include "ronde/settings.h"
#include "ronde/store.h"
#include "ronde/types.h"

namespace ronde {

struct CommOptions {
  int rank = 0;
  int size = 1;
  std::shared_ptr<Store> store;  // rendezvous; required when size > 1
  // The world rank whose process serves `store` (rank 0 under mpirun and srun without
  // `ronde run`), so that a store that stops answering is that rank stopping; -1: served apart
  // from the ranks (the launcher, a store of the user's).
  int store_server_rank = -1;
  std::string hostname;          // host identity; empty: gethostname()
  std::string interface;         // address or interface name for TCP listening sockets
  std::string secret;            // job secret for data connections; empty: no check
  TransportKind transport = TransportKind::kAuto;
  // Which backend create() builds (src/backends/): auto picks the first of the preference list
  // that serves the job; mpi needs a build with MPI and ranks started by mpirun or srun.
  CpuOperations backend = CpuOperations::kAuto;
  Duration timeout{300000};       // each collective
  Duration start_timeout{60000};  // meeting the other ranks
  // The starting algorithm knobs (CommTuning below). shm_chunk_bytes also sizes the
  // shared-memory slots, so it is the largest chunk setTuning can choose later.
  int64_t small_allreduce_bytes = 64 * 1024;
  int64_t shm_chunk_bytes = 1024 * 1024;
  int64_t tcp_chunk_bytes = 1024 * 1024;
  bool hierarchical_allreduce = true;
  int64_t hierarchical_chunk_bytes = 4 * 1024 * 1024;
  bool hierarchical_allgather = true;
  bool hierarchical_reducescatter = true;
  // CommTuning::shm_direct_read at the start. Unset: where every local rank has a core of its
  // own, each host times both shared-memory algorithms at construction and the communicator
  // starts with the direct one only if it was clearly faster on every host (elsewhere it starts
  // staging); its sub-communicators inherit the verdict instead of timing again.
  // RONDE_SHM_ALLREDUCE=direct|staged sets it.
  std::optional<bool> shm_direct_read;
  // Which init of this rank in the job (Communicator::fromEnvironment counts them; 0: not
  // counted). It names the shm segment, so no two generations ever map the same one.
  int64_t generation = 0;
  // Where the first failure is published (src/comm/failure_record.h); null: `store`. The
  // communicators one runtime builds from one world share the world's, so a failure on any of
  // them is named the same way on every rank.
  std::shared_ptr<Store> failure_store;
  // How errors name each rank: its world rank, in a sub-communicator (subCommunicator sets
  // it). Empty: by its rank in this communicator.
  std::vector<int> rank_labels;
  // The NCCL backend's GPU (its buffers are device memory there); -1: the creating thread's
  // current CUDA device. The host backends ignore it.
  int cuda_device = -1;

  // Copies the transport and algorithm fields from settings.
  static CommOptions fromSettings(const Settings& settings);
};

// The algorithm knobs of a communicator that may change between collectives (the autotuner
// changes them while a job trains). Every field is used by the native backend:
struct CommTuning {
  // Allreduces of at most this many bytes take the latency-optimal algorithm: in shared
  // memory every rank reduces all slots itself (one synchronisation per chunk), over TCP
  // recursive doubling (power-of-two sizes). Larger ones split the reduction (shm) or ring
  // (TCP). This cutoff is the boundary between the two size bands.
  int64_t small_allreduce_bytes = 64 * 1024;
  // Pipeline chunk in shared memory: 4 KiB up to the slot size fixed at construction.
  int64_t shm_chunk_bytes = 1024 * 1024;
  // Pipeline chunk on TCP links: at least 4 KiB.
  int64_t tcp_chunk_bytes = 1024 * 1024;
  // Across hosts of equal rank counts: reduce in shared memory inside each host and ring
  // across hosts; off, one flat ring. No effect where the layout allows only one of them.
  bool hierarchical_allreduce = true;
  // Shared memory, allreduces past the small band without a prescale: read peers' inputs
  // and write into their outputs with cross-memory attach where every local rank can (Linux
  // process_vm_readv/writev; probed at construction), instead of staging through the
  // segment. Off: always stage. A communicator starts with it on when its host has a core
  // for every local rank, off when they oversubscribe the cores.
  bool shm_direct_read = true;
  // Hierarchical allreduce, allgather and reduce-scatter: bytes of the buffer per pipeline
  // step (at least 4 KiB). While one chunk crosses hosts the next is reduced and the previous
  // gathered inside the host.
  int64_t hierarchical_chunk_bytes = 4 * 1024 * 1024;
  // Across hosts of equal rank counts: each rank gathers its counterparts' blocks around a
  // ring across hosts, and the ranks of a host share them in shared memory; off, one flat
  // ring. No effect where the layout allows only one of them.
  bool hierarchical_allgather = true;
  // The same for reduce-scatter: the ranks of a host reduce in shared memory so that each
  // holds its host's share of its counterparts' blocks, and a ring across hosts reduces those.
  bool hierarchical_reducescatter = true;

  bool operator==(const CommTuning&) const = default;
};

// The result of an async collective.
class Work {
 public:
  virtual ~Work() = default;
  // True once the collective finished, successfully or not. Never blocks.
  virtual bool poll() = 0;
  // Blocks until finished; rethrows the collective's error. Error(kTimeout) if `timeout`
  // passes first (the collective itself keeps running).
  virtual void wait(Duration timeout = Duration::max()) = 0;
};

class Communicator {
 public:
  // Meets the other ranks through options.store and connects the transports of the backend
  // options.backend names. Error(kConfig) when that backend is not built or cannot serve here.
  static std::unique_ptr<Communicator> create(const CommOptions& options);

  // Reads rank, size and the store from the environment: `ronde run`, mpirun (OpenMPI's
  // OMPI_COMM_WORLD_*), srun (SLURM_PROCID, ...), or explicit RONDE_RANK/RONDE_SIZE.
  static std::unique_ptr<Communicator> fromEnvironment();

  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int localRank() const = 0;  // index among the ranks on this host
  virtual int localSize() const = 0;
  virtual int crossRank() const = 0;  // index of this host among hosts
  virtual int crossSize() const = 0;  // number of hosts
  virtual const std::string& host(int rank) const = 0;
  // Human-readable: "rank 3 (host b)".
  std::string describeRank(int rank) const;

  // out[i] = reduce over ranks of in[i]; `in == out` is allowed.
  virtual void allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                         Scaling scaling = {}) = 0;
  // Concatenates the ranks' buffers: rank r contributes counts[r] elements.
  virtual void allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                          DataType type) = 0;
  void allgather(const void* in, void* out, size_t count, DataType type);
  virtual void broadcast(void* buffer, size_t count, DataType type, int root) = 0;
  // send_counts[j] elements go to rank j; recv_counts[j] come from rank j, in rank order.
  virtual void alltoallv(const void* in, const std::vector<size_t>& send_counts, void* out,
                         const std::vector<size_t>& recv_counts, DataType type) = 0;
  // Reduces `in` (sum of counts elements) and leaves block r (counts[r] elements) on rank r.
  virtual void reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                             DataType type, ReduceOp op, Scaling scaling = {}) = 0;
  virtual void barrier() = 0;

  // A new communicator over `ranks` (world ranks of this one, sorted, this rank among them; its
  // rank there is its index in the list), met under the store prefix `name`. Collective over
  // those ranks only: the others do not call it. It shares this communicator's failure record
  // and options; the runtime builds its control and process-set communicators this way.
  // Error(kInvalidArgument) for a bad list; Error(kConfig) where the backend cannot split.
  virtual std::unique_ptr<Communicator> subCommunicator(const std::vector<int>& ranks,
                                                        const std::string& name);
  // A communicator over every rank of this one, built by the device backend `backend` ("nccl",
  // src/backends/backend_registry.h) for buffers in the memory of CUDA device `cuda_device`,
  // met under the store prefix `name`. Collective over all ranks of this one. It shares this
  // communicator's rendezvous, failure record, timeouts and rank labels, so that a failure on
  // either is reported the same way. The runtime builds one per process set that runs CUDA
  // tensors under RONDE_GPU_OPERATIONS=nccl. Error(kConfig) when this build lacks the backend
  // or this communicator has no rendezvous store to meet through.
  std::unique_ptr<Communicator> deviceCommunicator(const std::string& backend,
                                                   const std::string& name, int cuda_device);
  // Whether reductions of `type` with `op` run here. False where the backend has no such
  // reduction (NCCL: int16, Adasum), so that a caller can take another path before calling,
  // instead of failing the collective (which aborts the communicator).
  virtual bool supportsReduction(DataType type, ReduceOp op) const;

  // Async forms: run on the communicator's worker thread in submission order. Buffers must
  // stay valid until the Work finishes.
  std::shared_ptr<Work> allreduceAsync(const void* in, void* out, size_t count, DataType type,
                                       ReduceOp op, Scaling scaling = {});
  std::shared_ptr<Work> allgathervAsync(const void* in, void* out, std::vector<size_t> counts,
                                        DataType type);
  std::shared_ptr<Work> broadcastAsync(void* buffer, size_t count, DataType type, int root);
  std::shared_ptr<Work> alltoallvAsync(const void* in, std::vector<size_t> send_counts, void* out,
                                       std::vector<size_t> recv_counts, DataType type);
  std::shared_ptr<Work> reducescatterAsync(const void* in, void* out, std::vector<size_t> counts,
                                           DataType type, ReduceOp op, Scaling scaling = {});
  std::shared_ptr<Work> barrierAsync();

  // Marks the communicator aborted with `reason`, wakes every rank blocked in a collective
  // with it (they see Error(kPeerLost) or Error(kAborted)), and closes the transports.
  // May be called from any thread.
  void abort(const std::string& reason) { abort(ErrorCode::kAborted, reason); }
  // The same, with the code the peers report for it: kPeerLost when this rank found a peer
  // silent (the runtime's liveness monitor), so every rank fails with the same code.
  virtual void abort(ErrorCode code, const std::string& reason) = 0;
  virtual bool aborted() const = 0;

  // The rendezvous store the ranks met through (null for one rank): a control path off the
  // data plane, used by the runtime's liveness heartbeats.
  virtual std::shared_ptr<Store> store() const { return nullptr; }
  // CommOptions::store_server_rank: the world rank that serves store(), or -1.
  virtual int storeServerRank() const { return -1; }

  // Whether setTuning works: false for backends whose algorithms are not ronde's (MPI).
  virtual bool tunable() const { return false; }
  // The knobs in force (for an untunable backend: the values it was built with).
  virtual CommTuning tuning() const { return {}; }
  // Changes the knobs for the collectives that follow. Call it between collectives, from the
  // thread that runs them (never with async work queued), and on every rank before the same
  // collective with the same values: the runtime does this (rank 0's choice rides in the
  // negotiation). Ranks that disagree fail that collective with Error(kMismatch) where the
  // algorithms meet, or Error(kTimeout). Error(kInvalidArgument) for a value out of range,
  // Error(kConfig) when the backend is not tunable(); the knobs stay as they were then.
  virtual void setTuning(const CommTuning& tuning);

  // Names of the transports in use, e.g. "shm" or "shm+tcp" ("mpi" for the MPI backend).
  virtual std::string transportName() const = 0;

  // Keeps an object (e.g. the store server rank 0 runs) alive as long as the communicator: the
  // base is destroyed last, so it outlives everything the backend owns.
  void holdUntilDestroyed(std::shared_ptr<void> resource) { held_.push_back(std::move(resource)); }

 protected:
  // This rank's index in a subCommunicator list; Error(kInvalidArgument) when the list is not
  // sorted, unique, within this communicator, or lacks this rank.
  int indexInSubset(const std::vector<int>& ranks) const;
  // The options a backend's subCommunicator builds with: `mine` (this communicator's) with
  // this rank's index and the subset's size, ranks labelled by their world rank, and the
  // store seen under the prefix `name`.
  CommOptions subsetOptions(const CommOptions& mine, const std::vector<int>& ranks,
                            const std::string& name) const;
  // The options this communicator was built with, which a device communicator beside it
  // starts from (rendezvous, failure record, timeouts, labels); null where the backend
  // cannot build one beside it.
  virtual const CommOptions* formationOptions() const { return nullptr; }
  // Runs `fn` on the worker thread; the Work reports its outcome.
  virtual std::shared_ptr<Work> enqueue(std::function<void()> fn) = 0;

 private:
  std::vector<std::shared_ptr<void>> held_;
};

}  // namespace ronde
