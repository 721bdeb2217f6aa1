#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "collectives/collective_context.h"
#include "ronde/errors.h"

namespace ronde {

void waitForLinks(const LinkInterest* interests, int count, const CollectiveContext& ctx) {
  pollfd fds[8];
  RONDE_CHECK(count > 0 && count <= 8);
  for (int i = 0; i < count; ++i) {
    short events = static_cast<short>((interests[i].read ? POLLIN : 0) |
                                      (interests[i].write ? POLLOUT : 0));
    fds[i] = pollfd{interests[i].link->pollFd(), events, 0};
  }
  if (ctx.spin_before_block) {
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    do {
      if (::poll(fds, static_cast<nfds_t>(count), 0) > 0) return;
    } while (std::chrono::steady_clock::now() < until);
  }
  for (;;) {
    if (ctx.aborted && ctx.aborted->load(std::memory_order_relaxed)) {
      throw makeError(ErrorCode::kAborted, ctx.what(), " was aborted");
    }
    // Wake at least every 100 ms so that an abort from another thread is noticed.
    int rc = ::poll(fds, static_cast<nfds_t>(count), ctx.deadline.pollMillis(100));
    if (rc > 0) return;  // errors and hang-ups surface in the next send/recv
    if (rc < 0 && errno != EINTR) {
      throw makeError(ErrorCode::kIo, "poll in ", ctx.what(), ": ", std::strerror(errno));
    }
    if (ctx.deadline.expired()) {
      std::string peers;
      for (int i = 0; i < count; ++i) {
        peers += (i ? ", " : "") + interests[i].link->peerName();
      }
      throw makeError(ErrorCode::kTimeout, ctx.what(), " timed out waiting for ", peers,
                      " (is that rank still calling the same collectives?)");
    }
  }
}

void exchange(Link* to, const void* send_data, size_t send_size, Link* from, void* recv_data,
              size_t recv_size, const CollectiveContext& ctx) {
  auto* send_ptr = static_cast<const char*>(send_data);
  auto* recv_ptr = static_cast<char*>(recv_data);
  size_t sent = to ? 0 : send_size;
  size_t received = from ? 0 : recv_size;
  while (sent < send_size || received < recv_size) {
    size_t moved = 0;
    if (sent < send_size) {
      size_t n = to->sendSome(send_ptr + sent, send_size - sent);
      sent += n;
      moved += n;
    }
    if (received < recv_size) {
      size_t n = from->recvSome(recv_ptr + received, recv_size - received);
      received += n;
      moved += n;
    }
    if (moved > 0) continue;
    LinkInterest interests[2];
    int count = 0;
    if (sent < send_size) interests[count++] = {to, false, true};
    if (received < recv_size) {
      if (count == 1 && to == from) {
        interests[0].read = true;
      } else {
        interests[count++] = {from, true, false};
      }
    }
    waitForLinks(interests, count, ctx);
  }
}

}  // namespace ronde
