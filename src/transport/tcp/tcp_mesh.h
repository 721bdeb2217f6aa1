// Connects one rank to its peers over TCP: every rank listens on an ephemeral port and
// publishes it in the store; the higher rank of each pair connects, both prove the job
// secret, and the connector names itself. The listening socket is closed once all expected
// peers are in, so a running job holds no listening socket.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "ronde/store.h"
#include "transport/link.h"

namespace ronde {

class TcpMesh {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    std::string listen_address = "127.0.0.1";
    std::string secret;
    std::vector<std::string> names;  // "rank 3 (host b)" for every rank
  };

  static std::unique_ptr<TcpMesh> connect(Store& store, const Options& options, Deadline deadline);

  Link* link(int rank) const { return links_[static_cast<size_t>(rank)].get(); }
  // Shuts every connection down so that peers blocked on this rank fail promptly.
  void closeAll();

 private:
  std::vector<std::unique_ptr<Link>> links_;
};

}  // namespace ronde
