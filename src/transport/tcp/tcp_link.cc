#include "transport/tcp/tcp_link.h"

#include <sys/socket.h>

#include <cstring>

#include "common/socket.h"
#include "ronde/errors.h"

namespace ronde {

TcpLink::TcpLink(UniqueFd fd, int peer_rank, std::string peer_name)
    : Link(peer_rank, std::move(peer_name)), fd_(std::move(fd)) {}

size_t TcpLink::sendSome(const void* data, size_t size) {
  if (size == 0) return 0;
  if (!fd_) throw makeError(ErrorCode::kAborted, "connection to ", peerName(), " is closed");
  SocketIo io = ronde::sendSome(fd_.get(), data, size);
  if (io.error == 0) return io.bytes;
  throw makeError(ErrorCode::kPeerLost, "lost connection to ", peerName(), " (",
                  std::strerror(io.error), "); did that process die?");
}

size_t TcpLink::recvSome(void* data, size_t size) {
  if (size == 0) return 0;
  if (!fd_) throw makeError(ErrorCode::kAborted, "connection to ", peerName(), " is closed");
  SocketIo io = ronde::recvSome(fd_.get(), data, size);
  if (io.closed) {
    throw makeError(ErrorCode::kPeerLost, peerName(),
                    " closed its connection in the middle of a collective (it exited or failed)");
  }
  if (io.error == 0) return io.bytes;
  throw makeError(ErrorCode::kPeerLost, "lost connection to ", peerName(), " (",
                  std::strerror(io.error), "); did that process die?");
}

// Only shuts the socket down: another thread may be polling this descriptor right now, and
// closing it could hand the number to an unrelated file. The destructor closes it.
void TcpLink::close() {
  if (fd_) ::shutdown(fd_.get(), SHUT_RDWR);
}

}  // namespace ronde
