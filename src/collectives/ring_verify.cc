#include <cstring>

#include "collectives/link_collectives.h"
#include "collectives/op_descriptor.h"
#include "collectives/ring_verify.h"
#include "ronde/errors.h"

namespace ronde {

void verifyAroundRing(const LinkGroup& group, const OpDescriptor& mine, const std::string& self_name,
                      const CollectiveContext& ctx) {
  if (group.size == 1) return;
  OpDescriptor left{};
  Link* left_link = group.to(group.prev());
  exchange(group.to(group.next()), &mine, sizeof(mine), left_link, &left, sizeof(left), ctx);
  if (std::memcmp(&left, &mine, sizeof(OpDescriptor)) == 0) return;
  std::string difference = describeDifference(left, mine);
  if (difference.empty() && left.op_index != mine.op_index) {
    difference = "collective number " + std::to_string(left.op_index) + " vs " +
                 std::to_string(mine.op_index);
  }
  if (!difference.empty()) {
    throw makeError(ErrorCode::kMismatch, "ranks disagree on ", describeOp(mine), ": ",
                    left_link->peerName(), " vs ", self_name, ": ", difference);
  }
}

}  // namespace ronde
