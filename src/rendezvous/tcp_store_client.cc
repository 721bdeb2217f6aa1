// Client of TcpStoreServer: one connection, one request in flight at a time (a mutex around
// each request/response), every wait bounded by a deadline: the queue for the connection,
// the reconnect after a dropped one, and the request itself.
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "common/secret_handshake.h"
#include "common/socket.h"
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

class TcpStore : public Store {
 public:
  TcpStore(std::string host, int port, std::string secret, Duration connect_timeout)
      : host_(std::move(host)),
        port_(port),
        secret_(std::move(secret)),
        connect_timeout_(connect_timeout),
        where_("rendezvous store at " + host_ + ":" + std::to_string(port_)) {
    std::lock_guard<std::mutex> lock(mutex_);
    connect(Clock::time_point::max());
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
    return tryGetBy(key, value, Clock::time_point::max());
  }

  // A request that outlives `answer_bound` is abandoned like any timed-out request: its
  // connection is dropped (a late reply must not answer the next request) and the next call
  // connects afresh, so the store stays usable when its server was only slow.
  bool tryGetWithin(const std::string& key, Bytes* value, Duration answer_bound) override {
    // Compared in milliseconds: Duration::max() ("no bound") overflows in nanoseconds.
    if (answer_bound >= std::chrono::duration_cast<Duration>(requestTimeout())) {
      return tryGet(key, value);
    }
    return tryGetBy(key, value, Clock::now() + std::max(answer_bound, Duration(0)));
  }

  int64_t add(const std::string& key, int64_t delta) override {
    auto [status, payload] = call(Op::kAdd, key, "", uint64_t(delta), requestDeadline());
    if (payload.size() != 8) {
      throw makeError(ErrorCode::kIo, where_, ": malformed reply to add('", key, "')");
    }
    return int64_t(tcp_store::getLittleEndian(payload.data(), 8));
  }

  void erase(const std::string& key) override { call(Op::kErase, key, "", 0, requestDeadline()); }

  // Shuts the connection down under the request in flight (its poll wakes, its recv reads the
  // end of the stream), or under the handshake of a connect in progress; later calls throw.
  void abandon() override {
    abandoned_.store(true);
    std::lock_guard<std::mutex> lock(fd_mutex_);
    if (fd_) ::shutdown(fd_.get(), SHUT_RDWR);
  }

 private:
  Clock::duration requestTimeout() const {
    return std::max<Clock::duration>(connect_timeout_, kMinRequestTimeout);
  }
  Clock::time_point requestDeadline() const { return Clock::now() + requestTimeout(); }

  // tryGet ending at `bounded_by` (max: unbounded, the store's own request timeout).
  bool tryGetBy(const std::string& key, Bytes* value, Clock::time_point bounded_by) {
    const bool bounded = bounded_by != Clock::time_point::max();
    auto [status, payload] =
        call(Op::kTryGet, key, "", 0, bounded ? bounded_by : requestDeadline(), bounded_by);
    if (status == Status::kNotFound) return false;
    if (value) value->assign(payload.begin(), payload.end());
    return true;
  }

  // Returns the status (kOk, kNotFound or kTimeout) and payload; kError becomes an exception.
  // A request bounded by its caller (`bounded_by`, its deadline) ends there whatever it waits
  // on: the queue for the connection, which another thread's get may hold for as long as it
  // waits for its key, and the reconnect. Other requests queue unbounded and reconnect for the
  // connect timeout, as the store's own requests always did.
  std::pair<Status, std::string> call(Op op, const std::string& key, const std::string& value,
                                      uint64_t argument, Clock::time_point deadline,
                                      Clock::time_point bounded_by = Clock::time_point::max()) {
    std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
    if (bounded_by == Clock::time_point::max()) {
      lock.lock();
    } else if (!lockBy(lock, bounded_by)) {
      throw makeError(ErrorCode::kTimeout, where_, ": no answer for key '", key,
                      "' in time: another request of this process held the connection");
    }
    if (abandoned_.load()) {
      throw makeError(ErrorCode::kPeerLost, where_, " was given up: its server stopped answering");
    }
    if (lost_) throw makeError(ErrorCode::kPeerLost, "lost connection to ", where_, " earlier");
    // A request abandoned at its deadline leaves a late reply on the old connection, so that
    // connection was dropped; start afresh rather than read someone else's answer.
    if (!fd_) connect(bounded_by);
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
      if (error.code() == ErrorCode::kTimeout) resetFd();
      if (error.code() == ErrorCode::kPeerLost) {
        resetFd();
        lost_ = true;
      }
      throw;
    }
  }

  // Waits for the connection until `by`. Not std::timed_mutex: its clock-based lock is invisible
  // to ThreadSanitizer, which then reports every unlock. Only a bounded request that finds
  // another thread's request on the connection polls here.
  static bool lockBy(std::unique_lock<std::mutex>& lock, Clock::time_point by) {
    while (!lock.try_lock()) {
      if (Clock::now() >= by) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  void resetFd() {
    std::lock_guard<std::mutex> lock(fd_mutex_);
    fd_.reset();
  }

  // The server may start after its clients: refused connections are retried until the
  // connect timeout. A wrong secret is not retried: it will not get any better.
  // The socket is fd_ from before its handshake, so that abandon() reaches a server that
  // accepted (the kernel does that for a stopped process) but never answers. `limit` is the
  // deadline of a bounded request that connects.
  void connect(Clock::time_point limit) {
    const auto connect_by = std::min(Clock::now() + connect_timeout_, limit);
    const auto within =
        std::chrono::duration_cast<Duration>(connect_by - Clock::now()).count();
    UniqueFd fd = connectTcp(host_, port_, Deadline(connect_by),
                             where_ + " within " + std::to_string(within) + " ms");
    {
      std::lock_guard<std::mutex> lock(fd_mutex_);
      fd_ = std::move(fd);
      if (abandoned_.load()) ::shutdown(fd_.get(), SHUT_RDWR);
    }
    try {
      authenticateConnection(fd_.get(), secret_, /*is_server=*/false,
                             std::min(requestDeadline(), limit), where_);
    } catch (...) {
      resetFd();
      throw;
    }
  }

  void sendAll(const std::string& data, Clock::time_point deadline) {
    sendFully(fd_.get(), data.data(), data.size(), Deadline(deadline), where_);
  }

  std::string receiveExact(size_t size, Clock::time_point deadline) {
    std::string data(size, '\0');
    recvFully(fd_.get(), data.data(), size, Deadline(deadline), where_);
    return data;
  }

  const std::string host_;
  const int port_;
  const std::string secret_;
  const Duration connect_timeout_;
  const std::string where_;  // "rendezvous store at host:port", for every message

  std::mutex mutex_;  // one request/response at a time on fd_
  // Written under mutex_ and fd_mutex_ both (so a call holding mutex_ may read it), read by
  // abandon() under fd_mutex_ alone; empty after a timed-out request.
  UniqueFd fd_;
  std::mutex fd_mutex_;
  bool lost_ = false;  // guarded by mutex_; the server went away, every later call fails
  std::atomic<bool> abandoned_{false};
};

}  // namespace

std::shared_ptr<Store> makeTcpStore(const std::string& host, int port, const std::string& secret,
                                    Duration connect_timeout) {
  return std::make_shared<TcpStore>(host, port, secret, connect_timeout);
}

}  // namespace ronde
