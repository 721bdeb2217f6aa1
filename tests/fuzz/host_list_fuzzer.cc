// Fuzzes the launcher's host parsing: `-H` lists and hostfiles, then rank placement. Bad
// input may only throw ronde::Error; what parses places ranks consistently.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "launcher/host_list.h"
#include "ronde/errors.h"

namespace launcher = ronde::launcher;

namespace {

void place(const std::vector<launcher::HostSlots>& hosts) {
  long long slots = 0;
  for (const auto& h : hosts) {
    if (h.slots <= 0 || h.name.empty()) __builtin_trap();
    slots += h.slots;
  }
  for (int ranks : {1, 3, 17}) {
    try {
      auto placed = launcher::placeRanks(hosts, ranks);
      if (static_cast<int>(placed.size()) != ranks) __builtin_trap();
      for (int r = 0; r < ranks; ++r) {
        const auto& p = placed[static_cast<size_t>(r)];
        if (p.rank != r || p.size != ranks || p.local_rank >= p.local_size ||
            p.cross_rank >= p.cross_size)
          __builtin_trap();
      }
    } catch (const ronde::Error&) {
      if (ranks <= slots) __builtin_trap();  // only "more ranks than slots" may refuse
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    place(launcher::parseHostList(text));
  } catch (const ronde::Error&) {
  }
  try {
    place(launcher::parseHostFile(text, "hostfile"));
  } catch (const ronde::Error&) {
  }
  return 0;
}
