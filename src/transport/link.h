// A point-to-point byte stream to one peer rank, driven without blocking so that one thread
// can keep several transfers in flight (the ring sends to its right neighbour while it
// receives from its left one). Implementations: TcpLink.
#pragma once

#include <cstddef>
#include <string>

namespace ronde {

class Link {
 public:
  Link(int peer_rank, std::string peer_name)
      : peer_rank_(peer_rank), peer_name_(std::move(peer_name)) {}
  virtual ~Link() = default;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  // Moves as many bytes as possible right now; returns the count (0: would block).
  // Throws Error(kPeerLost) naming the peer when the connection is gone.
  virtual size_t sendSome(const void* data, size_t size) = 0;
  virtual size_t recvSome(void* data, size_t size) = 0;
  // A descriptor that poll() reports readable/writable when the link can progress.
  virtual int pollFd() const = 0;
  // Closes the connection so that the peer's next operation fails promptly.
  virtual void close() = 0;

  int peerRank() const { return peer_rank_; }
  // "rank 3 (host b)", for error messages.
  const std::string& peerName() const { return peer_name_; }

 private:
  int peer_rank_;
  std::string peer_name_;
};

}  // namespace ronde
