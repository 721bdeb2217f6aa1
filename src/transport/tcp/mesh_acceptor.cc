#include "transport/tcp/mesh_acceptor.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log_limiter.h"
#include "common/logging.h"
#include "common/secret_handshake.h"
#include "common/socket.h"
#include "common/unique_fd.h"
#include "ronde/errors.h"
#include "transport/tcp/tcp_link.h"

namespace ronde {
namespace {

using Clock = Deadline::Clock;

// Out of descriptors, accept() fails while the listener stays readable: rest it this long.
constexpr auto kAcceptRest = std::chrono::milliseconds(10);

// One accepted connection that has not yet proven the secret and named its rank.
struct PendingPeer {
  UniqueFd fd;
  std::string address;  // "a.b.c.d:port", for log lines
  Clock::time_point accepted_at;
  Clock::time_point deadline;
  std::unique_ptr<SecretHandshake> handshake;  // null once passed (or without a secret)
  std::string outgoing;
  MeshHello hello{};
  size_t hello_bytes = 0;
  std::string refused;  // why it is dropped; empty while it may still become a peer
};

enum class Progress { kRunning, kGreeted, kRefused };

// Sends what is queued without blocking; false (with p.refused set) on a broken socket.
bool flushSome(PendingPeer& p) {
  while (!p.outgoing.empty()) {
    SocketIo io = sendSome(p.fd.get(), p.outgoing.data(), p.outgoing.size());
    if (io.error != 0) {
      p.refused = std::string("send: ") + std::strerror(io.error);
      return false;
    }
    if (io.bytes == 0) return true;
    p.outgoing.erase(0, io.bytes);
  }
  return true;
}

// Reads what has arrived, never past the greeting: the bytes after it belong to the link.
Progress advance(PendingPeer& p, const MeshAcceptorOptions& options) {
  if (!flushSome(p)) return Progress::kRefused;
  for (;;) {
    uint8_t buffer[SecretHandshake::kNonceSize + SecretHandshake::kAnswerSize];
    size_t wanted = p.handshake ? p.handshake->bytesWanted() : sizeof(MeshHello) - p.hello_bytes;
    uint8_t* into = p.handshake ? buffer : reinterpret_cast<uint8_t*>(&p.hello) + p.hello_bytes;
    SocketIo io = recvSome(p.fd.get(), into, wanted);
    if (io.closed) {
      p.refused = p.handshake ? "it closed the connection during the job-secret handshake"
                              : "it closed the connection before naming its rank";
      return Progress::kRefused;
    }
    if (io.error != 0) {
      p.refused = std::string("recv: ") + std::strerror(io.error);
      return Progress::kRefused;
    }
    if (io.bytes == 0) return Progress::kRunning;
    if (p.handshake) {
      p.handshake->feed(buffer, io.bytes);
      p.outgoing += p.handshake->takeOutgoing();
      if (p.handshake->state() == SecretHandshake::State::kFailed) {
        flushSome(p);  // our answer tells an honest peer with a wrong secret what happened
        p.refused = "it did not prove the job secret";
        return Progress::kRefused;
      }
      if (!flushSome(p)) return Progress::kRefused;
      if (p.handshake->state() == SecretHandshake::State::kPassed) p.handshake.reset();
      continue;
    }
    p.hello_bytes += io.bytes;
    if (p.hello_bytes < sizeof(MeshHello)) continue;
    if (p.hello.magic != MeshHello::kMagic || p.hello.rank <= options.rank ||
        p.hello.rank >= options.size) {
      p.refused = "unexpected greeting";
      return Progress::kRefused;
    }
    // The peer waits for our last handshake bytes before it greets, so none are left here.
    return Progress::kGreeted;
  }
}

std::string missingRanks(const std::vector<std::unique_ptr<Link>>& links,
                         const MeshAcceptorOptions& options) {
  std::string missing;
  for (int r = options.rank + 1; r < options.size; ++r) {
    if (links[size_t(r)]) continue;
    if (!missing.empty()) missing += ", ";
    missing += options.names[size_t(r)];
  }
  return missing;
}

}  // namespace

std::vector<std::unique_ptr<Link>> acceptMeshPeers(int listen_fd,
                                                   const MeshAcceptorOptions& options,
                                                   Deadline deadline) {
  std::vector<std::unique_ptr<Link>> links(size_t(options.size));
  int expected = options.size - 1 - options.rank;
  std::vector<PendingPeer> pending;
  std::vector<pollfd> fds;
  LogLimiter refusals(5, std::chrono::seconds(10));
  bool accept_failing = false;
  Clock::time_point listener_rests_until{};
  auto refuse = [&](PendingPeer& p) {
    std::string note;
    if (refusals.allow(Clock::now(), &note)) {
      log(LogLevel::kWarning, options.names[size_t(options.rank)],
          " refused a data connection from ", p.address, ": ", p.refused, note);
    }
    p.fd.reset();
  };

  while (expected > 0) {
    Clock::time_point now = Clock::now();
    if (now >= deadline.at()) {
      throw makeError(ErrorCode::kTimeout, options.names[size_t(options.rank)],
                      " timed out waiting for ", missingRanks(links, options),
                      " to connect (start timeout)");
    }
    Clock::time_point wake = deadline.at();
    fds.clear();
    const bool poll_listener = now >= listener_rests_until;
    fds.push_back({poll_listener ? listen_fd : -1, POLLIN, 0});
    if (!poll_listener) wake = std::min(wake, listener_rests_until);
    for (PendingPeer& p : pending) {
      fds.push_back({p.fd.get(), short(POLLIN | (p.outgoing.empty() ? 0 : POLLOUT)), 0});
      wake = std::min(wake, p.deadline);
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
    int ready = ::poll(fds.data(), fds.size(), int(std::clamp<int64_t>(left + 1, 0, 1000)));
    if (ready < 0 && errno != EINTR) {
      throw makeError(ErrorCode::kIo, "poll: ", std::strerror(errno));
    }
    now = Clock::now();

    for (size_t i = 0; i < pending.size(); ++i) {
      PendingPeer& p = pending[i];
      Progress progress = Progress::kRunning;
      if (ready > 0 && fds[i + 1].revents != 0) progress = advance(p, options);
      if (progress == Progress::kGreeted && links[size_t(p.hello.rank)]) {
        p.refused = "a second connection claiming " + options.names[size_t(p.hello.rank)];
      } else if (progress == Progress::kGreeted) {
        const int rank = p.hello.rank;
        links[size_t(rank)] =
            std::make_unique<TcpLink>(std::move(p.fd), rank, options.names[size_t(rank)]);
        --expected;
      } else if (progress == Progress::kRunning && now >= p.deadline) {
        p.refused = "it did not prove the job secret and name its rank in time";
      }
    }
    for (PendingPeer& p : pending) {
      if (!p.refused.empty() && p.fd) refuse(p);
    }
    pending.erase(
        std::remove_if(pending.begin(), pending.end(), [](const PendingPeer& p) { return !p.fd; }),
        pending.end());

    if (ready > 0 && (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL))) {
      throw makeError(ErrorCode::kIo, options.names[size_t(options.rank)],
                      ": the listening socket was closed while waiting for ",
                      missingRanks(links, options));
    }
    if (ready <= 0 || !(fds[0].revents & POLLIN)) continue;
    for (;;) {
      std::string peer_address;
      int error = 0;
      UniqueFd fd = acceptNow(listen_fd, &peer_address, &error);
      if (!fd) {
        if (error == 0) break;
        if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
          if (!accept_failing) {
            log(LogLevel::kWarning, options.names[size_t(options.rank)],
                ": accept: ", std::strerror(error), "; retrying until the start deadline");
          }
          accept_failing = true;
          listener_rests_until = now + kAcceptRest;
          break;
        }
        throw makeError(ErrorCode::kIo, options.names[size_t(options.rank)],
                        ": accept: ", std::strerror(error));
      }
      accept_failing = false;
      if (pending.size() >= std::max<size_t>(options.max_pending, 1)) {
        // Full of unproven connections: the oldest has had the longest chance.
        auto oldest = std::min_element(pending.begin(), pending.end(),
                                       [](const PendingPeer& a, const PendingPeer& b) {
                                         return a.accepted_at < b.accepted_at;
                                       });
        oldest->refused = "too many unproven connections; it was the oldest";
        refuse(*oldest);
        pending.erase(oldest);
      }
      PendingPeer p;
      p.address = std::move(peer_address);
      p.fd = std::move(fd);
      p.accepted_at = now;
      p.deadline = std::min(deadline.at(), now + options.handshake_timeout);
      if (!options.secret.empty()) {
        p.handshake = std::make_unique<SecretHandshake>(options.secret, /*is_server=*/true);
        p.outgoing = p.handshake->takeOutgoing();
      }
      pending.push_back(std::move(p));
    }
  }
  return links;
}

}  // namespace ronde
