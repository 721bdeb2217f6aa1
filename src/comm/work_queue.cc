#include "comm/work_queue.h"

#include "common/deadline.h"

namespace ronde {

namespace {

class QueuedWork : public Work {
 public:
  bool poll() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

  void wait(Duration timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    Deadline deadline = Deadline::after(timeout);
    if (deadline.at() == Deadline::Clock::time_point::max()) {
      finished_.wait(lock, [&] { return done_; });
    } else if (!finished_.wait_until(lock, deadline.at(), [&] { return done_; })) {
      throw makeError(ErrorCode::kTimeout, "collective did not finish within ", timeout.count(), " ms");
    }
    if (error_) std::rethrow_exception(error_);
  }

  void finish(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = error;
      done_ = true;
    }
    finished_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace

struct WorkQueue::Item {
  std::function<void()> fn;
  std::shared_ptr<QueuedWork> work;
};

WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Work> WorkQueue::submit(std::function<void()> fn) {
  auto item = std::make_shared<Item>(Item{std::move(fn), std::make_shared<QueuedWork>()});
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    items_.push_back(item);
  }
  wake_.notify_one();
  return item->work;
}

void WorkQueue::loop() {
  for (;;) {
    std::shared_ptr<Item> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !items_.empty(); });
      if (items_.empty()) return;  // stopping, and everything queued has run
      item = std::move(items_.front());
      items_.pop_front();
    }
    std::exception_ptr error;
    try {
      item->fn();
    } catch (...) {
      error = std::current_exception();
    }
    item->work->finish(error);
  }
}

}  // namespace ronde
