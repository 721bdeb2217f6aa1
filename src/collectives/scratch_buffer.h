// Memory a collective needs for its own work, kept by the communicator from call to call so
// that a large collective does not fault fresh pages in each time (a 64 MiB buffer is 16384
// page faults, each zeroing its page). It only grows, to the largest need so far.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>

namespace ronde {

class ScratchBuffer {
 public:
  // At least `bytes` bytes (never null); what it held before is lost when it grows.
  char* get(size_t bytes) {
    if (bytes > size_ || !data_) {
      data_.reset(new char[std::max<size_t>(1, bytes)]);
      size_ = bytes;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
};

}  // namespace ronde
