// The TCP store server: one background thread runs a poll() loop over every connection with
// non-blocking sockets, so hundreds of ranks cost hundreds of buffers, not threads. A GET for
// a missing key is parked until some SET/ADD creates the key or its timeout passes; the job
// secret handshake runs inside the same loop, so a silent or hostile peer never stalls others.
// Unauthenticated connections are capped and timed out, and a failing accept() (no file
// descriptors left) pauses the listener instead of spinning on it.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log_limiter.h"
#include "common/logging.h"
#include "common/secret_handshake.h"
#include "common/socket.h"
#include "rendezvous/counter.h"
#include "rendezvous/tcp_store_protocol.h"
#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde {
namespace {

using Clock = std::chrono::steady_clock;
using tcp_store::Op;
using tcp_store::Status;

// After a failed accept() the listener rests this long, doubling up to the maximum, so that
// a process out of descriptors neither spins on the readable listener nor floods the log.
constexpr auto kFirstAcceptPause = std::chrono::milliseconds(10);
constexpr auto kMaxAcceptPause = std::chrono::milliseconds(1000);
// Per wake-up read budget per connection, so one bulk writer cannot starve the rest.
constexpr size_t kReadBudget = 1 << 20;
// Caps a client-supplied GET timeout so deadline arithmetic cannot overflow.
constexpr uint64_t kMaxWaitMs = uint64_t(365) * 24 * 3600 * 1000;

struct Connection {
  uint64_t id = 0;
  UniqueFd fd;
  std::string peer;  // "address:port", for log lines
  // Present until the peer has proven the secret; no request is read before that.
  std::unique_ptr<SecretHandshake> handshake;
  Clock::time_point accepted_at;
  Clock::time_point handshake_deadline;
  std::string input;
  size_t input_offset = 0;
  std::string output;
  // A parked GET. Later requests of this connection wait behind it, which keeps the
  // responses in request order without tagging them.
  std::optional<std::string> parked_key;
  Clock::time_point parked_deadline;
  bool dead = false;  // removed at the end of the loop turn, so references stay valid
};

UniqueFd bindListener(const std::string& bind_address, int port) {
  try {
    return listenTcp(bind_address, port, SOMAXCONN);
  } catch (const Error& error) {
    throw Error(error.code(), std::string("rendezvous store server: ") + error.what());
  }
}

}  // namespace

struct TcpStoreServer::Impl {
  Impl(const std::string& bind_address, int port_number, std::string job_secret,
       const Limits& server_limits)
      : secret(std::move(job_secret)),
        limits(server_limits),
        listener(bindListener(bind_address, port_number)),
        wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        port(boundPort(listener.get())) {
    if (!wake) throw makeError(ErrorCode::kIo, "rendezvous store server: eventfd: ", std::strerror(errno));
    thread = std::thread([this] { run(); });
  }

  ~Impl() {
    stopping.store(true);
    uint64_t one = 1;
    // A full eventfd counter still wakes the loop, so a failed write needs no handling.
    [[maybe_unused]] ssize_t ignored = ::write(wake.get(), &one, sizeof(one));
    thread.join();
  }

  void run();
  void acceptAll();
  void readFrom(Connection& connection);
  void processRequests(Connection& connection);
  void handle(Connection& connection, tcp_store::Request& request);
  void respond(Connection& connection, Status status, const std::string& payload);
  void flush(Connection& connection);
  void wakeWaiters(const std::string& key);
  void expireDeadlines(Clock::time_point now);
  void forgetParked(Connection& connection);
  void drop(Connection& connection, const std::string& reason);
  // Connections that have not proven the secret yet, and the one accepted first.
  struct Pending {
    size_t count = 0;
    Connection* oldest = nullptr;
  };
  int pollTimeoutMs(Clock::time_point now, const Pending& pending) const;
  Pending pendingHandshakes() const;
  bool atCap(const Pending& pending) const {
    return pending.count >= std::max<size_t>(limits.max_unauthenticated, 1);
  }
  bool listenerWanted(Clock::time_point now, const Pending& pending) const;
  void backOffAccepting(int error, Clock::time_point now);
  void evictForNewcomer(Connection& oldest, size_t pending);
  void endCapEpisode();

  const std::string secret;
  const Limits limits;
  UniqueFd listener;
  UniqueFd wake;  // eventfd the destructor writes to end the loop
  const int port;
  std::atomic<bool> stopping{false};
  std::thread thread;

