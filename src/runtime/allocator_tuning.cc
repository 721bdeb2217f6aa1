#include "runtime/allocator_tuning.h"

#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ronde::runtime {

std::string tuneAllocator(const std::function<const char*(const char*)>& lookup) {
#if defined(__GLIBC__)
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                           "MALLOC_MMAP_MAX_"}) {
    if (lookup(name) != nullptr) return std::string("left as it is: ") + name + " is set";
  }
  const char* tunables = lookup("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr)
    return "left as it is: GLIBC_TUNABLES sets glibc.malloc tunables";
  // Either call alone turns the other threshold's dynamic adjustment off too, so both.
  if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThresholdBytes)) != 1 ||
      mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThresholdBytes)) != 1)
    return "left as it is: glibc refused the thresholds";
  return "freed memory kept mapped (mmap threshold 32 MiB, trim threshold 1 GiB; "
         "RONDE_MALLOC_TUNING=0 leaves malloc alone)";
#else
  (void)lookup;
  return "left as it is: not glibc's malloc";
#endif
}

}  // namespace ronde::runtime
