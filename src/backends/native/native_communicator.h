// ronde's own Communicator: the shared-memory arena inside a host, a TCP mesh between hosts
// (or everywhere when RONDE_TRANSPORT=tcp), and the choice of algorithm per call.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "collectives/collective_context.h"
#include "collectives/hierarchical_blocks.h"
#include "collectives/scratch_buffer.h"
#include "collectives/op_descriptor.h"
#include "collectives/shm_collectives.h"
#include "comm/topology.h"
#include "comm/work_queue.h"
#include "ronde/communicator.h"
#include "transport/shm/shm_arena.h"
#include "transport/tcp/tcp_mesh.h"

namespace ronde {

class NativeCommunicator final : public Communicator {
 public:
  explicit NativeCommunicator(const CommOptions& options);
  ~NativeCommunicator() override;

  int rank() const override { return topology_.rank; }
  int size() const override { return topology_.size; }
  int localRank() const override { return topology_.localRank(); }
  int localSize() const override { return topology_.localSize(); }
  int crossRank() const override { return topology_.crossRank(); }
  int crossSize() const override { return topology_.crossSize(); }
  const std::string& host(int r) const override;

  void allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                 Scaling scaling) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                  DataType type) override;
  void broadcast(void* buffer, size_t count, DataType type, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& send_counts, void* out,
                 const std::vector<size_t>& recv_counts, DataType type) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType type,
                     ReduceOp op, Scaling scaling) override;
  void barrier() override;
  std::unique_ptr<Communicator> subCommunicator(const std::vector<int>& ranks,
                                                const std::string& name) override;

  using Communicator::abort;
  void abort(ErrorCode code, const std::string& reason) override;
  bool aborted() const override { return aborted_.load(); }
  std::shared_ptr<Store> store() const override { return options_.store; }
  int storeServerRank() const override { return options_.store_server_rank; }
  std::string transportName() const override;

  bool tunable() const override { return true; }
  CommTuning tuning() const override {
    std::lock_guard<std::mutex> lock(tuning_mutex_);
    return tuning_;
  }
  void setTuning(const CommTuning& tuning) override;

 protected:
  const CommOptions* formationOptions() const override { return &options_; }
  std::shared_ptr<Work> enqueue(std::function<void()> fn) override { return queue_.submit(std::move(fn)); }

 private:
  struct Call {
    OpDescriptor descriptor;
    CollectiveContext ctx;
  };
  // Numbers the call, builds its context, and turns any failure into an abort of the whole
  // communicator, so that every rank fails with the first rank's message instead of hanging.
  template <typename Body>
  void run(OpDescriptor descriptor, Body&& body);
  [[noreturn]] void fail(const Error& error);
  // Times both large-band shared-memory allreduces on every host (at construction, where
  // CommOptions::shm_direct_read is unset) and returns the verdict all ranks share.
  bool timeDirectRead();
  // The job's first failure when `error` may be its echo (a lost or aborted peer), else `error`.
  Error firstFailure(const Error& error) const;
  void checkUsable() const;
  void validateCounts(const std::vector<size_t>& counts, const char* what) const;

  ShmOp shmOp(const Call& call) const;
  // Verifies the call across hosts, then runs src/collectives/hierarchical_allreduce.cc.
  void hierarchicalAllreduce(const Call& call, const void* in, void* out, size_t count,
                             DataType type, ReduceOp op, double prescale, double postscale);
  // Verifies the call across hosts, then plans src/collectives/hierarchical_blocks.h's
  // allgather or reduce-scatter.
  HierarchicalBlocks hierarchicalBlocks(const Call& call);
  // What both pipelines call from either thread on their first error: abort as run() would.
  std::function<void(const Error&)> abortFromPipeline();

  CommOptions options_;
  Topology topology_;
  std::unique_ptr<ShmArena> arena_;   // ranks of this host, when shared memory is used
  std::unique_ptr<TcpMesh> mesh_;     // every rank, when some traffic goes over TCP
  LinkGroup world_;                   // all ranks over TCP
  LinkGroup cross_;                   // same local rank on every host, over TCP
  bool shm_only_ = false;             // one host, shared memory for everything
  bool hierarchical_possible_ = false;  // equal hosts, shm inside: cross_ is connected
  bool hierarchical_ = false;         // allreduce: shm inside hosts, ring across
  bool hierarchical_allgather_ = false;  // allgather: rings across hosts, shm inside
  bool hierarchical_reducescatter_ = false;  // reduce-scatter: shm inside hosts, rings across
  CommTuning tuning_;                 // the knobs in force; changed only between collectives
  // Other threads may ask for tuning() while the thread that runs the collectives changes it;
  // that thread reads tuning_ itself without the lock.
  mutable std::mutex tuning_mutex_;
  uint32_t tuning_hash_ = 0;          // of tuning_, in every descriptor
  uint64_t op_index_ = 0;
  bool spin_before_block_ = false;    // every local rank has a CPU of its own
  bool direct_read_ = false;          // every local rank can read every other's memory
  std::unique_ptr<char[]> direct_blocks_;  // the direct allreduce's private blocks
  ScratchBuffer scratch_;             // reduce-scatter's work buffer, kept between calls

  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  ErrorCode abort_code_ = ErrorCode::kAborted;
  std::string abort_reason_;

  WorkQueue queue_;  // last: drained before anything above is destroyed
};

}  // namespace ronde
