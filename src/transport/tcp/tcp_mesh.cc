#include "transport/tcp/tcp_mesh.h"

#include <sys/socket.h>

#include <cstring>
#include <exception>
#include <thread>

#include "common/logging.h"
#include "common/net_address.h"
#include "common/secret_handshake.h"
#include "common/socket.h"
#include "ronde/errors.h"
#include "transport/tcp/mesh_acceptor.h"
#include "transport/tcp/tcp_link.h"

namespace ronde {

std::unique_ptr<TcpMesh> TcpMesh::connect(Store& store, const Options& options, Deadline deadline) {
  auto mesh = std::make_unique<TcpMesh>();
  mesh->links_.resize(static_cast<size_t>(options.size));
  // Room in the backlog for strangers too: they are accepted and dropped, not left queued.
  UniqueFd listener = listenTcp(options.listen_address, 0, options.size + 64);
  const int port = boundPort(listener.get());
  store.setString("tcp/" + std::to_string(options.rank), options.listen_address + ":" + std::to_string(port));

  // Accept on a thread while this one connects out, so no rank waits on a chain of others.
  MeshAcceptorOptions acceptor_options;
  acceptor_options.rank = options.rank;
  acceptor_options.size = options.size;
  acceptor_options.secret = options.secret;
  acceptor_options.names = options.names;
  std::exception_ptr accept_error;
  std::vector<std::unique_ptr<Link>> incoming;
  std::thread acceptor([&] {
    try {
      incoming = acceptMeshPeers(listener.get(), acceptor_options, deadline);
    } catch (...) {
      accept_error = std::current_exception();
    }
  });

  std::exception_ptr connect_error;
  try {
    for (int peer = 0; peer < options.rank; ++peer) {
      std::string address = store.getString(
          "tcp/" + std::to_string(peer),
          std::chrono::duration_cast<Duration>(deadline.at() - Deadline::Clock::now()));
      std::string host;
      int peer_port = 0;
      splitHostPort(address, &host, &peer_port);
      const std::string& name = options.names[static_cast<size_t>(peer)];
      UniqueFd fd = connectTcp(host, peer_port, deadline, name + " at " + address);
      authenticateConnection(fd.get(), options.secret, false, deadline.at(), name);
      MeshHello hello{MeshHello::kMagic, options.rank};
      sendFully(fd.get(), &hello, sizeof(hello), deadline, name);
      mesh->links_[static_cast<size_t>(peer)] = std::make_unique<TcpLink>(std::move(fd), peer, name);
    }
  } catch (...) {
    connect_error = std::current_exception();
  }
  if (connect_error) {
    // Unblock the acceptor: it would otherwise wait for peers until the deadline.
    ::shutdown(listener.get(), SHUT_RDWR);
  }
  acceptor.join();
  if (connect_error) std::rethrow_exception(connect_error);
  if (accept_error) std::rethrow_exception(accept_error);
  for (int peer = options.rank + 1; peer < options.size; ++peer) {
    mesh->links_[static_cast<size_t>(peer)] = std::move(incoming[static_cast<size_t>(peer)]);
  }
  return mesh;
}

void TcpMesh::closeAll() {
  for (auto& link : links_) {
    if (link) link->close();
  }
}

}  // namespace ronde
