#include "collectives/link_collectives.h"

namespace ronde {

void disseminationBarrier(const LinkGroup& group, const CollectiveContext& ctx) {
  for (int distance = 1; distance < group.size; distance *= 2) {
    char token = 1, incoming = 0;
    exchange(group.to(group.next(distance)), &token, 1, group.to(group.prev(distance)), &incoming,
             1, ctx);
  }
}

}  // namespace ronde
