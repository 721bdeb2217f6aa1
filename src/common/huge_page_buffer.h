// A growable host buffer for ronde's own bulk data (the fusion buffer and its scratch areas),
// mapped so that the kernel can back it with transparent huge pages.
//
// Why: the shared-memory allreduce of large buffers reads and writes peers' memory with
// cross-memory attach, and the kernel pins every page it touches on each call. On 4 KiB
// pages that pinning, and the TLB misses of the copies and reductions, cost as much as the
// copies themselves; on 2 MiB pages a 1 MiB two-rank allreduce took 110 instead of 160 us
// (docs/benchmarks.md). Buffers of 256 KiB and more are therefore whole 2 MiB pages, aligned
// and advised MADV_HUGEPAGE, which works where transparent huge pages are "madvise" (the
// common default) as well as "always", and is a harmless no-op where they are "never". Below
// that a huge page would cost more memory than the copies it speeds up.
//
// Contents are not kept when the buffer grows: every user fills what it reads.
#pragma once

#include <cstddef>

namespace ronde {

class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  ~HugePageBuffer();
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  // At least `bytes` (at least 1) writable bytes; grows by doubling, never shrinks.
  // Throws Error(kIo) when the memory cannot be mapped.
  unsigned char* sized(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  void release();

  void* mapping_ = nullptr;  // what munmap takes back: the aligned buffer and its slack
  size_t mapping_bytes_ = 0;
  unsigned char* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace ronde
