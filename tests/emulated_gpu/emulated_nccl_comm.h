// The emulated NCCL's communicators and how their calls run (the C API that uses them is
// emulated_nccl.cc): each communicator's ranks form a ronde host Communicator over TCP, and each
// call or group is queued on the caller's stream and run there by it.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emulated_gpu.h"
#include "ronde/communicator.h"
#include "ronde/store.h"

namespace ronde::emulated_gpu {

// One rank's communicator: shared by its handle (ncclComm) and the calls queued on streams, so
// that it lives until they have run.
struct NcclState {
  // The store behind the unique id, on the rank of this process that made the id: it lives as
  // long as the communicator, as NCCL's bootstrap root lives only until its ranks have met.
  // First, so that it goes after `host`, which may still write to it as it goes.
  std::shared_ptr<TcpStoreServer> id_server;
  int rank = 0;
  int size = 1;
  int device = 0;
  bool blocking = true;
  std::mutex mutex;
  std::condition_variable cv;
  std::shared_ptr<Communicator> host;  // once formed
  std::string last_error;
  std::atomic<ncclResult_t> async{ncclInProgress};
  std::atomic<bool> aborted{false};
  std::mutex run_mutex;  // one collective at a time on `host`

  // The first error sticks, as NCCL's asynchronous error does.
  void setError(ncclResult_t result, const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex);
    const ncclResult_t now = async.load();
    if (now != ncclSuccess && now != ncclInProgress) return;
    last_error = text;
    async.store(result);
  }
  // Until ncclCommAbort: what a kernel does when its peer never comes.
  void hang() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return aborted.load(); });
  }
};

}  // namespace ronde::emulated_gpu

// nccl.h's opaque communicator.
struct ncclComm {
  std::shared_ptr<ronde::emulated_gpu::NcclState> state;
};

namespace ronde::emulated_gpu {

constexpr char kIdTag[] = "ronde-emulated-nccl";

// The stores behind the unique ids this process made and no communicator of it has joined yet,
// by nonce (one set per process: processWide).
struct IdServers {
  const pid_t pid = ::getpid();
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<TcpStoreServer>> unclaimed;
};

IdServers& idServers();

// One call, alone or in a group.
struct Pending {
  enum class Kind { kCollective, kSend, kRecv };
  Pending(ncclComm_t comm, cudaStream_t stream, Kind kind = Kind::kCollective)
      : comm(comm), stream(stream), kind(kind) {}
  ncclComm_t comm;
  cudaStream_t stream;
  Kind kind;
  std::function<void(Communicator&, const NcclState&)> run;  // kCollective
  const void* send = nullptr;                                // kSend
  void* recv = nullptr;                                      // kRecv
  size_t bytes = 0;
  int peer = 0;
};

extern thread_local std::string init_error;      // ncclGetLastError(nullptr)
extern thread_local int group_depth;             // ncclGroupStart minus ncclGroupEnd
extern thread_local std::vector<Pending> group;  // the open group's calls

size_t typeBytes(ncclDataType_t type);
// ronde's type and op for NCCL's; false where ronde has none.
bool rondeType(ncclDataType_t type, DataType* out);
bool rondeOp(ncclRedOp_t op, ReduceOp* out);
// Notes `text` as the communicator's (or the thread's) last error and returns `result`.
ncclResult_t refuse(ncclComm_t comm, ncclResult_t result, const std::string& text);
bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes);
// Queues a group's (or one call's) calls of one communicator on their stream.
ncclResult_t launchCalls(std::vector<Pending> ops);
// Checks what every call shares, then queues it or adds it to the open group.
ncclResult_t submitCall(Pending op, const char* what);
// Buffers must be device memory of the communicator's GPU.
ncclResult_t checkBuffer(ncclComm_t comm, const void* p, size_t bytes, const char* what,
                         const char* which);
ncclResult_t reductionArguments(ncclComm_t comm, ncclDataType_t type, ncclRedOp_t op,
                                DataType* ronde_type, ReduceOp* ronde_op, const char* what);
int rankOf(ncclComm_t comm);
int sizeOf(ncclComm_t comm);
// Forms the host communicator of `state` through the id's store at host:port.
void form(const std::shared_ptr<NcclState>& state, const std::string& host, int port,
          const std::string& nonce);

#define RETURN_IF_FAILED(call)                              \
  do {                                                      \
    const ncclResult_t ronde_result_ = (call);              \
    if (ronde_result_ != ncclSuccess) return ronde_result_; \
  } while (0)

}  // namespace ronde::emulated_gpu
