// NCCL's API for ronde's NCCL backend, on the host (emulated_gpu.h says why). A communicator's
// ranks meet through a TcpStoreServer that ncclGetUniqueId starts (its address is the id) and
// form a ronde host Communicator over TCP; each collective is queued on the caller's stream and
// run there by that Communicator, on the buffers themselves (the emulated device memory is
// host memory). Behaviour ronde relies on is NCCL's:
//   - nonblocking communicators (config.blocking = 0): init and every call return
//     ncclInProgress, and ncclCommGetAsyncError says when the call is in hand;
//   - a group's broadcasts, reduces, sends and receives start together at ncclGroupEnd; sends
//     and receives must pair up, or the group never finishes (on any rank, here);
//   - buffers must be device memory of the communicator's GPU (ncclInvalidArgument);
//   - two ranks on one GPU fail the init with ncclInvalidUsage ("Duplicate GPU detected");
//   - a failed collective (a peer gone: ncclRemoteError) never completes on its stream: the
//     stream is stuck, as behind a real kernel waiting for a peer, until ncclCommAbort;
//   - ncclCommAbort ends what is in flight, and the communicator is gone.
// Types NCCL has and ronde does not (uint32, uint64, float8) are refused for reductions.
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emulated_nccl_comm.h"

using namespace ronde;                // NOLINT: the C API below is global, as NCCL's
using namespace ronde::emulated_gpu;  // NOLINT

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string text;
  if (comm != nullptr && comm->state) {
    std::lock_guard<std::mutex> lock(comm->state->mutex);
    text = comm->state->last_error;
  } else {
    text = init_error;
  }
  return text.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  IdServers& servers = idServers();
  auto server = std::make_shared<TcpStoreServer>("127.0.0.1", 0, "");
  std::random_device random;
  char nonce[17];
  std::snprintf(nonce, sizeof(nonce), "%08x%08x", random(), random());
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "%s 127.0.0.1 %d %s", kIdTag, server->port(),
                nonce);
  std::lock_guard<std::mutex> lock(servers.mutex);
  servers.unclaimed[nonce] = std::move(server);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) {
    init_error = "ncclCommInitRank: bad rank " + std::to_string(rank) + " of " +
                 std::to_string(nranks);
    return ncclInvalidArgument;
  }
  char tag[32] = {}, host[64] = {}, nonce[32] = {};
  int port = 0;
  id.internal[sizeof(id.internal) - 1] = '\0';
  if (std::sscanf(id.internal, "%31s %63s %d %31s", tag, host, &port, nonce) != 4 ||
      std::strcmp(tag, kIdTag) != 0) {
    init_error = "ncclCommInitRank: not an id from this emulation's ncclGetUniqueId";
    return ncclInvalidArgument;
  }
  auto state = std::make_shared<NcclState>();
  state->rank = rank;
  state->size = nranks;
  state->device = currentDevice();
  state->blocking = !(config != nullptr && config->blocking == 0);
  {
    IdServers& servers = idServers();
    std::lock_guard<std::mutex> lock(servers.mutex);
    auto made_here = servers.unclaimed.find(nonce);
    if (made_here != servers.unclaimed.end()) {
      state->id_server = std::move(made_here->second);
      servers.unclaimed.erase(made_here);
    }
  }
  *comm = new ncclComm{state};
  if (state->blocking) {
    form(state, host, port, nonce);
    return state->async.load();
  }
  std::thread([state, h = std::string(host), port, n = std::string(nonce)] {
    form(state, h, port, n);
  }).detach();
  return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* result) {
  if (comm == nullptr || result == nullptr) return ncclInvalidArgument;
  *result = comm->state->async.load();
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  std::shared_ptr<NcclState> state = comm->state;
  std::shared_ptr<Communicator> host;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->aborted.store(true);
    host = state->host;
  }
  state->cv.notify_all();
  if (host) host->abort(ErrorCode::kAborted, "ncclCommAbort");
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;  // queued work keeps the state (and its host communicator) until it has run
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) {
    init_error = "ncclGroupEnd without ncclGroupStart";
    return ncclInvalidUsage;
  }
  if (--group_depth > 0) return ncclSuccess;
  std::vector<Pending> calls = std::move(group);
  group.clear();
  bool nonblocking = false;
  std::map<NcclState*, std::vector<Pending>> by_comm;
  std::vector<NcclState*> order;
  for (Pending& call : calls) {
    NcclState* state = call.comm->state.get();
    if (by_comm.find(state) == by_comm.end()) order.push_back(state);
    nonblocking = nonblocking || !state->blocking;
    by_comm[state].push_back(std::move(call));
  }
  for (NcclState* state : order) RETURN_IF_FAILED(launchCalls(std::move(by_comm[state])));
  return nonblocking ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp o;
  RETURN_IF_FAILED(reductionArguments(comm, type, op, &t, &o, "ncclAllReduce"));
  const size_t bytes = count * typeBytes(type);
  RETURN_IF_FAILED(checkBuffer(comm, send, bytes, "ncclAllReduce", "sendbuff"));
  RETURN_IF_FAILED(checkBuffer(comm, recv, bytes, "ncclAllReduce", "recvbuff"));
  Pending p(comm, stream);
  p.run = [=](Communicator& host, const NcclState&) {
    host.allreduce(send, recv, count, t, o, {});
  };
  return submitCall(std::move(p), "ncclAllReduce");
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (root < 0 || root >= sizeOf(comm)) return refuse(comm, ncclInvalidArgument, "bad root");
  const size_t bytes = count * typeBytes(type);
  if (rankOf(comm) == root) {
    RETURN_IF_FAILED(checkBuffer(comm, send, bytes, "ncclBroadcast", "sendbuff"));
  }
  RETURN_IF_FAILED(checkBuffer(comm, recv, bytes, "ncclBroadcast", "recvbuff"));
  Pending p(comm, stream);
  p.run = [=](Communicator& host, const NcclState& state) {
    if (state.rank == root && send != recv) std::memmove(recv, send, bytes);
    host.broadcast(recv, bytes, DataType::kUInt8, root);
  };
  return submitCall(std::move(p), "ncclBroadcast");
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp o;
  RETURN_IF_FAILED(reductionArguments(comm, type, op, &t, &o, "ncclReduce"));
  if (root < 0 || root >= sizeOf(comm)) return refuse(comm, ncclInvalidArgument, "bad root");
  const size_t bytes = count * typeBytes(type);
  RETURN_IF_FAILED(checkBuffer(comm, send, bytes, "ncclReduce", "sendbuff"));
  if (rankOf(comm) == root) {
    RETURN_IF_FAILED(checkBuffer(comm, recv, bytes, "ncclReduce", "recvbuff"));
  }
  Pending p(comm, stream);
  p.run = [=](Communicator& host, const NcclState& state) {
    std::vector<unsigned char> reduced(std::max<size_t>(bytes, 1));
    host.allreduce(send, reduced.data(), count, t, o, {});
    if (state.rank == root) std::memcpy(recv, reduced.data(), bytes);
  };
  return submitCall(std::move(p), "ncclReduce");
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * typeBytes(type);
  const auto n = static_cast<size_t>(sizeOf(comm));
  RETURN_IF_FAILED(checkBuffer(comm, send, bytes, "ncclAllGather", "sendbuff"));
  RETURN_IF_FAILED(checkBuffer(comm, recv, bytes * n, "ncclAllGather", "recvbuff"));
  Pending p(comm, stream);
  p.run = [=](Communicator& host, const NcclState&) {
    std::vector<unsigned char> copy;
    const void* from = send;
    if (overlaps(send, bytes, recv, bytes * n)) {  // in place: recvbuff + rank * count
      copy.assign(static_cast<const unsigned char*>(send),
                  static_cast<const unsigned char*>(send) + bytes);
      from = copy.data();
    }
    host.allgatherv(from, recv, std::vector<size_t>(n, bytes), DataType::kUInt8);
  };
  return submitCall(std::move(p), "ncclAllGather");
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp o;
  RETURN_IF_FAILED(reductionArguments(comm, type, op, &t, &o, "ncclReduceScatter"));
  const size_t bytes = count * typeBytes(type);
  const auto n = static_cast<size_t>(sizeOf(comm));
  RETURN_IF_FAILED(checkBuffer(comm, send, bytes * n, "ncclReduceScatter", "sendbuff"));
  RETURN_IF_FAILED(checkBuffer(comm, recv, bytes, "ncclReduceScatter", "recvbuff"));
  Pending p(comm, stream);
  p.run = [=](Communicator& host, const NcclState&) {
    std::vector<unsigned char> out;
    void* into = recv;
    if (overlaps(send, bytes * n, recv, bytes)) {
      out.resize(std::max<size_t>(bytes, 1));
      into = out.data();
    }
    host.reducescatter(send, into, std::vector<size_t>(n, count), t, o, {});
    if (into != recv) std::memcpy(recv, into, bytes);
  };
  return submitCall(std::move(p), "ncclReduceScatter");
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  if (peer < 0 || peer >= sizeOf(comm)) return refuse(comm, ncclInvalidArgument, "bad peer");
  const size_t bytes = count * typeBytes(type);
  RETURN_IF_FAILED(checkBuffer(comm, send, bytes, "ncclSend", "sendbuff"));
  Pending p(comm, stream, Pending::Kind::kSend);
  p.send = send;
  p.bytes = bytes;
  p.peer = peer;
  return submitCall(std::move(p), "ncclSend");
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  if (peer < 0 || peer >= sizeOf(comm)) return refuse(comm, ncclInvalidArgument, "bad peer");
  const size_t bytes = count * typeBytes(type);
  RETURN_IF_FAILED(checkBuffer(comm, recv, bytes, "ncclRecv", "recvbuff"));
  Pending p(comm, stream, Pending::Kind::kRecv);
  p.recv = recv;
  p.bytes = bytes;
  p.peer = peer;
  return submitCall(std::move(p), "ncclRecv");
}

}  // extern "C"
