#include "launcher/network_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <vector>

#include "common/unique_fd.h"
#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

std::string toText(const in_addr& address) {
  char text[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &address, text, sizeof(text));
  return text;
}

std::vector<in_addr> resolve(const std::string& host) {
  std::vector<in_addr> addresses;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0) return addresses;
  for (addrinfo* entry = result; entry != nullptr; entry = entry->ai_next) {
    addresses.push_back(reinterpret_cast<sockaddr_in*>(entry->ai_addr)->sin_addr);
  }
  ::freeaddrinfo(result);
  return addresses;
}

struct InterfaceAddress {
  std::string interface;
  std::string address;
};

std::vector<InterfaceAddress> interfaceAddresses() {
  std::vector<InterfaceAddress> found;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return found;
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    found.push_back(
        {entry->ifa_name, toText(reinterpret_cast<sockaddr_in*>(entry->ifa_addr)->sin_addr)});
  }
  ::freeifaddrs(list);
  return found;
}

}  // namespace

std::string localHostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

bool isLocalHost(const std::string& host) {
  if (host == "localhost" || host == localHostName() || host.rfind("127.", 0) == 0) return true;
  std::set<std::string> own;
  for (const InterfaceAddress& entry : interfaceAddresses()) own.insert(entry.address);
  for (const in_addr& address : resolve(host)) {
    std::string text = toText(address);
    if (own.count(text) != 0 || text.rfind("127.", 0) == 0) return true;
  }
  return false;
}

std::string addressOfInterface(const std::string& name) {
  std::string known;
  for (const InterfaceAddress& entry : interfaceAddresses()) {
    if (entry.interface == name || entry.address == name) return entry.address;
    known += (known.empty() ? "" : ", ") + entry.interface + " " + entry.address;
  }
  throw makeError(ErrorCode::kInvalidArgument, "--network-interface ", name,
                  ": no such interface or address with IPv4 here (have: ", known, ")");
}

std::string sourceAddressToward(const std::string& host) {
  for (const in_addr& address : resolve(host)) {
    UniqueFd socket_fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!socket_fd) return "";
    sockaddr_in target{};
    target.sin_family = AF_INET;
    target.sin_port = htons(9);  // any port: connect() on UDP only picks a route
    target.sin_addr = address;
    if (::connect(socket_fd.get(), reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
      continue;
    }
    sockaddr_in local{};
    socklen_t length = sizeof(local);
    if (::getsockname(socket_fd.get(), reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      return toText(local.sin_addr);
    }
  }
  return "";
}

}  // namespace ronde::launcher
