// Client of TcpStoreServer: one connection, one request in flight at a time (a mutex around
// each request/response), every wait bounded by a deadline.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/secret_handshake.h"
#include "common/unique_fd.h"
#include "rendezvous/tcp_store_protocol.h"
#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde {
namespace {

using Clock = std::chrono::steady_clock;
using tcp_store::Op;
using tcp_store::Status;

// Requests that do not wait for a key are answered at once by a live server; this bounds
// them even when the caller chose a tiny connect timeout.
constexpr auto kMinRequestTimeout = std::chrono::seconds(10);
// The server answers a timed-out GET itself at the caller's deadline; the client waits this
// much longer for that answer before it gives up on the connection.
constexpr auto kGetGrace = std::chrono::seconds(2);
constexpr auto kConnectRetryPause = std::chrono::milliseconds(50);

class TcpStore : public Store {
 public:
  TcpStore(std::string host, int port, std::string secret, Duration connect_timeout)
      : host_(std::move(host)),
        port_(port),
        secret_(std::move(secret)),
        connect_timeout_(connect_timeout),
        where_("rendezvous store at " + host_ + ":" + std::to_string(port_)) {
    std::lock_guard<std::mutex> lock(mutex_);
    connect();
  }

  void set(const std::string& key, const Bytes& value) override {
    call(Op::kSet, key, std::string(value.begin(), value.end()), 0, requestDeadline());
  }

  Bytes get(const std::string& key, Duration timeout) override {
    const uint64_t wait_ms = uint64_t(std::max<int64_t>(timeout.count(), 0));
    auto [status, payload] = call(Op::kGet, key, "", wait_ms, Clock::now() + timeout + kGetGrace);
    if (status == Status::kTimeout) {
      throw makeError(ErrorCode::kTimeout, where_, ": key '", key, "' was not set within ",
                      timeout.count(), " ms");
    }
    return Bytes(payload.begin(), payload.end());
  }

  bool tryGet(const std::string& key, Bytes* value) override {
    auto [status, payload] = call(Op::kTryGet, key, "", 0, requestDeadline());
    if (status == Status::kNotFound) return false;
    if (value) value->assign(payload.begin(), payload.end());
    return true;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    auto [status, payload] = call(Op::kAdd, key, "", uint64_t(delta), requestDeadline());
    if (payload.size() != 8) {
      throw makeError(ErrorCode::kIo, where_, ": malformed reply to add('", key, "')");
    }
    return int64_t(tcp_store::getLittleEndian(payload.data(), 8));
  }

  void erase(const std::string& key) override { call(Op::kErase, key, "", 0, requestDeadline()); }

 private:
  Clock::time_point requestDeadline() const {
    return Clock::now() + std::max<Clock::duration>(connect_timeout_, kMinRequestTimeout);
  }

  // Returns the status (kOk, kNotFound or kTimeout) and payload; kError becomes an exception.
  std::pair<Status, std::string> call(Op op, const std::string& key, const std::string& value,
                                      uint64_t argument, Clock::time_point deadline) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (lost_) throw makeError(ErrorCode::kPeerLost, "lost connection to ", where_, " earlier");
    // A request abandoned at its deadline leaves a late reply on the old connection, so that
    // connection was dropped; start afresh rather than read someone else's answer.
    if (!fd_) connect();
    try {
      sendAll(tcp_store::encodeRequest(op, key, value, argument), deadline);
      std::string header = receiveExact(tcp_store::kResponseHeaderSize, deadline);
      const auto status = Status(uint8_t(header[0]));
      const uint64_t size = tcp_store::getLittleEndian(header.data() + 1, 4);
      if (size > tcp_store::kMaxValueSize) {
        throw makeError(ErrorCode::kIo, where_, ": malformed reply (", size, " bytes)");
      }
      std::string payload = receiveExact(size, deadline);
      if (status == Status::kError) {
        throw makeError(ErrorCode::kInvalidArgument, where_, ": ", payload);
      }
      return {status, std::move(payload)};
    } catch (const Error& error) {
      if (error.code() == ErrorCode::kTimeout) fd_.reset();
      if (error.code() == ErrorCode::kPeerLost) {
        fd_.reset();
        lost_ = true;
      }
      throw;
    }
  }

