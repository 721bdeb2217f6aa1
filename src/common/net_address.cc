#include "common/net_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/socket.h"
#include "common/unique_fd.h"
#include "ronde/errors.h"

namespace ronde {
namespace {

std::string ipv4Text(const in_addr& address) {
  char text[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &address, text, sizeof(text));
  return text;
}

}  // namespace

std::vector<InterfaceAddress> interfaceAddresses() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    throw makeError(ErrorCode::kIo, "getifaddrs: ", std::strerror(errno));
  }
  std::vector<InterfaceAddress> found;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    found.push_back({it->ifa_name, ipv4Text(reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr),
                     (it->ifa_flags & IFF_LOOPBACK) != 0});
  }
  ::freeifaddrs(list);
  return found;
}

std::vector<std::string> resolveIpv4(const std::string& host) {
  std::vector<std::string> texts;
  for (const sockaddr_storage& a : resolveAddresses(host, 0, AF_INET, nullptr)) {
    std::string text = ipv4Text(reinterpret_cast<const sockaddr_in&>(a).sin_addr);
    // getaddrinfo lists an address once per protocol; one is enough here.
    if (texts.empty() || texts.back() != text) texts.push_back(std::move(text));
  }
  return texts;
}

std::string resolveLocalAddress(const std::string& interface) {
  in_addr probe{};
  if (!interface.empty() && ::inet_pton(AF_INET, interface.c_str(), &probe) == 1) {
    return interface;
  }
  for (const InterfaceAddress& entry : interfaceAddresses()) {
    if (interface.empty() ? entry.loopback : interface != entry.interface) continue;
    return entry.address;
  }
  if (!interface.empty()) {
    throw makeError(ErrorCode::kConfig, "network interface '", interface,
                    "' has no IPv4 address on this host");
  }
  return "127.0.0.1";
}

std::string localAddressToward(const std::string& host, int port) {
  std::string why = "it does not resolve";
  for (const sockaddr_storage& a : resolveAddresses(host, port, AF_INET, &why)) {
    UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd) throw makeError(ErrorCode::kIo, "socket: ", std::strerror(errno));
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof(sockaddr_in)) != 0) {
      why = std::strerror(errno);
      continue;
    }
    sockaddr_in local{};
    socklen_t length = sizeof(local);
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      return ipv4Text(local.sin_addr);
    }
    why = std::strerror(errno);
  }
  throw makeError(ErrorCode::kIo, "no route to ", host, ": ", why);
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
