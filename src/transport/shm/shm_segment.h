// A POSIX shared-memory segment mapped into this process. The name is unlinked as soon as
// every local rank has mapped it, so a segment never outlives its job, even when ranks are
// killed: the kernel frees it with the last mapping.
#pragma once

#include <cstddef>
#include <string>

namespace ronde {

class ShmSegment {
 public:
  // Creates a new segment (fails if the name exists).
  static ShmSegment create(const std::string& name, size_t size);
  // Maps all of an existing segment created by another process of the job; the caller
  // checks that what it holds is what it expects.
  static ShmSegment open(const std::string& name);

  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Removes the name from /dev/shm; the mapping stays valid. Safe to call more than once.
  void unlink();

  char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, char* data, size_t size, bool owns_name)
      : name_(std::move(name)), data_(data), size_(size), owns_name_(owns_name) {}
  std::string name_;
  char* data_ = nullptr;
  size_t size_ = 0;
  bool owns_name_ = false;
};

}  // namespace ronde
