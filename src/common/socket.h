// ronde's one socket helper: the store client and server, the TCP mesh and its acceptor, the
// job-secret handshake and the data links all open, wait on and move bytes through these
// calls, so EINTR/EAGAIN, deadlines and the peer's name in errors are handled in one place.
// Every socket made here is non-blocking and close-on-exec; TCP ones have TCP_NODELAY.
// Stateless functions: any thread may call them on a descriptor it owns.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/unique_fd.h"

namespace ronde {

// The addresses host:port resolves to (getaddrinfo, stream sockets); family is AF_INET or
// AF_UNSPEC. "" and "0.0.0.0" give the IPv4 wildcard. Empty, with *error saying why, when the
// name does not resolve.
std::vector<sockaddr_storage> resolveAddresses(const std::string& host, int port, int family,
                                               std::string* error);

// Listens on address:port (port 0: a free one). "" and "0.0.0.0" mean every IPv4 interface;
// a name or an IPv6 address works too. SO_REUSEADDR is set, so a restarted server rebinds
// while old connections sit in TIME_WAIT. Throws Error(kIo) naming the address.
UniqueFd listenTcp(const std::string& address, int port, int backlog);

// The port a listening socket is bound to (the one port 0 picked). Throws Error(kIo).
int boundPort(int fd);

// Connects to host:port, trying every address the name resolves to and retrying refusals,
// unreachable peers and failed lookups with a growing pause until the deadline (the peer may
// not listen yet). Throws Error(kTimeout, "could not connect to <who>: <last reason>").
UniqueFd connectTcp(const std::string& host, int port, Deadline deadline, const std::string& who);

// Accepts one waiting connection without blocking. Returns an empty fd with *error == 0 when
// none waits, or with *error set to errno when accept failed (EMFILE, ENOBUFS, ...: the
// listener stays readable, so an event loop must rest it). EINTR and ECONNABORTED are
// retried. *peer_address gets "a.b.c.d:port" or "[v6]:port".
UniqueFd acceptNow(int listen_fd, std::string* peer_address, int* error);

// Accepts one connection, waiting up to the deadline. Throws Error(kTimeout) naming `what`
// ("rank 0 waiting for its peers"), Error(kIo) when accept fails.
UniqueFd acceptWithin(int listen_fd, Deadline deadline, const std::string& what,
                      std::string* peer_address);

// Waits until fd is ready for `events` (POLLIN, POLLOUT). False once the deadline passes.
// A failing poll also returns true: the send or recv that follows reports the error.
bool waitReady(int fd, short events, Deadline deadline);

// What one non-blocking send or receive did.
struct SocketIo {
  size_t bytes = 0;     // moved by this call; 0 and neither flag: it would block
  bool closed = false;  // receive only: the peer closed its end
  int error = 0;        // errno of a failed call (never EINTR or EAGAIN)
};

// One send or recv that never blocks (MSG_DONTWAIT; send has MSG_NOSIGNAL, so a closed peer
// is an error, not SIGPIPE). EINTR is retried.
SocketIo sendSome(int fd, const void* data, size_t size);
SocketIo recvSome(int fd, void* data, size_t size);

// Moves exactly `size` bytes, waiting up to the deadline. `who` names the peer in errors:
// Error(kTimeout, "timed out sending to <who>"), Error(kPeerLost, "<who> closed the
// connection") or Error(kPeerLost, "lost connection to <who>: <reason>").
void sendFully(int fd, const void* data, size_t size, Deadline deadline, const std::string& who);
void recvFully(int fd, void* data, size_t size, Deadline deadline, const std::string& who);

// "a.b.c.d:port" or "[v6]:port" of a socket address, for log lines and errors.
std::string socketAddressText(const sockaddr* address);

}  // namespace ronde
