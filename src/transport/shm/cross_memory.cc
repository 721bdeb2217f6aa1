#include "transport/shm/cross_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "ronde/errors.h"
#include "transport/shm/shm_arena_layout.h"

namespace ronde {
namespace {

// 0 when all bytes came, else the errno of the failed call.
int readAll(int pid, const void* remote, void* local, size_t bytes) {
  auto* to = static_cast<char*>(local);
  auto from = reinterpret_cast<uintptr_t>(remote);
  while (bytes > 0) {
    struct iovec mine = {to, bytes};
    struct iovec theirs = {reinterpret_cast<void*>(from), bytes};
    const ssize_t got = ::process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    // A partial read stops at a page the peer has not mapped: the next call says why.
    if (got == 0) return EFAULT;
    to += got;
    from += static_cast<uintptr_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return 0;
}

}  // namespace

void readPeerMemory(int pid, const void* remote, void* local, size_t bytes,
                    const std::string& peer) {
  const int error = readAll(pid, remote, local, bytes);
  if (error == 0) return;
  // An exited peer that is not reaped yet has no memory either: any refusal then is a loss.
  if (error == ESRCH || !shmPeerAlive(pid))
    throw makeError(ErrorCode::kPeerLost, peer, " exited during a collective");
  throw makeError(ErrorCode::kIo, "reading ", bytes, " bytes of ", peer,
                  "'s buffer failed: ", std::strerror(error));
}

bool tryReadPeerMemory(int pid, const void* remote, void* local, size_t bytes) {
  return readAll(pid, remote, local, bytes) == 0;
}

}  // namespace ronde
