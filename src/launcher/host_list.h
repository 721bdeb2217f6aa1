// Which hosts a job runs on and which rank goes where.
//
// Hosts come from `-H host1:2,host2:4` or a hostfile (`host slots=N` per line, `#` comments),
// in horovodrun's formats. Ranks fill hosts in list order, each host up to its slots, so
// ranks of one host are contiguous; local and cross ranks follow horovodrun's definitions.
// Malformed input is an Error(kInvalidArgument) whose message names the offending piece.
#pragma once

#include <string>
#include <vector>

namespace ronde::launcher {

struct HostSlots {
  std::string name;
  int slots = 0;
};

// Parses "host1:2,host2:4". A host without ":slots" gets one slot, as with mpirun.
std::vector<HostSlots> parseHostList(const std::string& text);
// Parses a hostfile's contents; `origin` (the file name) prefixes error messages.
std::vector<HostSlots> parseHostFile(const std::string& contents, const std::string& origin);
// Reads and parses the file at `path`.
std::vector<HostSlots> readHostFile(const std::string& path);

struct RankPlacement {
  std::string host;
  int rank = 0;
  int size = 0;
  int local_rank = 0;
  int local_size = 0;
  int cross_rank = 0;  // index of this host among hosts that have a rank at local_rank
  int cross_size = 0;  // how many hosts have a rank at local_rank
};

// Places `num_ranks` ranks on `hosts`; more ranks than slots is an Error naming both counts.
// Hosts that receive no rank are left out.
std::vector<RankPlacement> placeRanks(const std::vector<HostSlots>& hosts, int num_ranks);

}  // namespace ronde::launcher
