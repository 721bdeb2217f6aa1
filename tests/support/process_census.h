// What a process holds, counted from /proc, for tests that must end where they began: threads
// and the entries of a directory (/proc/self/fd, /dev/shm).
#pragma once

#include <dirent.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

namespace ronde::testing {

// The names in `path`, without "." and "..".
inline std::vector<std::string> directoryEntries(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return names;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

inline size_t threadCount() { return directoryEntries("/proc/self/task").size(); }

// The thread count once it is back to `expected`, or the count after a second. A joined
// thread can stay listed in /proc/self/task for a moment after join() returns (the kernel
// wakes the joiner before it has removed the task), so one read may see it; a leaked thread
// stays listed.
inline size_t settledThreadCount(size_t expected) {
  size_t count = threadCount();
  for (int i = 0; i < 100 && count != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    count = threadCount();
  }
  return count;
}

}  // namespace ronde::testing
