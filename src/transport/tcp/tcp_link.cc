#include "transport/tcp/tcp_link.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "ronde/errors.h"

namespace ronde {

TcpLink::TcpLink(UniqueFd fd, int peer_rank, std::string peer_name)
    : Link(peer_rank, std::move(peer_name)), fd_(std::move(fd)) {}

size_t TcpLink::sendSome(const void* data, size_t size) {
  if (size == 0) return 0;
  if (!fd_) throw makeError(ErrorCode::kAborted, "connection to ", peerName(), " is closed");
  ssize_t n = ::send(fd_.get(), data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) return static_cast<size_t>(n);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  throw makeError(ErrorCode::kPeerLost, "lost connection to ", peerName(), " (",
                  std::strerror(errno), "); did that process die?");
}

size_t TcpLink::recvSome(void* data, size_t size) {
  if (size == 0) return 0;
  if (!fd_) throw makeError(ErrorCode::kAborted, "connection to ", peerName(), " is closed");
  ssize_t n = ::recv(fd_.get(), data, size, MSG_DONTWAIT);
  if (n > 0) return static_cast<size_t>(n);
  if (n == 0) {
    throw makeError(ErrorCode::kPeerLost, peerName(),
                    " closed its connection in the middle of a collective (it exited or failed)");
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  throw makeError(ErrorCode::kPeerLost, "lost connection to ", peerName(), " (",
                  std::strerror(errno), "); did that process die?");
}

// Only shuts the socket down: another thread may be polling this descriptor right now, and
// closing it could hand the number to an unrelated file. The destructor closes it.
void TcpLink::close() {
  if (fd_) ::shutdown(fd_.get(), SHUT_RDWR);
}

}  // namespace ronde
