#include <algorithm>

#include "collectives/link_collectives.h"
#include "ronde/errors.h"

namespace ronde {

// Bytes flow root -> root+1 -> ... -> root-1 in chunks: every link carries the data once and,
// once the pipe is full, all links are busy at the same time.
void chainBroadcast(const LinkGroup& group, void* buffer, size_t bytes, int root,
                    const CollectiveContext& ctx) {
  const int n = group.size;
  if (n == 1 || bytes == 0) return;
  const int position = (group.rank - root + n) % n;  // distance from the root along the chain
  Link* from = position == 0 ? nullptr : group.to(group.prev());
  Link* to = position == n - 1 ? nullptr : group.to(group.next());
  char* data = static_cast<char*>(buffer);
  size_t received = from ? 0 : bytes;
  size_t sent = to ? 0 : bytes;
  const size_t chunk = std::max<size_t>(ctx.chunk_bytes, 1);
  while (received < bytes || sent < bytes) {
    size_t moved = 0;
    if (received < bytes) {
      size_t n_in = from->recvSome(data + received, std::min(chunk, bytes - received));
      received += n_in;
      moved += n_in;
    }
    if (sent < received) {  // forward only what has arrived
      size_t n_out = to->sendSome(data + sent, std::min(chunk, received - sent));
      sent += n_out;
      moved += n_out;
    }
    if (moved > 0) continue;
    LinkInterest interests[2];
    int count = 0;
    if (received < bytes) interests[count++] = {from, true, false};
    if (sent < received) interests[count++] = {to, false, true};
    RONDE_CHECK(count > 0);
    waitForLinks(interests, count, ctx);
  }
}

}  // namespace ronde
