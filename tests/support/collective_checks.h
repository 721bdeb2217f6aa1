// Every collective x dtype x op x size on one communicator, against an independent reference:
// the bodies of collectives_test.cc, shared by every backend's test. Call on every rank; each
// throws std::runtime_error naming the first wrong result.
#pragma once

#include "ronde/communicator.h"

namespace ronde::testing {

// Whether a reduction result `got` is expectedReduction's `want`: exact for integers (wrapped
// like the type), within the type's rounding for floats, within 1 for integer averages.
bool near(DataType type, ReduceOp op, double got, double want);

void checkAllreduceEveryDtypeOpAndSize(Communicator& comm);
void checkAllreduceLargeBuffersAndScaling(Communicator& comm);
void checkAllreduceLargeUnscaled(Communicator& comm);
void checkAllgathervUnevenCounts(Communicator& comm);
void checkBroadcastFromEveryRoot(Communicator& comm);
void checkAlltoallvWithSplits(Communicator& comm);
void checkReducescatterUneven(Communicator& comm);
void checkBarrierAndAsyncInOrder(Communicator& comm);

}  // namespace ronde::testing