  // The server may start after its clients: refused connections are retried until the
  // connect timeout. A wrong secret is not retried: it will not get any better.
  void connect() {
    const auto deadline = Clock::now() + connect_timeout_;
    std::string last_error = "no attempt";
    for (;;) {
      UniqueFd fd = tryConnect(deadline, &last_error);
      if (fd) {
        int one = 1;
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        authenticateConnection(fd.get(), secret_, /*is_server=*/false,
                               Clock::now() + std::max<Clock::duration>(connect_timeout_,
                                                                        kMinRequestTimeout),
                               where_);
        fd_ = std::move(fd);
        return;
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        throw makeError(ErrorCode::kTimeout, "could not connect to ", where_, " within ",
                        connect_timeout_.count(), " ms: ", last_error);
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(kConnectRetryPause, deadline - now));
    }
  }

  // One pass over the resolved addresses; returns an empty fd (and why) if none answered.
  UniqueFd tryConnect(Clock::time_point deadline, std::string* last_error) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    int status = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found);
    if (status != 0) {
      *last_error = std::string("cannot resolve host: ") + ::gai_strerror(status);
      return UniqueFd();
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, ::freeaddrinfo);
    for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
      UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!fd) {
        *last_error = std::strerror(errno);
        continue;
      }
      if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) return fd;
      if (errno != EINPROGRESS) {
        *last_error = std::strerror(errno);
        continue;
      }
      if (!waitReady(fd.get(), POLLOUT, deadline)) {
        *last_error = "connect timed out";
        continue;
      }
      int error = 0;
      socklen_t length = sizeof(error);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
      if (error == 0) return fd;
      *last_error = std::strerror(error);
    }
    return UniqueFd();
  }

  // False once the deadline passes.
  bool waitReady(int fd, short events, Clock::time_point deadline) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd entry{fd, events, 0};
      int ready = ::poll(&entry, 1, int(std::min<int64_t>(left.count() + 1, 1000)));
      if (ready > 0) return true;
      if (ready < 0 && errno != EINTR) return true;  // the next send/recv reports the error
    }
  }

  void sendAll(const std::string& data, Clock::time_point deadline) {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t sent = ::send(fd_.get(), data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (sent >= 0) {
        done += size_t(sent);
        continue;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        throw makeError(ErrorCode::kPeerLost, "lost connection to ", where_, ": ",
                        std::strerror(errno));
      }
      if (!waitReady(fd_.get(), POLLOUT, deadline)) {
        throw makeError(ErrorCode::kTimeout, where_, " did not accept a request in time");
      }
    }
  }

  std::string receiveExact(size_t size, Clock::time_point deadline) {
    std::string data(size, '\0');
    size_t done = 0;
    while (done < size) {
      ssize_t got = ::recv(fd_.get(), data.data() + done, size - done, 0);
      if (got > 0) {
        done += size_t(got);
        continue;
      }
      if (got == 0) {
        throw makeError(ErrorCode::kPeerLost, "lost connection to ", where_,
                        " (the server closed it)");
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        throw makeError(ErrorCode::kPeerLost, "lost connection to ", where_, ": ",
                        std::strerror(errno));
      }
      if (!waitReady(fd_.get(), POLLIN, deadline)) {
        throw makeError(ErrorCode::kTimeout, where_, " did not answer in time");
      }
    }
    return data;
  }

  const std::string host_;
  const int port_;
  const std::string secret_;
  const Duration connect_timeout_;
  const std::string where_;  // "rendezvous store at host:port", for every message

  std::mutex mutex_;  // one request/response at a time on fd_
  UniqueFd fd_;       // guarded by mutex_; empty after a timed-out request
  bool lost_ = false;  // guarded by mutex_; the server went away, every later call fails
};

}  // namespace

std::shared_ptr<Store> makeTcpStore(const std::string& host, int port, const std::string& secret,
                                    Duration connect_timeout) {
  return std::make_shared<TcpStore>(host, port, secret, connect_timeout);
}

}  // namespace ronde
