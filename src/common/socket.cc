#include "common/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "ronde/errors.h"

namespace ronde {
namespace {

using Clock = Deadline::Clock;

// Connect retries start quick (a peer a moment late) and slow down for one that is long late.
constexpr auto kFirstConnectPause = std::chrono::milliseconds(5);
constexpr auto kMaxConnectPause = std::chrono::milliseconds(100);

socklen_t addressLength(const sockaddr_storage& address) {
  return address.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

std::vector<sockaddr_storage> resolveAddresses(const std::string& host, int port, int family,
                                               std::string* error) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  // "" and "0.0.0.0" both mean every IPv4 interface (a null node with AI_PASSIVE).
  const bool any = host.empty() || host == "0.0.0.0";
  if (any) {
    hints.ai_family = AF_INET;
    hints.ai_flags |= AI_PASSIVE;
  }
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  int status = ::getaddrinfo(any ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  std::vector<sockaddr_storage> addresses;
  if (status != 0) {
    if (error)
      *error = std::string("cannot resolve host '") + host + "': " + ::gai_strerror(status);
    return addresses;
  }
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_addrlen > sizeof(sockaddr_storage)) continue;
    sockaddr_storage address{};
    std::memcpy(&address, a->ai_addr, a->ai_addrlen);
    addresses.push_back(address);
  }
  ::freeaddrinfo(found);
  return addresses;
}

UniqueFd listenTcp(const std::string& address, int port, int backlog) {
  std::string last_error = "no address";
  for (const sockaddr_storage& a : resolveAddresses(address, port, AF_UNSPEC, &last_error)) {
    UniqueFd fd(::socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), addressLength(a)) == 0 &&
        ::listen(fd.get(), backlog) == 0) {
      return fd;
    }
    last_error = std::strerror(errno);
  }
  throw makeError(ErrorCode::kIo, "cannot listen on '", address, "' port ", port, ": ", last_error);
}

int boundPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw makeError(ErrorCode::kIo, "getsockname: ", std::strerror(errno));
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
}

namespace {

// One pass over the resolved addresses; an empty fd (and why in *last_error) if none answered.
UniqueFd tryConnect(const std::string& host, int port, Deadline deadline, std::string* last_error) {
  for (const sockaddr_storage& a : resolveAddresses(host, port, AF_UNSPEC, last_error)) {
    UniqueFd fd(::socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) {
      *last_error = std::strerror(errno);
      continue;
    }
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), addressLength(a)) == 0) {
      return fd;
    }
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

}  // namespace

UniqueFd connectTcp(const std::string& host, int port, Deadline deadline, const std::string& who) {
  std::string last_error = "no attempt before the deadline";
  auto pause = std::chrono::duration_cast<Clock::duration>(kFirstConnectPause);
  for (;;) {
    UniqueFd fd = tryConnect(host, port, deadline, &last_error);
    if (fd) {
      setNoDelay(fd.get());
      return fd;
    }
    const auto now = Clock::now();
    if (now >= deadline.at()) {
      throw makeError(ErrorCode::kTimeout, "could not connect to ", who, ": ", last_error);
    }
    std::this_thread::sleep_for(std::min(pause, deadline.at() - now));
    pause = std::min<Clock::duration>(pause * 2, kMaxConnectPause);
  }
}

UniqueFd acceptNow(int listen_fd, std::string* peer_address, int* error) {
  *error = 0;
  for (;;) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    UniqueFd fd(::accept4(listen_fd, reinterpret_cast<sockaddr*>(&address), &length,
                          SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd) {
      setNoDelay(fd.get());
      if (peer_address) *peer_address = socketAddressText(reinterpret_cast<sockaddr*>(&address));
      return fd;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) *error = errno;
    return fd;
  }
}

UniqueFd acceptWithin(int listen_fd, Deadline deadline, const std::string& what,
                      std::string* peer_address) {
  for (;;) {
    int error = 0;
    UniqueFd fd = acceptNow(listen_fd, peer_address, &error);
    if (fd) return fd;
    if (error != 0) throw makeError(ErrorCode::kIo, what, ": accept: ", std::strerror(error));
    if (!waitReady(listen_fd, POLLIN, deadline)) {
      throw makeError(ErrorCode::kTimeout, what, ": timed out waiting for a connection");
    }
  }
}

bool waitReady(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    // One extra millisecond: poll rounds down, and waking just before the deadline would spin.
    const int wait_ms = deadline.pollMillis(999) + 1;
    int ready = ::poll(&entry, 1, wait_ms);
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return true;
    if (deadline.expired()) return false;
  }
}

SocketIo sendSome(int fd, const void* data, size_t size) {
  SocketIo io;
  for (;;) {
    ssize_t sent = ::send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent >= 0) {
      io.bytes = size_t(sent);
      return io;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) io.error = errno;
    return io;
  }
}

SocketIo recvSome(int fd, void* data, size_t size) {
  SocketIo io;
  for (;;) {
    ssize_t got = ::recv(fd, data, size, MSG_DONTWAIT);
    if (got > 0) {
      io.bytes = size_t(got);
      return io;
    }
    if (got == 0) {
      io.closed = size > 0;
      return io;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) io.error = errno;
    return io;
  }
}

void sendFully(int fd, const void* data, size_t size, Deadline deadline, const std::string& who) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    SocketIo io = sendSome(fd, p, size);
    if (io.error != 0) {
      throw makeError(ErrorCode::kPeerLost, "lost connection to ", who, ": ",
                      std::strerror(io.error));
    }
    p += io.bytes;
    size -= io.bytes;
    if (size > 0 && io.bytes == 0 && !waitReady(fd, POLLOUT, deadline)) {
      throw makeError(ErrorCode::kTimeout, "timed out sending to ", who);
    }
  }
}

void recvFully(int fd, void* data, size_t size, Deadline deadline, const std::string& who) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    SocketIo io = recvSome(fd, p, size);
    if (io.closed) throw makeError(ErrorCode::kPeerLost, who, " closed the connection");
    if (io.error != 0) {
      throw makeError(ErrorCode::kPeerLost, "lost connection to ", who, ": ",
                      std::strerror(io.error));
    }
    p += io.bytes;
    size -= io.bytes;
    if (size > 0 && io.bytes == 0 && !waitReady(fd, POLLIN, deadline)) {
      throw makeError(ErrorCode::kTimeout, "timed out receiving from ", who);
    }
  }
}

std::string socketAddressText(const sockaddr* address) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (address->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
    return std::string("[") + host + "]:" + std::to_string(ntohs(v6->sin6_port));
  }
  if (address->sa_family != AF_INET) return "?";
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
  ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
  return std::string(host) + ":" + std::to_string(ntohs(v4->sin_port));
}

}  // namespace ronde
