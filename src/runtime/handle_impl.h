// The runtime's Handle: completed once by the background thread, waited on by any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

#include "ronde/runtime.h"

namespace ronde::runtime {

class HandleImpl final : public Handle {
 public:
  using OnDone = std::function<void(Handle& done)>;
  // `blocked` (optional, shared with the runtime) counts the threads waiting in wait() on
  // an unfinished request: the deadlock detector's sign that a rank can submit nothing more.
  // A request completed through `on_done` (a TensorFlow asynchronous kernel) counts as
  // waited on from the start until it completes: no thread sleeps in wait(), but the
  // framework's executor, and the thread that runs the step, wait for the callback.
  explicit HandleImpl(OnDone on_done = nullptr,
                      std::shared_ptr<std::atomic<int>> blocked = nullptr);
  ~HandleImpl() override;

  bool poll() override;
  void wait(Duration timeout) override;
  std::shared_ptr<Tensor> output() override;
  std::vector<int64_t> result() override;

  // Called once, by the background thread (or by shutdown), with no runtime lock held: they
  // run the request's on_done after waking the waiters.
  void succeed(std::shared_ptr<Tensor> output, std::vector<int64_t> result);
  void fail(std::exception_ptr error);

 private:
  void notifyDone();

  // Releases the count taken for a request waited on through its callback (once).
  void releaseCallbackWait();

  OnDone on_done_;  // touched only by the one call of succeed() or fail() that completes
  // Whether this handle holds one count of `blocked_` for its callback; touched by the
  // constructor, the one completing call and the destructor, never concurrently.
  bool callback_waits_ = false;
  const std::shared_ptr<std::atomic<int>> blocked_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  // Set under mutex_ once the results are in place; read without it by poll(), which every
  // synchronize of a frontend asks first (a finished request then costs no lock and no GIL
  // hand-over).
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  std::shared_ptr<Tensor> output_;
  std::vector<int64_t> result_;
};

}  // namespace ronde::runtime