  // Owned by the loop thread alone; the constructor and destructor never touch them while
  // it runs (the thread starts last and is joined first).
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters;  // key -> parked connections
  std::unordered_map<std::string, std::string> values;
  std::vector<uint64_t> runnable;  // unparked connections with input left to process
  uint64_t next_id = 1;
  // accept() failing: the listener is left out of poll() until accept_paused_until.
  Clock::time_point accept_paused_until{};
  Clock::duration accept_pause{};  // zero while accept() succeeds
  uint64_t accept_failures = 0;    // in the current episode
  // Unauthenticated connections at the cap: how many were dropped for newcomers this episode.
  bool cap_episode = false;
  uint64_t evicted = 0;
  LogLimiter refusals{5, std::chrono::seconds(10)};  // strangers refused, one line each
};

void TcpStoreServer::Impl::run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;  // ids[i] owns fds[i + 2]
  while (!stopping.load()) {
    fds.clear();
    ids.clear();
    const Clock::time_point now = Clock::now();
    const Pending pending = pendingHandshakes();
    if (cap_episode && !atCap(pending)) endCapEpisode();
    fds.push_back({wake.get(), POLLIN, 0});
    // A negative descriptor is skipped by poll(): the listener rests while paused or full.
    fds.push_back({listenerWanted(now, pending) ? listener.get() : -1, POLLIN, 0});
    for (auto& [id, connection] : connections) {
      short events = POLLIN;
      if (!connection->output.empty()) events |= POLLOUT;
      fds.push_back({connection->fd.get(), events, 0});
      ids.push_back(id);
    }
    int ready = ::poll(fds.data(), fds.size(), pollTimeoutMs(now, pending));
    if (ready < 0 && errno != EINTR) {
      log(LogLevel::kError, "rendezvous store server: poll: ", std::strerror(errno));
      return;
    }
    if (stopping.load()) return;
    if (ready > 0) {
      if (fds[1].revents & POLLIN) acceptAll();
      for (size_t i = 0; i < ids.size(); ++i) {
        const short revents = fds[i + 2].revents;
        if (revents == 0) continue;
        auto found = connections.find(ids[i]);
        if (found == connections.end() || found->second->dead) continue;
        Connection& connection = *found->second;
        if (revents & POLLOUT) flush(connection);
        if (revents & (POLLIN | POLLHUP | POLLERR)) readFrom(connection);
      }
    }
    expireDeadlines(Clock::now());
    while (!runnable.empty()) {
      uint64_t id = runnable.back();
      runnable.pop_back();
      auto found = connections.find(id);
      if (found != connections.end() && !found->second->dead) processRequests(*found->second);
    }
    for (auto it = connections.begin(); it != connections.end();) {
      it = it->second->dead ? connections.erase(it) : std::next(it);
    }
  }
}

