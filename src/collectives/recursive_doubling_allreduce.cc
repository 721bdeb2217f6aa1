#include <cstring>
#include <memory>

#include "collectives/link_collectives.h"
#include "common/reduce_kernels.h"
#include "ronde/errors.h"

namespace ronde {

void recursiveDoublingAllreduce(const LinkGroup& group, void* buffer, size_t count,
                                DataType type, ReduceOp op, double postscale,
                                const CollectiveContext& ctx) {
  const int n = group.size;
  RONDE_CHECK((n & (n - 1)) == 0, "recursive doubling needs a power-of-two group, got " << n);
  const size_t bytes = count * dataTypeSize(type);
  std::unique_ptr<char[]> incoming(new char[bytes > 0 ? bytes : 1]);
  for (int distance = 1; distance < n; distance *= 2) {
    Link* partner = group.to(group.rank ^ distance);
    exchange(partner, buffer, bytes, partner, incoming.get(), bytes, ctx);
    // Both partners reduce the same two operands in the same order, the lower rank's first:
    // min and max keep the first operand on NaN, so the other order would leave the two
    // partners (and everyone after them) with different results. The other ops are exact
    // either way round.
    const bool swap = (op == ReduceOp::kMin || op == ReduceOp::kMax) && (group.rank & distance);
    if (swap) {
      reduceInto(incoming.get(), buffer, count, type, op);
      std::memcpy(buffer, incoming.get(), bytes);
    } else {
      reduceInto(buffer, incoming.get(), count, type, op);
    }
  }
  if (postscale != 1.0) copyScaled(buffer, buffer, count, type, postscale);
}

}  // namespace ronde
