#include "backends/nccl/nccl_communicator.h"

#include <sched.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include "backends/nccl/nccl_backend.h"
#include "backends/nccl/nccl_translation.h"
#include "comm/failure_record.h"
#include "common/logging.h"
#include "common/reduce_kernels.h"
#include "cuda/batched_copy.h"
#include "rendezvous/unique_id_exchange.h"

namespace ronde {
namespace {

// How often a wait checks the store for a failure another rank published.
constexpr auto kPatience = std::chrono::milliseconds(50);

std::string localHostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

size_t sum(const std::vector<size_t>& counts) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

bool allEqual(const std::vector<size_t>& counts) {
  for (size_t c : counts) {
    if (c != counts[0]) return false;
  }
  return true;
}

const char* at(const void* base, size_t elements, DataType type) {
  return static_cast<const char*>(base) + elements * dataTypeSize(type);
}

}  // namespace

std::unique_ptr<Communicator> makeNcclCommunicator(const CommOptions& options) {
  return std::make_unique<NcclCommunicator>(options);
}

int loadedNcclVersion() {
  int version = 0;
  return ncclGetVersion(&version) == ncclSuccess ? version : 0;
}

NcclCommunicator::NcclCommunicator(const CommOptions& options) : options_(options) {
  if (options.size > 1 && !options.store) {
    throw makeError(ErrorCode::kInvalidArgument, "a rendezvous store is needed for ", options.size,
                    " ranks");
  }
  const std::string hostname = options.hostname.empty() ? localHostname() : options.hostname;
  const Deadline start = Deadline::after(options.start_timeout);
  if (options.size > 1) {
    topology_ = Topology::gather(*options.store, options.rank, options.size, hostname, start);
  } else {
    topology_ = Topology::fromHosts(0, {hostname});
  }
  const std::string me = topology_.name(rank());
  try {
    int devices = 0;
    checkCudaCall(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    device_ = options.cuda_device;
    if (device_ < 0) checkCudaCall(cudaGetDevice(&device_), "cudaGetDevice");
    if (device_ >= devices) {
      throw makeError(ErrorCode::kConfig, me, " asks for GPU ", device_, " but sees ", devices);
    }
    checkCudaCall(cudaSetDevice(device_), "cudaSetDevice");
    checkCudaCall(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    checkCudaCall(cudaMalloc(&descriptors_, sizeof(OpDescriptor) * size()), "cudaMalloc");
    checkCudaCall(cudaMallocHost(&host_descriptors_, sizeof(OpDescriptor) * size()),
                  "cudaMallocHost");
    ncclUniqueId id;
    if (size() > 1) {
      UniqueIdExchange exchange{"nccl/unique_id", rank(), 0, topology_.name(0), sizeof(id)};
      Bytes bytes = exchangeUniqueId(
          *options.store, exchange,
          [&] {
            ncclUniqueId made;
            check(ncclGetUniqueId(&made), "ncclGetUniqueId");
            const auto* raw = reinterpret_cast<const uint8_t*>(&made);
            return Bytes(raw, raw + sizeof(made));
          },
          start);
      std::memcpy(&id, bytes.data(), sizeof(id));
    } else {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    }
    // Nonblocking: the init (and every later call) returns at once, and the waits below poll it
    // against their deadlines, so a rank that never joins is a timeout rather than a hang.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    deadline_ = start;
    current_ = "forming the NCCL communicator of " + std::to_string(size()) + " ranks";
    ncclResult_t status = ncclCommInitRankConfig(&comm_, size(), id, rank(), &config);
    if (status != ncclSuccess && status != ncclInProgress) {
      throw ncclError(status, "ncclCommInitRankConfig", me, ncclGetLastError(comm_));
    }
    check(status, "ncclCommInitRankConfig");
  } catch (const Error& e) {
    if (comm_ != nullptr && !nccl_aborted_) ncclCommAbort(comm_);
    if (descriptors_ != nullptr) cudaFree(descriptors_);
    if (host_descriptors_ != nullptr) cudaFreeHost(host_descriptors_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (failureStore() && options.size > 1) {
      publishFirstFailure(*failureStore(), e.code(), e.what());
    }
    throw;
  }
  log(LogLevel::kDebug, "NCCL communicator ready on GPU ", device_, ": local rank ", localRank(),
      "/", localSize(), ", host ", crossRank(), "/", crossSize());
}

NcclCommunicator::~NcclCommunicator() {
  queue_.reset();  // queued collectives finish before anything they use goes
  cudaSetDevice(device_);
  if (comm_ != nullptr && !nccl_aborted_) {
    if (aborted_.load()) {
      ncclCommAbort(comm_);
    } else {
      // Finished work only: everything this communicator enqueued was waited for.
      ncclCommDestroy(comm_);
    }
  }
  cudaFree(scratch_);
  cudaFree(descriptors_);
  cudaFreeHost(host_descriptors_);
  cudaStreamDestroy(stream_);
}

const std::string& NcclCommunicator::host(int r) const {
  if (r < 0 || r >= size()) throw makeError(ErrorCode::kInvalidArgument, "no rank ", r);
  return topology_.hosts[static_cast<size_t>(r)];
}

void NcclCommunicator::checkCudaCall(cudaError_t status, const char* what) const {
  if (status == cudaSuccess) return;
  throw makeError(ErrorCode::kIo, what, " failed on ", topology_.name(rank()), ": ",
                  cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

void NcclCommunicator::check(ncclResult_t status, const char* what) {
  while (status == ncclInProgress) {
    stopIfFailed(what, deadline_, true);
    sched_yield();
    if (ncclCommGetAsyncError(comm_, &status) != ncclSuccess) break;
  }
  if (status == ncclSuccess) return;
  throw ncclError(status, what, topology_.name(rank()),
                  comm_ != nullptr ? ncclGetLastError(comm_) : "");
}

void NcclCommunicator::abortNccl() {
  if (comm_ == nullptr || nccl_aborted_) return;
  ncclCommAbort(comm_);  // ends this rank's kernels in flight, so the stream drains
  nccl_aborted_ = true;
}

void NcclCommunicator::stopIfFailed(const char* what, Deadline deadline, bool forming) {
  if (aborted_.load()) {
    abortNccl();
    std::lock_guard<std::mutex> lock(abort_mutex_);
    throw Error(abort_code_ == ErrorCode::kPeerLost ? ErrorCode::kPeerLost : ErrorCode::kAborted,
                abort_reason_);
  }
  const auto now = Deadline::Clock::now();
  if (now >= deadline.at()) {
    abortNccl();
    const auto limit = forming ? options_.start_timeout : options_.timeout;
    throw makeError(ErrorCode::kTimeout, current_, " on ", topology_.name(rank()),
                    " did not finish within ", limit.count(), " ms in ", what,
                    "; NCCL was aborted (a peer is missing, stopped, or called another "
                    "collective)");
  }
  if (failureStore() && size() > 1 && now >= next_store_check_) {
    next_store_check_ = now + kPatience;
    if (auto first = publishedFirstFailure(*failureStore(), Duration{0},
                                           pollAnswerBound(deadline.at()))) {
      abortNccl();
      throw *first;
    }
  }
}

void NcclCommunicator::waitForStream(const char* what) {
  for (;;) {
    const cudaError_t status = cudaStreamQuery(stream_);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) checkCudaCall(status, what);
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress) {
      const Error error = ncclError(async, what, topology_.name(rank()), ncclGetLastError(comm_));
      abortNccl();
      throw error;
    }
    stopIfFailed(what, deadline_, false);
    sched_yield();
  }
}

void NcclCommunicator::abort(ErrorCode code, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (!aborted_.load() && abort_reason_.empty()) {
      abort_reason_ = reason;
      abort_code_ = code;
    }
  }
  if (failureStore() && options_.size > 1) publishFirstFailure(*failureStore(), code, reason);
  // The worker's wait sees the flag and calls ncclCommAbort itself: NCCL calls stay on one
  // thread, and an idle communicator is aborted by its destructor.
  aborted_.store(true);
}

void NcclCommunicator::fail(const Error& error) {
  const Error reported =
      failureStore() && size() > 1 ? failureToReport(*failureStore(), error, Duration{200}) : error;
  abort(reported.code(), reported.what());
  abortNccl();
  throw reported;
}

void NcclCommunicator::verify(const OpDescriptor& descriptor) {
  auto* all = static_cast<OpDescriptor*>(host_descriptors_);
  all[rank()] = descriptor;
  auto* mine = static_cast<char*>(descriptors_) + sizeof(OpDescriptor) * rank();
  checkCudaCall(
      cudaMemcpyAsync(mine, &all[rank()], sizeof(OpDescriptor), cudaMemcpyHostToDevice, stream_),
      "copying the call descriptor");
  check(ncclAllGather(mine, descriptors_, sizeof(OpDescriptor), ncclUint8, comm_, stream_),
        "ncclAllGather of the call descriptors");
  checkCudaCall(cudaMemcpyAsync(all, descriptors_, sizeof(OpDescriptor) * size(),
                                cudaMemcpyDeviceToHost, stream_),
                "copying the call descriptors");
  waitForStream("ncclAllGather of the call descriptors");
  std::ostringstream differences;
  for (int r = 0; r < size(); ++r) {
    std::string difference = describeDifference(all[0], all[r]);
    if (difference.empty()) continue;
    differences << "; " << topology_.name(r) << " called " << describeOp(all[r]) << " ("
                << difference << ")";
  }
  if (differences.tellp() > 0) {
    throw makeError(ErrorCode::kMismatch, "ranks disagree on collective #", descriptor.op_index,
                    ": ", topology_.name(0), " called ", describeOp(all[0]), differences.str());
  }
}

template <typename Body>
void NcclCommunicator::run(OpDescriptor descriptor, Body&& body) {
  if (aborted_.load()) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    throw makeError(ErrorCode::kAborted,
                    "the communicator was aborted by an earlier failure: ", abort_reason_);
  }
  descriptor.op_index = ++op_index_;
  deadline_ = Deadline::after(options_.timeout);
  current_ = describeOp(descriptor);
  try {
    checkCudaCall(cudaSetDevice(device_), "cudaSetDevice");
    if (size() > 1) verify(descriptor);
    body();
    waitForStream(current_.c_str());
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kInvalidArgument && !nccl_aborted_) throw;  // this rank's own
    fail(e);
  }
}

void NcclCommunicator::scale(const void* in, void* out, size_t count, DataType type,
                             double factor) {
  if (count == 0 || (factor == 1.0 && in == out)) return;
  cuda::launchBatchedCopy({{in, out, count}}, {type, type, factor}, stream_);
}

void* NcclCommunicator::scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  waitForStream("growing the scratch buffer");  // the old one may still be read
  cudaFree(scratch_);
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  checkCudaCall(cudaMalloc(&scratch_, bytes), "cudaMalloc of the scratch buffer");
  scratch_bytes_ = bytes;
  return scratch_;
}

