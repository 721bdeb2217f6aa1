// The job secret: every connection to a job's store and data sockets proves it knows it.
#pragma once

#include <string>

namespace ronde::launcher {

// 32 random bytes from /dev/urandom as hex. Throws Error(kIo) when they cannot be read.
std::string makeSecret();

}  // namespace ronde::launcher
