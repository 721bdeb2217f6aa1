// What the tests of the hierarchical collectives share: layouts of ranks on simulated hosts
// (forced host names), and the check that a rank killed while a collective's chunks are in
// flight is named, with its host, by every other rank.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "support/multiprocess.h"

namespace ronde::testing {

struct HostLayout {
  std::string label;
  std::vector<std::string> hosts;  // of each rank
};
inline void PrintTo(const HostLayout& layout, std::ostream* out) { *out << layout.label; }

// The ranks of `layout`, with a 64 KiB shared-memory slot and 300 s for the whole run.
RankSpec simulatedHostsSpec(const HostLayout& layout);

// Every rank runs `setup`, then `collective` once, then again and again: rank `victim` kills
// itself 30 ms into that loop, and every other rank must fail with kPeerLost naming it and its
// host, within 15 s of entering the loop. Records gtest failures otherwise.
void expectKilledRankNamed(const RankSpec& spec, int victim,
                           const std::function<void(Communicator&)>& setup,
                           const std::function<void(Communicator&)>& collective);

}  // namespace ronde::testing
