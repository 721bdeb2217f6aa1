// One emulated stream: work run in order by a thread of its own, with tickets to wait on.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace ronde::emulated_gpu {

// One stream: work queued in order, run by a thread that holds the stream until it is destroyed
// and drained.
class Stream {
 public:
  Stream(int device, bool legacy, bool blocking)
      : device(device), legacy(legacy), blocking(blocking) {}

  static std::shared_ptr<Stream> start(int device, bool legacy, bool blocking) {
    auto stream = std::make_shared<Stream>(device, legacy, blocking);
    std::thread([stream] { stream->loop(); }).detach();
    return stream;
  }

  // The ticket that completes when `work` has run.
  uint64_t push(std::function<void()> work) {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(work));
      ticket = ++enqueued_;
    }
    cv_.notify_all();
    return ticket;
  }
  void waitFor(uint64_t ticket) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return completed_ >= ticket; });
  }
  bool done(uint64_t ticket) {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ >= ticket;
  }
  uint64_t last() {
    std::lock_guard<std::mutex> lock(mutex_);
    return enqueued_;
  }
  void drain() { waitFor(last()); }
  // The thread ends once the work queued so far has run.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
  }

  const int device;
  const bool legacy;
  const bool blocking;

 private:
  void loop() {
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
        if (queue_.empty()) return;
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      work();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++completed_;
      }
      cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  bool stopping_ = false;
};

}  // namespace ronde::emulated_gpu
