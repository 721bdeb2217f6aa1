#include "launcher/job_secret.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ronde/errors.h"

namespace ronde::launcher {

std::string makeSecret() {
  unsigned char bytes[32];
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw makeError(ErrorCode::kIo, "open /dev/urandom: ", std::strerror(errno));
  size_t have = 0;
  while (have < sizeof(bytes)) {
    ssize_t got = ::read(fd, bytes + have, sizeof(bytes) - have);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      ::close(fd);
      throw makeError(ErrorCode::kIo, "read /dev/urandom failed");
    }
    have += static_cast<size_t>(got);
  }
  ::close(fd);
  static const char kHex[] = "0123456789abcdef";
  std::string secret;
  for (unsigned char byte : bytes) {
    secret += kHex[byte >> 4];
    secret += kHex[byte & 15];
  }
  return secret;
}

}  // namespace ronde::launcher
