// Thin, error-checked wrappers over BSD sockets used by the TCP transport and the store.
// Every failure is an ronde::Error naming the address involved.
#pragma once

#include <string>

#include "common/deadline.h"
#include "common/unique_fd.h"

namespace ronde {

// Listens on address:port (port 0: any free port). Returns the socket; *bound_port gets the port.
UniqueFd listenTcp(const std::string& address, int port, int backlog, int* bound_port);

// Connects to host:port, retrying refused/unreachable attempts until the deadline (the peer
// may not listen yet). The returned socket is non-blocking with TCP_NODELAY set.
UniqueFd connectTcp(const std::string& host, int port, Deadline deadline);

// Accepts one connection, waiting up to the deadline. Non-blocking, TCP_NODELAY.
UniqueFd acceptTcp(int listen_fd, Deadline deadline, std::string* peer_address);

void setNonBlocking(int fd);
void setNoDelay(int fd);

// Blocking-style full transfers on non-blocking sockets, bounded by the deadline.
// `who` names the peer for error messages ("rank 2 (host b)").
void sendFully(int fd, const void* data, size_t size, Deadline deadline, const std::string& who);
void recvFully(int fd, void* data, size_t size, Deadline deadline, const std::string& who);

// An IPv4 address for this host: `interface` may be an address ("10.0.0.2") or an interface
// name ("eth0"); empty picks the first non-loopback interface, else 127.0.0.1.
std::string resolveLocalAddress(const std::string& interface);

// The local address the kernel would use to reach host (no packet is sent).
std::string localAddressToward(const std::string& host, int port);

// Splits "host:port" (IPv4 or name). Throws kConfig on a malformed value.
void splitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace ronde
