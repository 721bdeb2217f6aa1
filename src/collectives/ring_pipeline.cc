#include "collectives/ring_pipeline.h"

#include <memory>

#include "common/reduce_kernels.h"
#include "ronde/errors.h"

namespace ronde {

std::vector<Segment> evenSegments(size_t count, int parts) {
  std::vector<Segment> segments(static_cast<size_t>(parts));
  size_t base = count / static_cast<size_t>(parts);
  size_t extra = count % static_cast<size_t>(parts);
  size_t offset = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    segments[i].offset = offset;
    segments[i].count = base + (i < extra ? 1 : 0);
    offset += segments[i].count;
  }
  return segments;
}

namespace {

// Walks the chunks of one direction (send or receive) step by step.
struct Cursor {
  int step = 0;
  size_t chunk = 0;
  size_t bytes_done = 0;  // within the current chunk
};

}  // namespace

void runRingPipeline(const LinkGroup& group, const RingPlan& plan, const CollectiveContext& ctx) {
  const size_t elem = dataTypeSize(plan.type);
  const size_t chunk_elems = std::max<size_t>(1, ctx.chunk_bytes / elem);
  const int num_steps = static_cast<int>(plan.steps.size());
  Link* right = group.to(group.next());
  Link* left = group.to(group.prev());

  auto chunksOf = [&](int segment) {
    return (plan.segments[static_cast<size_t>(segment)].count + chunk_elems - 1) / chunk_elems;
  };
  auto chunkCount = [&](int segment, size_t chunk) {
    size_t total = plan.segments[static_cast<size_t>(segment)].count;
    return std::min(chunk_elems, total - chunk * chunk_elems);
  };
  auto chunkOffset = [&](int segment, size_t chunk) {
    return plan.segments[static_cast<size_t>(segment)].offset + chunk * chunk_elems;
  };

  // recv_done[t]: chunks of step t received and reduced, in order.
  std::vector<size_t> recv_done(static_cast<size_t>(num_steps), 0);
  std::unique_ptr<char[]> staging(new char[chunk_elems * elem]);
  Cursor send, recv;

  auto skipFinished = [&](Cursor& cursor, bool sending) {
    while (cursor.step < num_steps) {
      const RingStep& step = plan.steps[static_cast<size_t>(cursor.step)];
      int segment = sending ? step.send_segment : step.recv_segment;
      if (cursor.chunk < chunksOf(segment)) return;
      ++cursor.step;
      cursor.chunk = 0;
      cursor.bytes_done = 0;
    }
  };

  for (;;) {
    skipFinished(send, true);
    skipFinished(recv, false);
    if (send.step >= num_steps && recv.step >= num_steps) break;
    size_t moved = 0;
    bool send_ready = false;

    if (send.step < num_steps) {
      const RingStep& step = plan.steps[static_cast<size_t>(send.step)];
      // Forwarding what the previous step received: wait until that chunk is in.
      bool depends = send.step > 0 &&
                     step.send_segment == plan.steps[static_cast<size_t>(send.step - 1)].recv_segment;
      send_ready = !depends || recv_done[static_cast<size_t>(send.step - 1)] > send.chunk;
      if (send_ready) {
        size_t bytes = chunkCount(step.send_segment, send.chunk) * elem;
        const char* base = plan.input && send.step == 0 ? plan.input : plan.buffer;
        const char* data = base + chunkOffset(step.send_segment, send.chunk) * elem;
        size_t n = right->sendSome(data + send.bytes_done, bytes - send.bytes_done);
        moved += n;
        send.bytes_done += n;
        if (send.bytes_done == bytes) {
          ++send.chunk;
          send.bytes_done = 0;
        }
      }
    }

    if (recv.step < num_steps) {
      const RingStep& step = plan.steps[static_cast<size_t>(recv.step)];
      size_t count = chunkCount(step.recv_segment, recv.chunk);
      size_t offset = chunkOffset(step.recv_segment, recv.chunk);
      char* dest = plan.buffer + offset * elem;
      char* into = step.reduce ? staging.get() : dest;
      size_t n = left->recvSome(into + recv.bytes_done, count * elem - recv.bytes_done);
      moved += n;
      recv.bytes_done += n;
      if (recv.bytes_done == count * elem) {
        if (step.reduce && plan.input) {
          // Own operand first, as reduceInto orders them (min/max keep the first on NaN).
          const void* srcs[2] = {plan.input + offset * elem, staging.get()};
          reduceMany(dest, srcs, 2, count, plan.type, plan.op, 1.0);
        } else if (step.reduce) {
          reduceInto(dest, staging.get(), count, plan.type, plan.op);
        }
        if (plan.on_chunk_done) plan.on_chunk_done(recv.step, offset, count);
        ++recv_done[static_cast<size_t>(recv.step)];
        ++recv.chunk;
        recv.bytes_done = 0;
      }
    }

    if (moved > 0) continue;
    bool want_write = send.step < num_steps && send_ready;
    bool want_read = recv.step < num_steps;
    LinkInterest interests[2];
    int n = 0;
    if (right == left) {
      interests[n++] = {right, want_read, want_write};
    } else {
      if (want_write) interests[n++] = {right, false, true};
      if (want_read) interests[n++] = {left, true, false};
    }
    RONDE_CHECK(n > 0, "ring pipeline stalled with nothing to wait for");
    waitForLinks(interests, n, ctx);
  }
}

}  // namespace ronde
