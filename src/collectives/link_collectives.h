// Collective algorithms over point-to-point links (TCP), one per file. Each runs on the
// calling thread, works in place where it can, and leaves scaling to the caller except where
// a post-scale parameter says otherwise. All ranks of the group call the same algorithm with
// the same sizes; the Communicator verifies that beforehand.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "collectives/block_layout.h"
#include "collectives/collective_context.h"
#include "ronde/types.h"

namespace ronde {

// Bandwidth-optimal: reduce-scatter then allgather around the ring, pipelined in chunks.
// `postscale` is applied to each final value once (1.0: none).
void ringAllreduce(const LinkGroup& group, void* buffer, size_t count, DataType type,
                   ReduceOp op, double postscale, const CollectiveContext& ctx);
// Out of place: `in` is read, never written, and `out` needs no copy of it first. `in` may
// equal `out` (then as above); otherwise the two must not overlap.
void ringAllreduce(const LinkGroup& group, const void* in, void* out, size_t count, DataType type,
                   ReduceOp op, double postscale, const CollectiveContext& ctx);

// Latency-optimal for small messages: log2(size) pairwise exchanges. Size must be a power of 2.
void recursiveDoublingAllreduce(const LinkGroup& group, void* buffer, size_t count,
                                DataType type, ReduceOp op, double postscale,
                                const CollectiveContext& ctx);

// Reduces `work` (sum of counts elements) so that block `group.rank` holds the result.
// Other blocks of `work` are left partially reduced.
void ringReducescatter(const LinkGroup& group, void* work, const std::vector<size_t>& counts,
                       DataType type, ReduceOp op, const CollectiveContext& ctx);
// The same with member i's block at blocks[i], anywhere in `work`.
void ringReducescatterBlocks(const LinkGroup& group, void* work, std::vector<Segment> blocks,
                             DataType type, ReduceOp op, const CollectiveContext& ctx);
// Out of place: `in` (every block) is read, never written, and `work` needs no copy of it
// first; only the blocks this rank reduces are written there. Block group.rank of `work` holds
// the result, and `done(offset, count)` is called for each piece of it as it is final (while
// it is still in cache), with its place in `work`.
void ringReducescatter(const LinkGroup& group, const void* in, void* work,
                       const std::vector<size_t>& counts, DataType type, ReduceOp op,
                       const std::function<void(size_t offset, size_t count)>& done,
                       const CollectiveContext& ctx);

// `out` holds every block; block group.rank must already be in place.
void ringAllgatherv(const LinkGroup& group, void* out, const std::vector<size_t>& counts,
                    DataType type, const CollectiveContext& ctx);
// The same with each member's block anywhere in `out`: blocks[i] is member i's place, and
// block group.rank must already be in place.
void ringAllgatherBlocks(const LinkGroup& group, void* out, const std::vector<Segment>& blocks,
                         DataType type, const CollectiveContext& ctx);

// Pipelined chain from root around the ring.
void chainBroadcast(const LinkGroup& group, void* buffer, size_t bytes, int root,
                    const CollectiveContext& ctx);

// Pairwise exchange: in step s, send to rank+s while receiving from rank-s.
void pairwiseAlltoallv(const LinkGroup& group, const void* in, const std::vector<size_t>& send_counts,
                       void* out, const std::vector<size_t>& recv_counts, DataType type,
                       const CollectiveContext& ctx);

// Dissemination barrier: ceil(log2(size)) rounds of one-byte messages.
void disseminationBarrier(const LinkGroup& group, const CollectiveContext& ctx);

}  // namespace ronde
