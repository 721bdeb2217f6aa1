#include "transport/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/unique_fd.h"
#include "ronde/errors.h"

namespace ronde {
namespace {

char* mapShared(int fd, size_t size, const std::string& name) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    throw makeError(ErrorCode::kIo, "cannot map shared memory ", name, " (", size,
                    " bytes): ", std::strerror(errno));
  }
  return static_cast<char*>(p);
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t size) {
  UniqueFd fd(::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) {
    throw makeError(ErrorCode::kIo, "cannot create shared memory ", name, ": ",
                    std::strerror(errno), " (is /dev/shm mounted and writable?)");
  }
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    int err = errno;
    ::shm_unlink(name.c_str());
    throw makeError(ErrorCode::kIo, "cannot size shared memory ", name, " to ", size,
                    " bytes: ", std::strerror(err), " (is /dev/shm large enough?)");
  }
  try {
    return ShmSegment(name, mapShared(fd.get(), size, name), size, true);
  } catch (...) {
    ::shm_unlink(name.c_str());
    throw;
  }
}

ShmSegment ShmSegment::open(const std::string& name) {
  UniqueFd fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600));
  if (!fd) {
    throw makeError(ErrorCode::kIo, "cannot open shared memory ", name, ": ",
                    std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0 || info.st_size <= 0) {
    throw makeError(ErrorCode::kIo, "shared memory ", name, " is empty");
  }
  const size_t size = static_cast<size_t>(info.st_size);
  return ShmSegment(name, mapShared(fd.get(), size, name), size, true);
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owns_name_(std::exchange(other.owns_name_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owns_name_ = std::exchange(other.owns_name_, false);
  }
  return *this;
}

void ShmSegment::unlink() {
  if (owns_name_) {
    ::shm_unlink(name_.c_str());  // ENOENT when another rank got there first: fine
    owns_name_ = false;
  }
}

}  // namespace ronde
