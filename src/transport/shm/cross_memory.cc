#include "transport/shm/cross_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "ronde/errors.h"
#include "transport/shm/shm_arena_layout.h"

namespace ronde {
namespace {

// 0 when all bytes moved, else the errno of the failed call. `write`: from `local` into the
// peer (process_vm_writev), else from the peer into `local`.
int transferAll(int pid, const void* remote, void* local, size_t bytes, bool write) {
  auto* here = static_cast<char*>(local);
  auto there = reinterpret_cast<uintptr_t>(remote);
  while (bytes > 0) {
    struct iovec mine = {here, bytes};
    struct iovec theirs = {reinterpret_cast<void*>(there), bytes};
    const ssize_t moved = write ? ::process_vm_writev(pid, &mine, 1, &theirs, 1, 0)
                                : ::process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
    if (moved < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    // A partial transfer stops at a page the peer has not mapped: the next call says why.
    if (moved == 0) return EFAULT;
    here += moved;
    there += static_cast<uintptr_t>(moved);
    bytes -= static_cast<size_t>(moved);
  }
  return 0;
}

void throwTransferError(int error, int pid, size_t bytes, const std::string& peer, bool write) {
  // An exited peer that is not reaped yet has no memory either: any refusal then is a loss.
  if (error == ESRCH || !shmPeerAlive(pid))
    throw makeError(ErrorCode::kPeerLost, peer, " exited during a collective");
  throw makeError(ErrorCode::kIo, write ? "writing " : "reading ", bytes, " bytes ",
                  write ? "into " : "of ", peer, "'s buffer failed: ", std::strerror(error));
}

}  // namespace

void readPeerMemory(int pid, const void* remote, void* local, size_t bytes,
                    const std::string& peer) {
  const int error = transferAll(pid, remote, local, bytes, false);
  if (error != 0) throwTransferError(error, pid, bytes, peer, false);
}

void writePeerMemory(int pid, void* remote, const void* local, size_t bytes,
                     const std::string& peer) {
  // process_vm_writev only reads the local side, whatever its iovec's constness says.
  const int error = transferAll(pid, remote, const_cast<void*>(local), bytes, true);
  if (error != 0) throwTransferError(error, pid, bytes, peer, true);
}

bool tryReadPeerMemory(int pid, const void* remote, void* local, size_t bytes) {
  return transferAll(pid, remote, local, bytes, false) == 0;
}

bool tryWritePeerMemory(int pid, void* remote, const void* local, size_t bytes) {
  return transferAll(pid, remote, const_cast<void*>(local), bytes, true) == 0;
}

}  // namespace ronde
