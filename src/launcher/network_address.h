// Which address of this machine workers use to reach the launcher's store, and which hosts
// are this machine. IPv4 only for now.
#pragma once

#include <string>

namespace ronde::launcher {

// This machine's host name (gethostname).
std::string localHostName();

// True for "localhost", 127.x.y.z, this machine's host name, or a name that resolves to an
// address of one of this machine's interfaces: such hosts are started without ssh.
bool isLocalHost(const std::string& host);

// The IPv4 address of interface `name` ("eth0"), or `name` itself when it is already an
// address of this machine. Throws Error(kInvalidArgument) listing the interfaces there are.
std::string addressOfInterface(const std::string& name);

// The source address this machine would use to send to `host` (a UDP connect: no packet is
// sent). Empty when `host` does not resolve here.
std::string sourceAddressToward(const std::string& host);

}  // namespace ronde::launcher
