// glibc's malloc hands a training step's large freed blocks back to the kernel, and the next
// step faults every page of them in again: with its dynamic thresholds, blocks above the mmap
// threshold are unmapped on free, and a heap whose free top grows past twice that threshold
// is trimmed. A step that frees a few MiB of activations and gradients and allocates them
// again pays thousands of page faults per step (measured in docs/benchmarks.md: a CNN's step
// 31 ms instead of 21 ms on 2 ranks). tuneAllocator fixes both thresholds so that freed
// memory stays mapped for the next step, as MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_
// would; the resident set then stays at the step's peak instead of dropping between steps.
#pragma once

#include <functional>
#include <string>

namespace ronde::runtime {

// The thresholds tuneAllocator sets: glibc's largest mmap threshold, and a trim threshold
// above any step's working set on the hosts ronde runs on.
inline constexpr size_t kMmapThresholdBytes = 32u << 20;
inline constexpr size_t kTrimThresholdBytes = 1u << 30;

// Sets glibc's thresholds unless the user chose malloc's behaviour already: any MALLOC_*_
// threshold variable, or glibc.malloc tunables in GLIBC_TUNABLES (`lookup`: name -> value or
// nullptr, the environment in the runtime). Returns what it did, for the log.
std::string tuneAllocator(const std::function<const char*(const char*)>& lookup);

}  // namespace ronde::runtime