bool NcclCommunicator::supportsReduction(DataType type, ReduceOp op) const {
  return type != DataType::kInt16 && type != DataType::kUInt16 &&  // ncclReduceType
         op != ReduceOp::kAdasum;                                  // ncclReduceOp
}

void NcclCommunicator::validateCounts(const std::vector<size_t>& counts, const char* what) const {
  if (counts.size() != static_cast<size_t>(size())) {
    throw makeError(ErrorCode::kInvalidArgument, what, " has ", counts.size(),
                    " entries; expected one per rank (", size(), ")");
  }
}

void NcclCommunicator::allreduce(const void* in, void* out, size_t count, DataType type,
                                 ReduceOp op, Scaling scaling) {
  OpDescriptor d;
  d.kind = CollectiveKind::kAllreduce;
  d.count = count;
  d.type = type;
  d.op = op;
  d.prescale = scaling.prescale;
  d.postscale = scaling.postscale;
  run(d, [&] {
    checkReducible(type, op);
    const ncclDataType_t nccl_type = ncclReduceType(type);
    const ncclRedOp_t nccl_op = ncclReduceOp(type, op);
    const double postscale = scaling.postscale * (op == ReduceOp::kAverage ? 1.0 / size() : 1.0);
    if (count == 0) return;
    const void* send = in;
    if (scaling.prescale != 1.0) {
      scale(in, out, count, type, scaling.prescale);
      send = out;
    }
    check(ncclAllReduce(send, out, count, nccl_type, nccl_op, comm_, stream_), "ncclAllReduce");
    if (postscale != 1.0) scale(out, out, count, type, postscale);
  });
}

