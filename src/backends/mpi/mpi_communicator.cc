#include "backends/mpi/mpi_communicator.h"

#include <sched.h>
#include <unistd.h>

#include <array>
#include <climits>
#include <cstring>
#include <sstream>

#include "backends/mpi/mpi_backend.h"
#include "backends/mpi/mpi_process.h"
#include "comm/failure_record.h"
#include "common/logging.h"
#include "common/reduce_kernels.h"

namespace ronde {
namespace {

constexpr size_t kHostnameBytes = 256;
// How often a wait checks the store for a failure another rank published. Between checks it
// spins on MPI_Test as OpenMPI's MPI_Wait does: MPI progresses only inside its calls, so a
// poll that yields the CPU delays the collective whenever other processes want it.
constexpr auto kPatience = std::chrono::milliseconds(50);
// How long the destructor waits for a collective a timeout or abort left pending.
constexpr Duration kDrainTime{2000};

std::string localHostname() {
  char name[kHostnameBytes] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

std::string mpiErrorText(int status) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(status, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

}  // namespace

std::unique_ptr<Communicator> makeMpiCommunicator(const CommOptions& options) {
  return std::make_unique<MpiCommunicator>(options);
}

MpiCommunicator::MpiCommunicator(const CommOptions& options) : options_(options) {
  mpi::ensureInitialized();
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (world_rank != options.rank || world_size != options.size) {
    throw makeError(ErrorCode::kConfig, "the MPI backend was given rank ", options.rank, " of ",
                    options.size, " but MPI_COMM_WORLD has this process as rank ", world_rank,
                    " of ", world_size, ": start every rank with one mpirun (or srun)");
  }
  // Errors come back as codes (and become ronde errors naming the call) instead of ending the job.
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  meet();
}

MpiCommunicator::MpiCommunicator(const CommOptions& options, MPI_Comm comm)
    : options_(options), comm_(comm) {
  meet();
}

void MpiCommunicator::meet() {
  if (!options_.failure_store) options_.failure_store = options_.store;
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  types_ = std::make_unique<mpi::TypeMap>();
  int my_rank = 0, my_size = 0;
  MPI_Comm_rank(comm_, &my_rank);
  MPI_Comm_size(comm_, &my_size);

  std::string hostname = options_.hostname.empty() ? localHostname() : options_.hostname;
  hostname.resize(kHostnameBytes - 1, '\0');
  std::vector<char> names(kHostnameBytes * static_cast<size_t>(my_size));
  check(MPI_Allgather(hostname.c_str(), static_cast<int>(kHostnameBytes), MPI_CHAR, names.data(),
                      static_cast<int>(kHostnameBytes), MPI_CHAR, comm_),
        "MPI_Allgather of host names");
  std::vector<std::string> hosts;
  for (int r = 0; r < my_size; ++r) hosts.emplace_back(names.data() + r * kHostnameBytes);
  topology_ = Topology::fromHosts(my_rank, std::move(hosts));
  topology_.labels = options_.rank_labels;
  log(LogLevel::kDebug, "MPI communicator ready: rank ", my_rank, "/", my_size, ", local rank ",
      localRank(), "/", localSize(), ", host ", crossRank(), "/", crossSize());
}

std::unique_ptr<Communicator> MpiCommunicator::subCommunicator(const std::vector<int>& ranks,
                                                               const std::string& name) {
  CommOptions options = subsetOptions(options_, ranks, name);
  // MPI_Comm_create_group is collective over the group alone (MPI_Comm_split would need every
  // rank). Like MPI_Comm_dup at init it has no timeout: MPI offers none.
  MPI_Group parent = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_group(comm_, &parent);
  MPI_Group_incl(parent, static_cast<int>(ranks.size()), ranks.data(), &group);
  int status = MPI_Comm_create_group(comm_, group, 0, &sub);
  MPI_Group_free(&group);
  MPI_Group_free(&parent);
  check(status, "MPI_Comm_create_group");
  return std::unique_ptr<Communicator>(new MpiCommunicator(options, sub));
}

MpiCommunicator::~MpiCommunicator() {
  // A request left by a timeout or abort completes once its late peers reach it: wait a little.
  Deadline drain = Deadline::after(std::min<Duration>(options_.timeout, kDrainTime));
  for (Pending& p : pending_) {
    int done = p.request == MPI_REQUEST_NULL ? 1 : 0;
    while (!done && !drain.expired()) {
      if (MPI_Test(&p.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) break;
      sched_yield();
    }
    if (!done) {
      // Still refers to comm_, the types and its buffers: freeing them would be undefined, and
      // MPI_Finalize would wait for it forever, so all are left to the exit.
      mpi::markUnfinishable();
      (void)types_.release();
      for (Pending& q : pending_) new std::shared_ptr<void>(std::move(q.scratch));
      return;
    }
  }
  types_.reset();
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

const std::string& MpiCommunicator::host(int r) const {
  if (r < 0 || r >= size()) throw makeError(ErrorCode::kInvalidArgument, "no rank ", r);
  return topology_.hosts[static_cast<size_t>(r)];
}

void MpiCommunicator::check(int status, const char* what) const {
  if (status == MPI_SUCCESS) return;
  throw makeError(ErrorCode::kPeerLost, what, " failed on ", topology_.name(rank()), ": ",
                  mpiErrorText(status));
}

void MpiCommunicator::abort(ErrorCode code, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (!aborted_.load() && abort_reason_.empty()) {
      abort_reason_ = reason;
      abort_code_ = code;
    }
  }
  if (options_.failure_store && options_.size > 1)
    publishFirstFailure(*options_.failure_store, code, reason);
  aborted_.store(true);
}

bool MpiCommunicator::peerPublishedFailure(std::string* reason, ErrorCode* code) {
  if (!options_.failure_store || options_.size == 1) return false;
  // No grace, and no answer awaited past the wait's deadline: this is polled while MPI
  // waits, and that deadline still holds.
  auto first = publishedFirstFailure(*options_.failure_store, Duration{0},
                                     pollAnswerBound(deadline_.at()));
  if (!first) return false;
  *code = first->code();
  *reason = first->what();
  return true;
}

void MpiCommunicator::fail(const Error& error) {
  // Often the echo of another rank's failure: report the first one of the job.
  const Error reported = options_.failure_store && options_.size > 1
                             ? failureToReport(*options_.failure_store, error, Duration{0})
                             : error;
  abort(reported.code(), reported.what());
  throw reported;
}

void MpiCommunicator::leavePending(MPI_Request request, std::shared_ptr<void> scratch,
                                   const Error& error) {
  pending_.push_back({request, std::move(scratch)});
  throw error;
}

void MpiCommunicator::complete(MPI_Request* request, const char* what,
                               std::shared_ptr<void> scratch) {
  const auto start = Deadline::Clock::now();
  auto next_store_check = start + kPatience;
  for (uint64_t polls = 0;; ++polls) {
    int done = 0;
    check(MPI_Test(request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    if ((polls & 63) != 0) continue;  // the clock and the flags every 64 polls
    if (aborted_.load()) {
      std::lock_guard<std::mutex> lock(abort_mutex_);
      leavePending(*request, std::move(scratch), Error(abort_code_, abort_reason_));
    }
    const auto now = Deadline::Clock::now();
    if (now >= deadline_.at()) {
      leavePending(
          *request, std::move(scratch),
          makeError(ErrorCode::kTimeout, current_, " on ", topology_.name(rank()),
                    " did not finish within the collective timeout (", options_.timeout.count(),
                    " ms) in ", what, "; MPI cannot cancel it, so the job is to be restarted"));
    }
    if (now >= next_store_check) {
      next_store_check = now + kPatience;
      std::string reason;
      ErrorCode code = ErrorCode::kAborted;
      if (peerPublishedFailure(&reason, &code)) {
        abort(code, reason);
        leavePending(*request, std::move(scratch), Error(code, reason));
      }
    }
  }
}

void MpiCommunicator::verify(const OpDescriptor& descriptor) {
  // Both buffers outlive a request that a timeout leaves pending.
  auto mine = std::make_shared<OpDescriptor>(descriptor);
  auto gathered = std::make_shared<std::vector<OpDescriptor>>(static_cast<size_t>(size()));
  std::vector<OpDescriptor>& all = *gathered;
  MPI_Request request;
  check(MPI_Iallgather(mine.get(), sizeof(OpDescriptor), MPI_BYTE, all.data(), sizeof(OpDescriptor),
                       MPI_BYTE, comm_, &request),
        "MPI_Iallgather of the call descriptors");
  complete(
      &request, "MPI_Iallgather of the call descriptors",
      std::make_shared<
          std::pair<std::shared_ptr<OpDescriptor>, std::shared_ptr<std::vector<OpDescriptor>>>>(
          mine, gathered));
  std::ostringstream differences;
  for (int r = 0; r < size(); ++r) {
    std::string difference = describeDifference(all[0], all[static_cast<size_t>(r)]);
    if (difference.empty()) continue;
    differences << "; " << topology_.name(r) << " called "
                << describeOp(all[static_cast<size_t>(r)]) << " (" << difference << ")";
  }
  if (differences.tellp() > 0) {
    throw makeError(ErrorCode::kMismatch, "ranks disagree on collective #", descriptor.op_index,
                    ": ", topology_.name(0), " called ", describeOp(all[0]), differences.str());
  }
}

template <typename Body>
void MpiCommunicator::run(OpDescriptor descriptor, Body&& body) {
  if (aborted_.load()) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    throw makeError(ErrorCode::kAborted,
                    "the communicator was aborted by an earlier failure: ", abort_reason_);
  }
  descriptor.op_index = ++op_index_;
  deadline_ = Deadline::after(options_.timeout);
  current_ = describeOp(descriptor);
  try {
    if (size() > 1) verify(descriptor);
    body();
  } catch (const Error& e) {
    if (size() == 1) throw;
    fail(e);
  }
}

int MpiCommunicator::toInt(size_t count, const char* what) const {
  if (count > static_cast<size_t>(INT_MAX)) {
    throw makeError(ErrorCode::kInvalidArgument, what, " of ", count,
                    " elements is past MPI's int counts (", INT_MAX,
                    "); split it, or use the native backend");
  }
  return static_cast<int>(count);
}

std::vector<int> MpiCommunicator::toInts(const std::vector<size_t>& counts,
                                         const char* what) const {
  size_t total = 0;
  std::vector<int> ints;
  for (size_t c : counts) {
    total += c;
    ints.push_back(toInt(c, what));
  }
  toInt(total, what);  // displacements are ints too
  return ints;
}

void MpiCommunicator::validateCounts(const std::vector<size_t>& counts, const char* what) const {
  if (counts.size() != static_cast<size_t>(size())) {
    throw makeError(ErrorCode::kInvalidArgument, what, " has ", counts.size(),
                    " entries; expected one per rank (", size(), ")");
  }
}

void MpiCommunicator::allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                                Scaling scaling) {
  OpDescriptor d;
  d.kind = CollectiveKind::kAllreduce;
  d.count = count;
  d.type = type;
  d.op = op;
  d.prescale = scaling.prescale;
  d.postscale = scaling.postscale;
  run(d, [&] {
    checkReducible(type, op);
    const int n = toInt(count, "allreduce");
    const double postscale = scaling.postscale * (op == ReduceOp::kAverage ? 1.0 / size() : 1.0);
    if (count == 0) return;
    const void* send = in;
    if (scaling.prescale != 1.0) {
      copyScaled(out, in, count, type, scaling.prescale);
      send = MPI_IN_PLACE;
    } else if (in == out) {
      send = MPI_IN_PLACE;
    }
    if (size() > 1) {
      MPI_Request request;
      check(MPI_Iallreduce(send, out, n, types_->type(type), types_->op(type, op), comm_, &request),
            "MPI_Iallreduce");
      complete(&request, "MPI_Iallreduce");
    } else if (send != MPI_IN_PLACE) {
      std::memcpy(out, in, count * dataTypeSize(type));
    }
    if (postscale != 1.0) copyScaled(out, out, count, type, postscale);
  });
}

void MpiCommunicator::allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                                 DataType type) {
  OpDescriptor d;
  d.kind = CollectiveKind::kAllgather;
  d.type = type;
  d.counts_hash = hashCounts(counts);
  for (size_t c : counts) d.count += c;
  run(d, [&] {
    validateCounts(counts, "allgatherv counts");
    std::vector<int> ints = toInts(counts, "allgatherv");
    std::vector<int> displacements(ints.size());
    for (size_t r = 1; r < ints.size(); ++r) displacements[r] = displacements[r - 1] + ints[r - 1];
    const size_t elem = dataTypeSize(type);
    char* my_block = static_cast<char*>(out) +
                     static_cast<size_t>(displacements[static_cast<size_t>(rank())]) * elem;
    const size_t my_bytes = counts[static_cast<size_t>(rank())] * elem;
    if (size() == 1) {
      if (my_block != in && my_bytes > 0) std::memmove(my_block, in, my_bytes);
      return;
    }
    if (d.count == 0) return;
    MPI_Request request;
    check(MPI_Iallgatherv(my_block == in ? MPI_IN_PLACE : in, ints[static_cast<size_t>(rank())],
                          types_->type(type), out, ints.data(), displacements.data(),
                          types_->type(type), comm_, &request),
          "MPI_Iallgatherv");
    complete(&request, "MPI_Iallgatherv");
  });
}

void MpiCommunicator::broadcast(void* buffer, size_t count, DataType type, int root) {
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
    const int n = toInt(count, "broadcast");
    if (size() == 1 || count == 0) return;
    MPI_Request request;
    check(MPI_Ibcast(buffer, n, types_->type(type), root, comm_, &request), "MPI_Ibcast");
    complete(&request, "MPI_Ibcast");
  });
}

void MpiCommunicator::alltoallv(const void* in, const std::vector<size_t>& send_counts, void* out,
                                const std::vector<size_t>& recv_counts, DataType type) {
  OpDescriptor d;
  d.kind = CollectiveKind::kAlltoall;
  d.type = type;
  run(d, [&] {
    validateCounts(send_counts, "alltoall send splits");
    validateCounts(recv_counts, "alltoall receive splits");
    std::vector<int> sends = toInts(send_counts, "alltoall send splits");
    std::vector<int> receives = toInts(recv_counts, "alltoall receive splits");
    std::vector<int> send_at(sends.size()), receive_at(receives.size());
    for (size_t r = 1; r < sends.size(); ++r) {
      send_at[r] = send_at[r - 1] + sends[r - 1];
      receive_at[r] = receive_at[r - 1] + receives[r - 1];
    }
    // What each rank sends must be what its receiver expects: checked by every rank together
    // (a swap of the send counts, then one agreement), so all fail alike before data moves.
    auto exchanged = std::make_shared<std::vector<int>>(sends);  // [0, n): sent, [n, 2n): expected
    exchanged->resize(2 * sends.size());
    int* expected = exchanged->data() + sends.size();
    MPI_Request request;
    check(MPI_Ialltoall(exchanged->data(), 1, MPI_INT, expected, 1, MPI_INT, comm_, &request),
          "MPI_Ialltoall of the splits");
    complete(&request, "MPI_Ialltoall of the splits", exchanged);
    int first_bad = INT_MAX;
    for (size_t j = 0; j < receives.size(); ++j) {
      if (expected[j] != receives[j]) {
        first_bad = static_cast<int>(j);
        break;
      }
    }
    // [0, 2): this rank's (found, rank), [2, 4): the maximum over ranks.
    auto verdict = std::make_shared<std::array<int, 4>>(std::array<int, 4>{
        first_bad == INT_MAX ? 0 : 1, first_bad == INT_MAX ? -1 : rank(), 0, -1});
    const int* any_bad = verdict->data() + 2;
    check(
        MPI_Iallreduce(verdict->data(), verdict->data() + 2, 2, MPI_INT, MPI_MAX, comm_, &request),
        "MPI_Iallreduce of the split check");
    complete(&request, "MPI_Iallreduce of the split check", verdict);
    if (first_bad != INT_MAX) {
      const size_t j = static_cast<size_t>(first_bad);
      throw makeError(ErrorCode::kMismatch, "alltoall split mismatch: ", topology_.name(first_bad),
                      " sends ", expected[j], " elements to ", topology_.name(rank()),
                      ", which expects ", receives[j]);
    }
    if (any_bad[0] != 0) {
      throw makeError(ErrorCode::kMismatch, "alltoall split mismatch found by ",
                      topology_.name(any_bad[1]), " (", topology_.name(rank()), "'s splits agree)");
    }
    check(MPI_Ialltoallv(in, sends.data(), send_at.data(), types_->type(type), out, receives.data(),
                         receive_at.data(), types_->type(type), comm_, &request),
          "MPI_Ialltoallv");
    complete(&request, "MPI_Ialltoallv");
  });
}

void MpiCommunicator::reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                    DataType type, ReduceOp op, Scaling scaling) {
  OpDescriptor d;
  d.kind = CollectiveKind::kReducescatter;
  d.type = type;
  d.op = op;
  d.prescale = scaling.prescale;
  d.postscale = scaling.postscale;
  d.counts_hash = hashCounts(counts);
  for (size_t c : counts) d.count += c;
  run(d, [&] {
    validateCounts(counts, "reducescatter counts");
    checkReducible(type, op);
    std::vector<int> ints = toInts(counts, "reducescatter");
    const double postscale = scaling.postscale * (op == ReduceOp::kAverage ? 1.0 / size() : 1.0);
    const size_t mine = counts[static_cast<size_t>(rank())];
    if (size() == 1) {
      copyScaled(out, in, mine, type, scaling.prescale);
      if (postscale != 1.0) copyScaled(out, out, mine, type, postscale);
      return;
    }
    if (d.count == 0) return;
    std::shared_ptr<char[]> scaled;
    const void* send = in;
    if (scaling.prescale != 1.0) {
      scaled.reset(new char[d.count * dataTypeSize(type)]);
      copyScaled(scaled.get(), in, d.count, type, scaling.prescale);
      send = scaled.get();
    } else if (in == out) {
      send = MPI_IN_PLACE;
    }
    MPI_Request request;
    check(MPI_Ireduce_scatter(send, out, ints.data(), types_->type(type), types_->op(type, op),
                              comm_, &request),
          "MPI_Ireduce_scatter");
    complete(&request, "MPI_Ireduce_scatter", scaled);
    if (postscale != 1.0) copyScaled(out, out, mine, type, postscale);
  });
}

void MpiCommunicator::barrier() {
  OpDescriptor d;
  d.kind = CollectiveKind::kBarrier;
  // The descriptor check is itself a full exchange among all ranks: it is the barrier.
  run(d, [] {});
}

}  // namespace ronde
