// Runs async collectives on one worker thread, in submission order (the order every rank must
// agree on). The thread starts with the first submission; the destructor drains the queue.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "ronde/communicator.h"

namespace ronde {

class WorkQueue {
 public:
  WorkQueue() = default;
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  std::shared_ptr<Work> submit(std::function<void()> fn);

 private:
  struct Item;
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Item>> items_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ronde
