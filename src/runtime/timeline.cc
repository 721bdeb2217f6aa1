#include "runtime/timeline.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ronde/errors.h"

namespace ronde::runtime {

std::string jsonEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

Timeline::Timeline(const std::string& path, bool mark_cycles, size_t queue_capacity)
    : mark_cycles_(mark_cycles), capacity_(queue_capacity), origin_(Clock::now()) {
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    throw makeError(ErrorCode::kIo, "cannot open the timeline file ", path, ": ",
                    std::strerror(errno));
  }
  // Horovod's layout: process 0 carries the wall-clock start (tools align timelines by it), and
  // each tensor is a process of its own (rowOf), named after the tensor.
  const auto since_epoch = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  std::fputs("[\n", file_);
  std::fprintf(file_,
               "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,"
               "\"args\":{\"name\":\"ronde rank 0\",\"start_time_since_epoch_in_micros\":%lld}},\n"
               "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":0,"
               "\"args\":{\"sort_index\":0}},\n",
               static_cast<long long>(since_epoch));
  std::fflush(file_);
  writer_ = std::thread([this] { writerLoop(); });
}

Timeline::~Timeline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  writer_.join();
  // A last event without a trailing comma closes the array: the file becomes strict JSON.
  std::fprintf(
      file_,
      "{\"name\":\"timeline_end\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":%lld,"
      "\"args\":{\"dropped_events\":%llu}}\n]\n",
      static_cast<long long>(micros(Clock::now())), static_cast<unsigned long long>(dropped_));
  std::fclose(file_);
}

int64_t Timeline::micros(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
}

uint64_t Timeline::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

void Timeline::span(const std::string& tensor, const std::string& activity, Clock::time_point start,
                    Clock::time_point end, const std::string& args) {
  int64_t begin = micros(start);
  push(Event{tensor, activity, begin, std::max<int64_t>(micros(end) - begin, 0), args});
}

void Timeline::marker(const std::string& name, Clock::time_point at) {
  push(Event{"", name, micros(at), -1, ""});
}

void Timeline::push(Event event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.size() >= capacity_) {
      ++dropped_;
      return;
    }
    queue_.push_back(std::move(event));
  }
  wake_.notify_one();
}

void Timeline::writerLoop() {
  std::deque<Event> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty() && stopping_) return;
      batch.swap(queue_);
    }
    for (const Event& e : batch) write(e);
    batch.clear();
    std::fflush(file_);
  }
}

int Timeline::rowOf(const std::string& tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  int row = static_cast<int>(rows_.size()) + 1;
  rows_[tensor] = row;
  std::fprintf(file_,
               "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"%s\"}},\n"
               "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
               "\"args\":{\"sort_index\":%d}},\n",
               row, jsonEscape(tensor).c_str(), row, row);
  return row;
}

void Timeline::write(const Event& e) {
  if (e.duration_us < 0) {
    std::fprintf(file_,
                 "{\"name\":\"%s\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":%lld},\n",
                 jsonEscape(e.activity).c_str(), static_cast<long long>(e.start_us));
    return;
  }
  int row = rowOf(e.tensor);
  std::fprintf(file_,
               "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%lld,\"dur\":%lld,"
               "\"args\":{%s}},\n",
               jsonEscape(e.activity).c_str(), row, static_cast<long long>(e.start_us),
               static_cast<long long>(e.duration_us), e.args.c_str());
}

}  // namespace ronde::runtime
