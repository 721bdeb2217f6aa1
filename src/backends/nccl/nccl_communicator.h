// A Communicator over NCCL for CUDA buffers: every pointer given to its collectives is device
// memory of the communicator's GPU (CommOptions::cuda_device, or the constructing thread's
// current device). One rank per GPU: NCCL refuses two ranks on one device.
//
// Formation goes through ronde's own rendezvous: the ranks' hosts through the store (as every
// backend), then rank 0's ncclUniqueId under "nccl/unique_id" in the communicator's store, then
// a nonblocking ncclCommInitRankConfig polled until the start timeout.
//
// Every collective runs on the communicator's own stream (stream()), created non-blocking, so
// that it never waits on, nor delays, the legacy default stream. A blocking call returns when
// the stream has finished it. As with the other backends, each call first allgathers its
// 64-byte descriptor (over NCCL itself), so ranks that disagree get Error(kMismatch) instead of
// corrupt data or a hang.
//
// Failure: a wait polls the stream, NCCL's asynchronous error, this communicator's abort flag
// and the first failure other ranks published in the store. On a timeout, an abort or a peer's
// failure it calls ncclCommAbort, which ends the kernels in flight, so no rank hangs; errors
// name the rank and host. After that every call throws Error(kAborted).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "collectives/op_descriptor.h"
#include "comm/topology.h"
#include "comm/work_queue.h"
#include "common/deadline.h"
#include "ronde/communicator.h"

namespace ronde {

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const CommOptions& options);
  ~NcclCommunicator() override;

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
  bool supportsReduction(DataType type, ReduceOp op) const override;

  using Communicator::abort;
  void abort(ErrorCode code, const std::string& reason) override;
  bool aborted() const override { return aborted_.load(); }
  std::shared_ptr<Store> store() const override { return options_.store; }
  int storeServerRank() const override { return options_.store_server_rank; }
  std::string transportName() const override { return "nccl"; }

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

 protected:
  std::shared_ptr<Work> enqueue(std::function<void()> fn) override {
    return queue_->submit(std::move(fn));
  }

 private:
  template <typename Body>
  void run(OpDescriptor descriptor, Body&& body);
  void verify(const OpDescriptor& descriptor);
  // Checks an NCCL call; ncclInProgress (the nonblocking mode's "enqueued, not done") is
  // polled until NCCL has the call in hand.
  void check(ncclResult_t status, const char* what);
  void checkCudaCall(cudaError_t status, const char* what) const;
  // Polls until the stream drained everything enqueued so far.
  void waitForStream(const char* what);
  // Throws the reason this wait must stop (abort, a peer's failure, NCCL's error, the
  // deadline), having aborted NCCL; returns when none holds.
  void stopIfFailed(const char* what, Deadline deadline, bool forming);
  [[noreturn]] void fail(const Error& error);
  void abortNccl();
  // Where the first failure is published and read: the failure record the runtime's
  // communicators share (CommOptions::failure_store), else this communicator's store.
  Store* failureStore() const {
    return options_.failure_store ? options_.failure_store.get() : options_.store.get();
  }
  void scale(const void* in, void* out, size_t count, DataType type, double factor);
  void* scratch(size_t bytes);
  void validateCounts(const std::vector<size_t>& counts, const char* what) const;

  CommOptions options_;
  Topology topology_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  bool nccl_aborted_ = false;         // ncclCommAbort ran: comm_ is gone
  void* descriptors_ = nullptr;       // device: size() descriptors for verify()
  void* host_descriptors_ = nullptr;  // pinned: the same, on the host
  void* scratch_ = nullptr;           // device: prescaled inputs
  size_t scratch_bytes_ = 0;
  uint64_t op_index_ = 0;
  Deadline deadline_ = Deadline::never();  // of the call in progress
  std::string current_;                    // the call in progress, for errors
  Deadline::Clock::time_point next_store_check_{};

  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  ErrorCode abort_code_ = ErrorCode::kAborted;
  std::string abort_reason_;

  // Reset first thing in the destructor: drained before anything above is released.
  std::unique_ptr<WorkQueue> queue_ = std::make_unique<WorkQueue>();
};

}  // namespace ronde
