// The helper thread of the pipelined hierarchical collectives: it runs the step across hosts
// of each chunk, in order, while the calling thread runs the shared-memory steps of the
// chunks around it. A chunk's step starts once the calling thread posted it (the allreduce
// posts a chunk when it is reduced inside the host; the allgather posts them all at once).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "collectives/collective_context.h"
#include "ronde/errors.h"

namespace ronde {

class CrossHostStage {
 public:
  // `abort_all` is called from the helper with its first error, before the calling thread
  // hears of it: it must abort the communicator so that the calling thread's waits end.
  CrossHostStage(size_t chunks, std::function<void(size_t)> cross, const CollectiveContext& ctx,
                 std::function<void(const Error&)> abort_all);
  // Stops and joins the helper: nothing it writes may go away before.
  ~CrossHostStage();
  CrossHostStage(const CrossHostStage&) = delete;
  CrossHostStage& operator=(const CrossHostStage&) = delete;

  // Chunks [0, through] may cross.
  void post(size_t through);
  // Returns once chunk k crossed. Throws the helper's error if chunk k (or an earlier one)
  // failed there, Error(kTimeout) at the context's deadline.
  void waitCrossed(size_t k);
  void stopAndJoin();
  // The helper's error, or null.
  std::exception_ptr error() const;

 private:
  void loop();
  void fail(const Error& e, std::exception_ptr error);

  const size_t chunks_;
  const std::function<void(size_t)> cross_;
  const CollectiveContext& ctx_;
  const std::function<void(const Error&)> abort_all_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  size_t posted_ = 0;   // chunks the calling thread let cross
  size_t crossed_ = 0;  // chunks that crossed
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once everything above exists
};

// Runs `body` with the stage; on an error from either thread, aborts (`abort_all`), joins the
// helper and rethrows the error that names the cause: the helper's where this thread's is a
// lost peer or an abort (often the echo of the helper's), else this thread's.
void runWithCrossHostStage(CrossHostStage& stage, const std::function<void(const Error&)>& abort_all,
                           const std::function<void()>& body);

}  // namespace ronde
