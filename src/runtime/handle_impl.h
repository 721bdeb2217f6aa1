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
  explicit HandleImpl(OnDone on_done = nullptr,
                      std::shared_ptr<std::atomic<int>> blocked = nullptr)
      : on_done_(std::move(on_done)), blocked_(std::move(blocked)) {}

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

  OnDone on_done_;  // touched only by the one call of succeed() or fail() that completes
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