void NcclCommunicator::allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                                  DataType type) {
  OpDescriptor d;
  d.kind = CollectiveKind::kAllgather;
  d.type = type;
  d.counts_hash = hashCounts(counts);
  d.count = sum(counts);
  run(d, [&] {
    validateCounts(counts, "allgatherv counts");
    if (d.count == 0) return;
    const size_t element = dataTypeSize(type);
    if (allEqual(counts)) {
      check(ncclAllGather(in, out, counts[0] * element, ncclUint8, comm_, stream_),
            "ncclAllGather");
      return;
    }
    // Unequal blocks: one broadcast from each rank into its place, in one group (as Horovod).
    check(ncclGroupStart(), "ncclGroupStart");
    size_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      const size_t n = counts[static_cast<size_t>(r)];
      char* block = const_cast<char*>(at(out, offset, type));
      if (n > 0) {
        check(ncclBroadcast(r == rank() ? in : block, block, n * element, ncclUint8, r, comm_,
                            stream_),
              "ncclBroadcast of an allgatherv block");
      }
      offset += n;
    }
    check(ncclGroupEnd(), "ncclGroupEnd of allgatherv");
  });
}

void NcclCommunicator::broadcast(void* buffer, size_t count, DataType type, int root) {
  OpDescriptor d;
  d.kind = CollectiveKind::kBroadcast;
  d.type = type;
  d.count = count;
  d.root = root;
  run(d, [&] {
    if (root < 0 || root >= size()) {
      throw makeError(ErrorCode::kInvalidArgument, "broadcast root ", root,
                      " is not a rank of this ", size(), "-rank job (", topology_.name(rank()),
                      ")");
    }
    if (count == 0) return;
    check(
        ncclBroadcast(buffer, buffer, count * dataTypeSize(type), ncclUint8, root, comm_, stream_),
        "ncclBroadcast");
  });
}

