#include "common/huge_page_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "ronde/errors.h"

namespace ronde {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;
constexpr size_t kHugeFrom = size_t{256} << 10;  // smaller buffers stay on 4 KiB pages

size_t roundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

}  // namespace

HugePageBuffer::~HugePageBuffer() { release(); }

void HugePageBuffer::release() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  mapping_bytes_ = 0;
  data_ = nullptr;
  capacity_ = 0;
}

unsigned char* HugePageBuffer::sized(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  if (bytes <= capacity_) return data_;
  const size_t wanted = std::max(bytes, capacity_ * 2);
  const bool huge = wanted >= kHugeFrom;
  const size_t capacity = roundUp(wanted, huge ? kHugePage : kPage);
  // mmap aligns to pages only: map one huge page more and start at the first 2 MiB boundary.
  const size_t mapping_bytes = capacity + (huge ? kHugePage : 0);
  void* mapping =
      ::mmap(nullptr, mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    throw makeError(ErrorCode::kIo, "cannot map a ", capacity, "-byte host buffer: ",
                    std::strerror(errno));
  }
  auto* data = static_cast<unsigned char*>(mapping);
  if (huge) {
    const auto address = reinterpret_cast<uintptr_t>(mapping);
    data += roundUp(address, kHugePage) - address;
    // Advice only: refused where the kernel lacks transparent huge pages, and fine then.
    ::madvise(data, capacity, MADV_HUGEPAGE);
  }
  release();
  mapping_ = mapping;
  mapping_bytes_ = mapping_bytes;
  data_ = data;
  capacity_ = capacity;
  return data_;
}

}  // namespace ronde
