#include "common/huge_page_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace ronde {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// The transparent huge page mode in brackets ("always [madvise] never" -> "madvise").
std::string transparentHugePageMode() {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(file, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos
             ? ""
             : line.substr(open + 1, close - open - 1);
}

// The kernel's own word on whether the mapping holding `address` may get huge pages: its
// "THPeligible" line in /proc/self/smaps (-1: no such mapping or line).
int thpEligible(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t start = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> start >> dash >> end && dash == '-') {
      inside = start <= at && at < end;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

TEST(HugePageBuffer, GrowsToWhatIsAskedAndKeepsTheBufferWhileItFits) {
  HugePageBuffer buffer;
  unsigned char* small = buffer.sized(0);
  ASSERT_NE(small, nullptr);  // callers pass it where a valid pointer is required
  EXPECT_GE(buffer.capacity(), 1u);
  std::memset(small, 0x5a, buffer.capacity());
  EXPECT_EQ(buffer.sized(buffer.capacity()), small);

  unsigned char* big = buffer.sized(5 * kHugePage + 3);
  EXPECT_GE(buffer.capacity(), 5 * kHugePage + 3);
  std::memset(big, 0xa5, 5 * kHugePage + 3);  // every byte asked for is writable
  EXPECT_EQ(buffer.sized(kHugePage), big);     // smaller requests reuse it
  EXPECT_EQ(big[5 * kHugePage + 2], 0xa5);
}

TEST(HugePageBuffer, BuffersFrom256KiBAreWholeHugePages) {
  HugePageBuffer buffer;
  for (size_t bytes : {size_t{256} << 10, kHugePage, 3 * kHugePage + 17, 64 * kHugePage}) {
    const auto address = reinterpret_cast<uintptr_t>(buffer.sized(bytes));
    EXPECT_EQ(address % kHugePage, 0u) << bytes << " bytes";
    EXPECT_EQ(buffer.capacity() % kHugePage, 0u) << bytes << " bytes";
  }
  HugePageBuffer small;
  small.sized(100 << 10);
  EXPECT_LT(small.capacity(), kHugePage);  // a huge page would cost more than it saves
}

TEST(HugePageBuffer, TheKernelMayBackItWithHugePages) {
  const std::string mode = transparentHugePageMode();
  if (mode != "madvise" && mode != "always") {
    GTEST_SKIP() << "transparent huge pages are '" << mode << "' on this kernel";
  }
  HugePageBuffer buffer;
  unsigned char* data = buffer.sized(1 << 20);  // the smallest fusion buffer that gets them
  std::memset(data, 1, 1 << 20);
  const int eligible = thpEligible(data);
  if (eligible < 0) GTEST_SKIP() << "this kernel's smaps has no THPeligible line";
  EXPECT_EQ(eligible, 1) << "the buffer was not advised MADV_HUGEPAGE";
}

}  // namespace
}  // namespace ronde
