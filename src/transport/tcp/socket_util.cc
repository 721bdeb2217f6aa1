#include "transport/tcp/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "ronde/errors.h"

namespace ronde {
namespace {

std::string errnoText() { return std::strerror(errno); }

sockaddr_in resolveIpv4(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (host.empty() || host == "0.0.0.0") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    return addr;
  }
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    throw makeError(ErrorCode::kIo, "cannot resolve host '", host, "': ", gai_strerror(rc));
  }
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return addr;
}

std::string addressText(const sockaddr_in& addr) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  return text;
}

// Waits for `events` on fd; false on timeout.
bool waitFd(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.pollMillis(100));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) throw makeError(ErrorCode::kIo, "poll: ", errnoText());
    if (deadline.expired()) return false;
  }
}

}  // namespace

void setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    throw makeError(ErrorCode::kIo, "fcntl(O_NONBLOCK): ", errnoText());
  }
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

UniqueFd listenTcp(const std::string& address, int port, int backlog, int* bound_port) {
  sockaddr_in addr = resolveIpv4(address, port);
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw makeError(ErrorCode::kIo, "socket: ", errnoText());
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw makeError(ErrorCode::kIo, "cannot listen on ", address, ":", port, ": ", errnoText());
  }
  if (::listen(fd.get(), backlog) != 0) {
    throw makeError(ErrorCode::kIo, "listen on ", address, ":", port, ": ", errnoText());
  }
  socklen_t len = sizeof(addr);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  if (bound_port) *bound_port = ntohs(addr.sin_port);
  setNonBlocking(fd.get());
  return fd;
}

UniqueFd connectTcp(const std::string& host, int port, Deadline deadline) {
  sockaddr_in addr = resolveIpv4(host, port);
  std::string last_error = "timed out";
  auto backoff = std::chrono::milliseconds(5);
  while (!deadline.expired()) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw makeError(ErrorCode::kIo, "socket: ", errnoText());
    int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    if (rc != 0 && errno == EINPROGRESS) {
      if (waitFd(fd.get(), POLLOUT, deadline)) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      setNoDelay(fd.get());
      return fd;
    }
    last_error = errnoText();
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  throw makeError(ErrorCode::kTimeout, "cannot connect to ", host, ":", port, ": ", last_error);
}

UniqueFd acceptTcp(int listen_fd, Deadline deadline, std::string* peer_address) {
  for (;;) {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      setNoDelay(fd);
      if (peer_address) *peer_address = addressText(addr) + ":" + std::to_string(ntohs(addr.sin_port));
      return UniqueFd(fd);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      throw makeError(ErrorCode::kIo, "accept: ", errnoText());
    }
    if (!waitFd(listen_fd, POLLIN, deadline)) {
      throw makeError(ErrorCode::kTimeout, "timed out waiting for peers to connect");
    }
  }
}

void sendFully(int fd, const void* data, size_t size, Deadline deadline, const std::string& who) {
  auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!waitFd(fd, POLLOUT, deadline)) {
        throw makeError(ErrorCode::kTimeout, "timed out sending to ", who);
      }
      continue;
    }
    throw makeError(ErrorCode::kPeerLost, "lost connection to ", who, ": ", errnoText());
  }
}

void recvFully(int fd, void* data, size_t size, Deadline deadline, const std::string& who) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd, p, size, 0);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throw makeError(ErrorCode::kPeerLost, who, " closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!waitFd(fd, POLLIN, deadline)) {
        throw makeError(ErrorCode::kTimeout, "timed out receiving from ", who);
      }
      continue;
    }
    throw makeError(ErrorCode::kPeerLost, "lost connection to ", who, ": ", errnoText());
  }
}

std::string resolveLocalAddress(const std::string& interface) {
  sockaddr_in probe{};
  if (!interface.empty() && inet_pton(AF_INET, interface.c_str(), &probe.sin_addr) == 1) {
    return interface;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw makeError(ErrorCode::kIo, "getifaddrs: ", errnoText());
  std::string found;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    bool loopback = (it->ifa_flags & IFF_LOOPBACK) != 0;
    if (interface.empty() ? loopback : interface != it->ifa_name) continue;
    found = addressText(*reinterpret_cast<sockaddr_in*>(it->ifa_addr));
    break;
  }
  freeifaddrs(list);
  if (found.empty()) {
    if (!interface.empty()) {
      throw makeError(ErrorCode::kConfig, "network interface '", interface,
                      "' has no IPv4 address on this host");
    }
    found = "127.0.0.1";
  }
  return found;
}

std::string localAddressToward(const std::string& host, int port) {
  sockaddr_in addr = resolveIpv4(host, port);
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw makeError(ErrorCode::kIo, "no route to ", host, ": ", errnoText());
  }
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len);
  return addressText(local);
}

void splitHostPort(const std::string& address, std::string* host, int* port) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    throw makeError(ErrorCode::kConfig, "address '", address, "' is not of the form host:port");
  }
  *host = address.substr(0, colon);
  try {
    size_t used = 0;
    *port = std::stoi(address.substr(colon + 1), &used);
    if (used != address.size() - colon - 1 || *port <= 0 || *port > 65535) throw 0;
  } catch (...) {
    throw makeError(ErrorCode::kConfig, "address '", address, "' has an invalid port");
  }
}

}  // namespace ronde
