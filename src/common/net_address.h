// This machine's IPv4 addresses and how to name a peer: the one place where ranks and the
// launcher pick the address others reach them at. Stateless; any thread may call these.
#pragma once

#include <string>
#include <vector>

namespace ronde {

struct InterfaceAddress {
  std::string interface;  // "eth0"
  std::string address;    // "10.0.0.2"
  bool loopback = false;
};

// Every IPv4 address of this machine's interfaces (getifaddrs). Throws Error(kIo).
std::vector<InterfaceAddress> interfaceAddresses();

// The IPv4 addresses, as text, that host resolves to; empty when it does not resolve.
std::vector<std::string> resolveIpv4(const std::string& host);

// An IPv4 address for this host: `interface` may be an address ("10.0.0.2") or an interface
// name ("eth0"); empty picks the first non-loopback interface, else 127.0.0.1.
// Throws Error(kConfig) for a named interface without an IPv4 address.
std::string resolveLocalAddress(const std::string& interface);

// The local address the kernel would use to reach host (a UDP connect: no packet is sent),
// trying each address host resolves to. Throws Error(kIo, "no route to <host>: ...").
std::string localAddressToward(const std::string& host, int port);

// Splits "host:port" (IPv4 or name). Throws Error(kConfig) on a malformed value.
void splitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace ronde