void NcclCommunicator::alltoallv(const void* in, const std::vector<size_t>& send_counts, void* out,
                                 const std::vector<size_t>& recv_counts, DataType type) {
  OpDescriptor d;
  d.kind = CollectiveKind::kAlltoall;
  d.type = type;
  run(d, [&] {
    validateCounts(send_counts, "alltoall send splits");
    validateCounts(recv_counts, "alltoall receive splits");
    const size_t element = dataTypeSize(type);
    // Sends and receives of one group are matched by NCCL pairwise; a split that disagrees
    // with its peer's leaves the group unfinished, which the wait turns into a timeout.
    check(ncclGroupStart(), "ncclGroupStart");
    size_t sent = 0, received = 0;
    for (int r = 0; r < size(); ++r) {
      const size_t s = send_counts[static_cast<size_t>(r)];
      const size_t g = recv_counts[static_cast<size_t>(r)];
      if (s > 0) {
        check(ncclSend(at(in, sent, type), s * element, ncclUint8, r, comm_, stream_), "ncclSend");
      }
      if (g > 0) {
        check(ncclRecv(const_cast<char*>(at(out, received, type)), g * element, ncclUint8, r, comm_,
                       stream_),
              "ncclRecv");
      }
      sent += s;
      received += g;
    }
    check(ncclGroupEnd(), "ncclGroupEnd of alltoallv");
  });
}

void NcclCommunicator::reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                     DataType type, ReduceOp op, Scaling scaling) {
  OpDescriptor d;
  d.kind = CollectiveKind::kReducescatter;
  d.type = type;
  d.op = op;
  d.prescale = scaling.prescale;
  d.postscale = scaling.postscale;
  d.counts_hash = hashCounts(counts);
  d.count = sum(counts);
  run(d, [&] {
    validateCounts(counts, "reducescatter counts");
    checkReducible(type, op);
    const ncclDataType_t nccl_type = ncclReduceType(type);
    const ncclRedOp_t nccl_op = ncclReduceOp(type, op);
    const double postscale = scaling.postscale * (op == ReduceOp::kAverage ? 1.0 / size() : 1.0);
    const size_t mine = counts[static_cast<size_t>(rank())];
    if (d.count == 0) return;
    const void* send = in;
    if (scaling.prescale != 1.0 || in == out) {
      // NCCL reads the input while it writes the output: in place needs a copy.
      void* scaled = scratch(d.count * dataTypeSize(type));
      scale(in, scaled, d.count, type, scaling.prescale);
      send = scaled;
    }
    if (allEqual(counts)) {
      check(ncclReduceScatter(send, out, mine, nccl_type, nccl_op, comm_, stream_),
            "ncclReduceScatter");
    } else {
      // Unequal blocks: block r reduced onto rank r, every block in one group.
      check(ncclGroupStart(), "ncclGroupStart");
      size_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        const size_t n = counts[static_cast<size_t>(r)];
        if (n > 0) {
          check(ncclReduce(at(send, offset, type), out, n, nccl_type, nccl_op, r, comm_, stream_),
                "ncclReduce of a reducescatter block");
        }
        offset += n;
      }
      check(ncclGroupEnd(), "ncclGroupEnd of reducescatter");
    }
    if (postscale != 1.0) scale(out, out, mine, type, postscale);
  });
}

void NcclCommunicator::barrier() {
  OpDescriptor d;
  d.kind = CollectiveKind::kBarrier;
  // The descriptor check is itself a full exchange among all ranks: it is the barrier.
  run(d, [] {});
}

}  // namespace ronde
