// Reading and writing another local rank's private memory with one kernel copy (Linux
// cross-memory attach, process_vm_readv / process_vm_writev): what lets a shared-memory collective read peers' buffers straight,
// instead of having every rank stage its input through the shared segment first.
//
// It needs ptrace-level permission over the peer (same user; Yama's ptrace_scope 0, or a
// container that allows the syscall), so the arena probes it once at start-up on every local
// rank and falls back to staging through slots when any rank cannot.
#pragma once

#include <cstddef>
#include <string>

namespace ronde {

// Copies `bytes` from address `remote` of process `pid` into `local`. Error(kPeerLost) when
// the process is gone, Error(kIo) for any other refusal; `peer` names it in the message.
void readPeerMemory(int pid, const void* remote, void* local, size_t bytes,
                    const std::string& peer);

// Copies `bytes` from `local` to address `remote` of process `pid`; errors as readPeerMemory.
void writePeerMemory(int pid, void* remote, const void* local, size_t bytes,
                     const std::string& peer);

// The same, but report failure instead of throwing (the start-up probe).
bool tryReadPeerMemory(int pid, const void* remote, void* local, size_t bytes);
bool tryWritePeerMemory(int pid, void* remote, const void* local, size_t bytes);

}  // namespace ronde
