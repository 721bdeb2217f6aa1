// The timeline: a Chrome trace-event JSON file (chrome://tracing, Perfetto) showing, per
// tensor, negotiation, queueing, the copies into and out of the fusion buffer and the
// collective. Events go through a bounded queue to the timeline's own thread, which writes
// them; when the queue is full events are dropped (and counted), so recording never stalls the
// background thread. The file is "[" followed by events each ending in ",\n", which both
// viewers accept even when the job dies mid-write; a clean stop closes the array, making it
// strict JSON.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace ronde::runtime {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens (truncates) `path`; throws Error(kIo) when it cannot.
  Timeline(const std::string& path, bool mark_cycles, size_t queue_capacity = 1 << 16);
  ~Timeline();  // writes what is queued and closes the array
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  bool markCycles() const { return mark_cycles_; }
  // A span of `activity` on the tensor's row; `args` is a JSON object body ("" for none).
  void span(const std::string& tensor, const std::string& activity, Clock::time_point start,
            Clock::time_point end, const std::string& args);
  // An instant marker across all rows (cycle starts).
  void marker(const std::string& name, Clock::time_point at);
  uint64_t dropped() const;

 private:
  struct Event {
    std::string tensor;  // empty for markers
    std::string activity;
    int64_t start_us;
    int64_t duration_us;  // -1: instant
    std::string args;
  };
  void push(Event event);
  void writerLoop();
  void write(const Event& event);
  int rowOf(const std::string& tensor);
  int64_t micros(Clock::time_point t) const;

  FILE* file_ = nullptr;
  bool mark_cycles_;
  size_t capacity_;
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Event> queue_;          // guarded by mutex_
  bool stopping_ = false;            // guarded by mutex_
  uint64_t dropped_ = 0;             // guarded by mutex_
  std::map<std::string, int> rows_;  // writer thread only
  std::thread writer_;
};

// Escapes a string for a JSON string literal (without the quotes).
std::string jsonEscape(const std::string& s);

}  // namespace ronde::runtime
