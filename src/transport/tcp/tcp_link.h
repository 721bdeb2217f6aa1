#pragma once

#include "common/unique_fd.h"
#include "transport/link.h"

namespace ronde {

// A Link over one connected, non-blocking TCP socket.
class TcpLink : public Link {
 public:
  TcpLink(UniqueFd fd, int peer_rank, std::string peer_name);
  size_t sendSome(const void* data, size_t size) override;
  size_t recvSome(void* data, size_t size) override;
  int pollFd() const override { return fd_.get(); }
  void close() override;

 private:
  UniqueFd fd_;
};

}  // namespace ronde
