// A Communicator over OpenMPI's collectives, for clusters where MPI reaches the fast network
// (InfiniBand, RDMA) that ronde's TCP transport does not. Chosen with RONDE_CPU_OPERATIONS=mpi
// (HOROVOD_CPU_OPERATIONS=MPI) for ranks started by mpirun or srun.
//
// Each instance runs on a duplicate of MPI_COMM_WORLD, so one generation's traffic never
// meets another's. Every call first allgathers its 64-byte descriptor, so a disagreement is
// Error(kMismatch) on every rank, as with the native backend. Collectives are nonblocking MPI
// calls polled with MPI_Test until the call's deadline, the communicator's abort, or a failure
// another rank published in the store.
//
// Abort and timeout: MPI cannot cancel a collective or survive a lost peer. After a timeout or
// an abort the communicator fails every later call and leaves the request behind; the
// destructor waits a little for it (a late peer completes it), and when it stays pending the
// process skips MPI_Finalize at exit and mpirun reports the job failed. A late peer's data may
// still land in that call's buffers: an MPI job that lost a peer is to be restarted, not
// continued (mpirun normally ends it when a rank dies). Nothing hangs forever: every wait has
// the collective's timeout, and a failure another rank published ends this rank's wait too.
#pragma once

#include <mpi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "backends/mpi/mpi_types.h"
#include "collectives/op_descriptor.h"
#include "comm/topology.h"
#include "comm/work_queue.h"
#include "common/deadline.h"
#include "ronde/communicator.h"

namespace ronde {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const CommOptions& options);
  ~MpiCommunicator() override;

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
  std::string transportName() const override { return "mpi"; }

 protected:
  const CommOptions* formationOptions() const override { return &options_; }
  std::shared_ptr<Work> enqueue(std::function<void()> fn) override {
    return queue_.submit(std::move(fn));
  }

 private:
  // A sub-communicator over `comm`, which it owns from here on.
  MpiCommunicator(const CommOptions& options, MPI_Comm comm);
  // Sets up the error handler and types and gathers the host names over comm_.
  void meet();
  // Numbers and verifies the call, then runs `body`; any failure aborts the communicator.
  template <typename Body>
  void run(OpDescriptor descriptor, Body&& body);
  // Polls `request` to completion within the current call's deadline. On a timeout or abort the
  // request is kept, with `scratch` (buffers it still writes), for the destructor to drain.
  void complete(MPI_Request* request, const char* what, std::shared_ptr<void> scratch = nullptr);
  [[noreturn]] void leavePending(MPI_Request request, std::shared_ptr<void> scratch,
                                 const Error& error);
  void verify(const OpDescriptor& descriptor);
  void check(int mpi_status, const char* what) const;
  [[noreturn]] void fail(const Error& error);
  bool peerPublishedFailure(std::string* reason, ErrorCode* code);
  int toInt(size_t count, const char* what) const;
  std::vector<int> toInts(const std::vector<size_t>& counts, const char* what) const;
  void validateCounts(const std::vector<size_t>& counts, const char* what) const;

  CommOptions options_;
  Topology topology_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::unique_ptr<mpi::TypeMap> types_;
  uint64_t op_index_ = 0;
  Deadline deadline_ = Deadline::never();  // of the call in progress
  std::string current_;                    // the call in progress, for errors
  struct Pending {
    MPI_Request request;
    std::shared_ptr<void> scratch;
  };
  std::vector<Pending> pending_;  // left by a timeout or abort: MPI cannot cancel them

  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  ErrorCode abort_code_ = ErrorCode::kAborted;
  std::string abort_reason_;

  WorkQueue queue_;  // last: drained before anything above is destroyed
};

}  // namespace ronde
