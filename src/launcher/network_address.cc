#include "launcher/network_address.h"

#include <unistd.h>

#include <set>

#include "common/net_address.h"
#include "ronde/errors.h"

namespace ronde::launcher {

std::string localHostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

bool isLocalHost(const std::string& host) {
  if (host == "localhost" || host == localHostName() || host.rfind("127.", 0) == 0) return true;
  std::set<std::string> own;
  for (const InterfaceAddress& entry : interfaceAddresses()) own.insert(entry.address);
  for (const std::string& address : resolveIpv4(host)) {
    if (own.count(address) != 0 || address.rfind("127.", 0) == 0) return true;
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
  try {
    return localAddressToward(host, 9);  // any port: connect() on UDP only picks a route
  } catch (const Error&) {
    return "";
  }
}

}  // namespace ronde::launcher