int TcpStoreServer::Impl::pollTimeoutMs(Clock::time_point now, const Pending& pending) const {
  std::optional<Clock::time_point> next;
  // Wake when the listener's pause ends, or when the oldest pending one becomes evictable
  // (once it is, the listener is polled again and a newcomer wakes the loop).
  if (accept_paused_until > now) next = accept_paused_until;
  if (atCap(pending)) {
    const auto evictable = pending.oldest->accepted_at + limits.evictable_after;
    if (evictable > now) next = std::min(next.value_or(evictable), evictable);
  }
  for (const auto& [id, connection] : connections) {
    if (connection->handshake) next = std::min(next.value_or(connection->handshake_deadline),
                                               connection->handshake_deadline);
    if (connection->parked_key) next = std::min(next.value_or(connection->parked_deadline),
                                                connection->parked_deadline);
  }
  if (!next) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*next - now).count();
  return int(std::clamp<int64_t>(left + 1, 0, 60'000));
}

TcpStoreServer::Impl::Pending TcpStoreServer::Impl::pendingHandshakes() const {
  Pending pending;
  for (const auto& [id, connection] : connections) {
    if (connection->dead || !connection->handshake) continue;
    ++pending.count;
    if (!pending.oldest || connection->accepted_at < pending.oldest->accepted_at) {
      pending.oldest = connection.get();
    }
  }
  return pending;
}

bool TcpStoreServer::Impl::listenerWanted(Clock::time_point now, const Pending& pending) const {
  if (now < accept_paused_until) return false;
  if (!atCap(pending)) return true;
  // Full: a newcomer may take the oldest one's place once that one had its fair chance.
  return now - pending.oldest->accepted_at >= limits.evictable_after;
}

void TcpStoreServer::Impl::backOffAccepting(int error, Clock::time_point now) {
  accept_pause = accept_pause == Clock::duration::zero()
                     ? Clock::duration(kFirstAcceptPause)
                     : std::min<Clock::duration>(accept_pause * 2, kMaxAcceptPause);
  accept_paused_until = now + accept_pause;
  if (accept_failures++ == 0) {
    log(LogLevel::kWarning, "rendezvous store server on port ", port,
        ": accept: ", std::strerror(error),
        "; new connections wait in the backlog, retried after pauses of up to ",
        std::chrono::duration_cast<std::chrono::milliseconds>(kMaxAcceptPause).count(), " ms");
  }
}

void TcpStoreServer::Impl::evictForNewcomer(Connection& oldest, size_t pending) {
  if (!cap_episode) {
    cap_episode = true;
    log(LogLevel::kWarning, "rendezvous store server on port ", port, ": ", pending,
        " connections have not proven the job secret (the cap); dropping the oldest of them ",
        "for newcomers");
  }
  ++evicted;
  drop(oldest, "");
}

void TcpStoreServer::Impl::endCapEpisode() {
  log(LogLevel::kWarning, "rendezvous store server on port ", port, ": below the cap of ",
      "unauthenticated connections again; ", evicted, " were dropped");
  cap_episode = false;
  evicted = 0;
}

void TcpStoreServer::Impl::acceptAll() {
  for (;;) {
    const Clock::time_point now = Clock::now();
    const Pending pending = secret.empty() ? Pending{} : pendingHandshakes();
    if (!listenerWanted(now, pending)) return;  // the rest wait in the kernel's backlog
    std::string peer;
    int error = 0;
    UniqueFd fd = acceptNow(listener.get(), &peer, &error);
    if (!fd) {
      // A failure (EMFILE, ENFILE, ENOBUFS, ...) leaves the listener readable: rest it.
      if (error != 0) backOffAccepting(error, now);
      return;
    }
    if (accept_failures > 0) {
      log(LogLevel::kWarning, "rendezvous store server on port ", port,
          ": accepting connections again after ", accept_failures, " failed attempts");
      accept_failures = 0;
      accept_pause = Clock::duration::zero();
    }
    if (atCap(pending)) evictForNewcomer(*pending.oldest, pending.count);
    auto connection = std::make_unique<Connection>();
    connection->fd = std::move(fd);
    connection->id = next_id++;
    connection->peer = std::move(peer);
    connection->accepted_at = now;
    if (!secret.empty()) {
      connection->handshake = std::make_unique<SecretHandshake>(secret, /*is_server=*/true);
      connection->handshake_deadline = now + limits.handshake_timeout;
      connection->output = connection->handshake->takeOutgoing();
      flush(*connection);
    }
    const uint64_t id = connection->id;
    connections.emplace(id, std::move(connection));
  }
}

void TcpStoreServer::Impl::readFrom(Connection& connection) {
  char buffer[64 * 1024];
  size_t budget = kReadBudget;
  while (budget > 0) {
    SocketIo io = recvSome(connection.fd.get(), buffer, sizeof(buffer));
    if (io.error != 0) return drop(connection, std::string("recv: ") + std::strerror(io.error));
    if (io.closed) return drop(connection, "");  // an ordinary hang-up
    if (io.bytes == 0) break;
    connection.input.append(buffer, io.bytes);
    budget -= std::min(budget, io.bytes);
  }
  if (connection.handshake) {
    SecretHandshake& handshake = *connection.handshake;
    connection.input_offset += handshake.feed(
        reinterpret_cast<const uint8_t*>(connection.input.data()) + connection.input_offset,
        connection.input.size() - connection.input_offset);
    connection.output += handshake.takeOutgoing();
    if (handshake.state() == SecretHandshake::State::kFailed) {
      // Our answer goes out first so the peer can tell a wrong secret from a crashed server.
      flush(connection);
      std::string note;
      if (refusals.allow(Clock::now(), &note)) {
        log(LogLevel::kWarning, "rendezvous store server: refused connection from ",
            connection.peer, ": it did not prove the job secret", note);
      }
      return drop(connection, "");
    }
    if (handshake.state() == SecretHandshake::State::kRunning) return flush(connection);
    connection.handshake.reset();
  }
  processRequests(connection);
}

void TcpStoreServer::Impl::processRequests(Connection& connection) {
  tcp_store::Request request;
  while (!connection.dead && !connection.parked_key) {
    auto result = tcp_store::parseRequest(connection.input, &connection.input_offset, &request);
    if (result == tcp_store::ParseResult::kIncomplete) break;
    if (result == tcp_store::ParseResult::kMalformed) {
      std::string note;
      if (refusals.allow(Clock::now(), &note)) {
        log(LogLevel::kWarning, "rendezvous store server: closing connection from ",
            connection.peer, ": malformed request", note);
      }
      return drop(connection, "");
    }
    handle(connection, request);
  }
  // Compact only once consumed bytes dominate, so a stream of small requests stays cheap.
  if (connection.input_offset > 0 && connection.input_offset * 2 >= connection.input.size()) {
    connection.input.erase(0, connection.input_offset);
    connection.input_offset = 0;
  }
  flush(connection);
}

void TcpStoreServer::Impl::handle(Connection& connection, tcp_store::Request& request) {
  switch (request.op) {
    case Op::kSet:
      values[request.key] = std::move(request.value);
      respond(connection, Status::kOk, "");
      wakeWaiters(request.key);
      return;
    case Op::kGet: {
      auto found = values.find(request.key);
      if (found != values.end()) return respond(connection, Status::kOk, found->second);
      const uint64_t wait_ms = std::min(request.argument, kMaxWaitMs);
      connection.parked_key = request.key;
      connection.parked_deadline = Clock::now() + std::chrono::milliseconds(wait_ms);
      waiters[request.key].push_back(connection.id);
      return;
    }
    case Op::kTryGet: {
      auto found = values.find(request.key);
      if (found == values.end()) return respond(connection, Status::kNotFound, "");
      return respond(connection, Status::kOk, found->second);
    }
    case Op::kAdd: {
      auto found = values.find(request.key);
      int64_t current = 0;  // a missing key counts from 0
      if (found != values.end()) {
        try {
          current = parseCounter(request.key, Bytes(found->second.begin(), found->second.end()));
        } catch (const Error& error) {
          return respond(connection, Status::kError, error.what());
        }
      }
      const int64_t result = int64_t(uint64_t(current) + request.argument);  // wraps, no UB
      values[request.key] = std::to_string(result);
      std::string payload;
      tcp_store::putLittleEndian(&payload, uint64_t(result), 8);
      respond(connection, Status::kOk, payload);
      wakeWaiters(request.key);
      return;
    }
    case Op::kErase:
      values.erase(request.key);
      return respond(connection, Status::kOk, "");
  }
}

void TcpStoreServer::Impl::respond(Connection& connection, Status status,
                                   const std::string& payload) {
  connection.output += tcp_store::encodeResponse(status, payload);
}

void TcpStoreServer::Impl::flush(Connection& connection) {
  size_t sent_total = 0;
  while (sent_total < connection.output.size()) {
    SocketIo io = sendSome(connection.fd.get(), connection.output.data() + sent_total,
                           connection.output.size() - sent_total);
    if (io.error != 0) {
      connection.output.clear();
      return drop(connection, std::string("send: ") + std::strerror(io.error));
    }
    if (io.bytes == 0) break;  // poll reports POLLOUT later
    sent_total += io.bytes;
  }
  connection.output.erase(0, sent_total);
}

void TcpStoreServer::Impl::wakeWaiters(const std::string& key) {
  auto found = waiters.find(key);
  if (found == waiters.end()) return;
  const std::string& value = values.at(key);
  std::vector<uint64_t> ids = std::move(found->second);
  waiters.erase(found);
  for (uint64_t id : ids) {
    auto connection = connections.find(id);
    if (connection == connections.end() || connection->second->dead) continue;
    Connection& waiter = *connection->second;
    if (waiter.parked_key != key) continue;
    waiter.parked_key.reset();
    respond(waiter, Status::kOk, value);
    flush(waiter);
    // Not processed inline: its next request may set keys and wake others recursively.
    runnable.push_back(id);
  }
}

void TcpStoreServer::Impl::expireDeadlines(Clock::time_point now) {
  for (auto& [id, connection] : connections) {
    if (connection->dead) continue;
    if (connection->handshake && now >= connection->handshake_deadline) {
      std::string note;
      if (refusals.allow(now, &note)) {
        log(LogLevel::kWarning, "rendezvous store server: refused connection from ",
            connection->peer, ": it did not complete the job-secret handshake in time", note);
      }
      drop(*connection, "");
      continue;
    }
    if (connection->parked_key && now >= connection->parked_deadline) {
      forgetParked(*connection);
      respond(*connection, Status::kTimeout, "");
      flush(*connection);
      runnable.push_back(id);
    }
  }
}

void TcpStoreServer::Impl::forgetParked(Connection& connection) {
  if (!connection.parked_key) return;
  auto found = waiters.find(*connection.parked_key);
  if (found != waiters.end()) {
    auto& ids = found->second;
    ids.erase(std::remove(ids.begin(), ids.end(), connection.id), ids.end());
    if (ids.empty()) waiters.erase(found);
  }
  connection.parked_key.reset();
}

void TcpStoreServer::Impl::drop(Connection& connection, const std::string& reason) {
  if (connection.dead) return;
  if (!reason.empty()) {
    log(LogLevel::kDebug, "rendezvous store server: closing connection from ", connection.peer,
        ": ", reason);
  }
  forgetParked(connection);
  connection.dead = true;
  connection.fd.reset();  // close now; the entry itself goes at the end of the loop turn
}

TcpStoreServer::TcpStoreServer(const std::string& bind_address, int port, const std::string& secret,
                               const Limits& limits)
    : impl_(std::make_unique<Impl>(bind_address, port, secret, limits)) {}

TcpStoreServer::~TcpStoreServer() = default;

int TcpStoreServer::port() const { return impl_->port; }

}  // namespace ronde
