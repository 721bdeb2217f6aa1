#include "collectives/hierarchical_allreduce.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/link_collectives.h"
#include "collectives/ring_pipeline.h"

namespace ronde {
namespace {

// Where one chunk of the buffer lies, and the block of it that this rank carries across hosts.
struct ChunkLayout {
  size_t offset = 0;           // elements, in the whole buffer
  std::vector<size_t> counts;  // per local rank, within the chunk
  RingSegment mine;            // this rank's block, relative to the chunk
};

std::vector<ChunkLayout> cutIntoChunks(size_t count, size_t elem, size_t chunk_bytes,
                                       int local_rank, int local_size) {
  // Whole cache lines per local rank: every block starts aligned for the vector kernels.
  const size_t granule = static_cast<size_t>(local_size) * std::max<size_t>(1, 64 / elem);
  const size_t per_chunk = std::max(granule, chunk_bytes / elem / granule * granule);
  std::vector<ChunkLayout> chunks;
  for (size_t offset = 0; offset < count || chunks.empty(); offset += per_chunk) {
    ChunkLayout c;
    c.offset = offset;
    std::vector<RingSegment> blocks = evenSegments(std::min(per_chunk, count - offset), local_size);
    for (const auto& b : blocks) c.counts.push_back(b.count);
    c.mine = blocks[static_cast<size_t>(local_rank)];
    chunks.push_back(std::move(c));
  }
  return chunks;
}

class ChunkSteps {
 public:
  ChunkSteps(const HierarchicalAllreduce& plan, const void* in, void* out, DataType type,
             ReduceOp op, double prescale, double postscale)
      : plan_(plan),
        in_(static_cast<const char*>(in)),
        out_(static_cast<char*>(out)),
        elem_(dataTypeSize(type)),
        type_(type),
        op_(op),
        prescale_(prescale),
        postscale_(postscale) {}

  // In place is safe: round k writes piece k of this rank's block only after every rank
  // copied piece k of its own input in, and no rank reads another's input.
  void reduceInsideHost(const ChunkLayout& c) const {
    shmReducescatter(plan_.local, in_ + c.offset * elem_, myBlock(c), c.counts, type_, op_,
                     prescale_, 1.0);
  }
  void reduceAcrossHosts(const ChunkLayout& c) const {
    ringAllreduce(*plan_.cross, myBlock(c), c.mine.count, type_, op_, postscale_, plan_.ctx);
  }
  void gatherInsideHost(const ChunkLayout& c) const {
    shmAllgatherv(plan_.local, myBlock(c), out_ + c.offset * elem_, c.counts, type_);
  }

 private:
  char* myBlock(const ChunkLayout& c) const { return out_ + (c.offset + c.mine.offset) * elem_; }

  const HierarchicalAllreduce& plan_;
  const char* in_;
  char* out_;
  size_t elem_;
  DataType type_;
  ReduceOp op_;
  double prescale_, postscale_;
};

// The helper thread that runs the step across hosts of each chunk, in order, as soon as the
// calling thread has reduced it inside the host. Joined before anything it writes goes away.
class CrossHostStage {
 public:
  CrossHostStage(const HierarchicalAllreduce& plan, const ChunkSteps& steps,
                 const std::vector<ChunkLayout>& chunks)
      : plan_(plan), steps_(steps), chunks_(chunks), thread_([this] { loop(); }) {}
  ~CrossHostStage() { stopAndJoin(); }
  CrossHostStage(const CrossHostStage&) = delete;
  CrossHostStage& operator=(const CrossHostStage&) = delete;

  void reducedInsideHost(size_t k) {
    std::lock_guard<std::mutex> lock(mutex_);
    posted_ = k + 1;
    changed_.notify_all();
  }

  // Throws the helper's error if chunk k failed there (or an earlier one did).
  void waitCrossed(size_t k) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto done = [&] { return crossed_ > k || error_ != nullptr; };
    const Deadline::Clock::time_point at = plan_.ctx.deadline.at();
    // No timed wait on "never": some C libraries overflow converting the farthest time point.
    bool ended = true;
    if (at == Deadline::Clock::time_point::max()) {
      changed_.wait(lock, done);
    } else {
      ended = changed_.wait_until(lock, at, done);
    }
    if (error_) std::rethrow_exception(error_);
    if (!ended) {
      throw makeError(ErrorCode::kTimeout, plan_.ctx.what(), " timed out waiting for chunk ", k + 1,
                      " of ", chunks_.size(), " to cross hosts");
    }
  }

  void stopAndJoin() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      changed_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

  std::exception_ptr error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

 private:
  void loop() {
    for (size_t k = 0; k < chunks_.size(); ++k) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        // No deadline needed here: the calling thread either posts or stops, within its own.
        changed_.wait(lock, [&] { return posted_ > k || stop_; });
        if (posted_ <= k) return;
      }
      try {
        steps_.reduceAcrossHosts(chunks_[k]);
      } catch (const Error& e) {
        fail(e, std::current_exception());
        return;
      } catch (const std::exception& e) {
        fail(Error(ErrorCode::kInternal, e.what()), std::current_exception());
        return;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      crossed_ = k + 1;
      changed_.notify_all();
    }
  }

  void fail(const Error& e, std::exception_ptr error) {
    // First wake the calling thread's shared-memory waits and the peers (abort), then tell it.
    if (plan_.abort_all) plan_.abort_all(e);
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = error;
    changed_.notify_all();
  }

  const HierarchicalAllreduce& plan_;
  const ChunkSteps& steps_;
  const std::vector<ChunkLayout>& chunks_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  size_t posted_ = 0;   // chunks reduced inside the host
  size_t crossed_ = 0;  // chunks reduced across hosts
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace

void hierarchicalAllreduce(const HierarchicalAllreduce& plan, const void* in, void* out,
                           size_t count, DataType type, ReduceOp op, double prescale,
                           double postscale) {
  const std::vector<ChunkLayout> chunks =
      cutIntoChunks(count, dataTypeSize(type), plan.chunk_bytes, plan.local_rank, plan.local_size);
  const ChunkSteps steps(plan, in, out, type, op, prescale, postscale);
  if (chunks.size() == 1) {
    steps.reduceInsideHost(chunks[0]);
    steps.reduceAcrossHosts(chunks[0]);
    steps.gatherInsideHost(chunks[0]);
    return;
  }
  // Every local rank runs the same sequence of shared-memory steps (reduce 0, reduce 1,
  // gather 0, reduce 2, gather 1, ...), whatever the timing of its own helper thread.
  CrossHostStage stage(plan, steps, chunks);
  try {
    steps.reduceInsideHost(chunks[0]);
    stage.reducedInsideHost(0);
    for (size_t k = 0; k < chunks.size(); ++k) {
      if (k + 1 < chunks.size()) {
        steps.reduceInsideHost(chunks[k + 1]);
        stage.reducedInsideHost(k + 1);
      }
      stage.waitCrossed(k);
      steps.gatherInsideHost(chunks[k]);
    }
  } catch (const Error& e) {
    if (plan.abort_all) plan.abort_all(e);
    stage.stopAndJoin();
    // This thread's error may be the echo of the helper's abort: the helper's names the cause.
    if (std::exception_ptr helper = stage.error()) std::rethrow_exception(helper);
    throw;
  }
  stage.stopAndJoin();
}

}  // namespace ronde
