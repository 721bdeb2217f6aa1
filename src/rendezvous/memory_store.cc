// The in-process store: one map under one mutex; a condition variable wakes waiting gets.
#include <condition_variable>
#include <map>
#include <mutex>

#include "rendezvous/counter.h"
#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde {
namespace {

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
  }

  Bytes get(const std::string& key, Duration timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    auto present = [&] { return values_.count(key) > 0; };
    if (!changed_.wait_for(lock, timeout, present)) {
      throw makeError(ErrorCode::kTimeout, "memory store: key '", key, "' was not set within ",
                      timeout.count(), " ms");
    }
    return values_.at(key);
  }

  bool tryGet(const std::string& key, Bytes* value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = values_.find(key);
    if (found == values_.end()) return false;
    if (value) *value = found->second;
    return true;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t result;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = values_.find(key);
      result = (found == values_.end() ? 0 : parseCounter(key, found->second)) + delta;
      values_[key] = formatCounter(result);
    }
    changed_.notify_all();
    return result;
  }

  void erase(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    values_.erase(key);
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Bytes> values_;  // guarded by mutex_
};

}  // namespace

std::shared_ptr<Store> makeMemoryStore() { return std::make_shared<MemoryStore>(); }

}  // namespace ronde
