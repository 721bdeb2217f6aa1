// ronde in NCCL's terms, in one place: NCCL's result codes as ronde's errors (which ErrorCode
// each becomes, and a message that names the call, the rank and host, and NCCL's own text),
// and ronde's element types and reductions as NCCL's.
#pragma once

#include <nccl.h>

#include <string>

#include "ronde/errors.h"
#include "ronde/types.h"

namespace ronde {

// ncclRemoteError (a peer failed or vanished) is kPeerLost; invalid arguments and usage are
// kInvalidArgument; CUDA, system and NCCL-internal failures are kIo (outside ronde, not its bug).
ErrorCode errorCodeForNccl(ncclResult_t result);

// "ncclAllReduce failed on rank 3 (host b): remote process exited or there was a network error
// (NCCL: <detail>)"; `detail` is ncclGetLastError's text, may be empty.
Error ncclError(ncclResult_t result, const std::string& what, const std::string& where,
                const std::string& detail);

// The element type NCCL reduces `type` as: bool as uint8 (min/max are and/or on 0/1).
// Error(kInvalidArgument) for int16, which NCCL cannot reduce.
ncclDataType_t ncclReduceType(DataType type);
// Sum and average reduce as ncclSum (average divides afterwards, as the host backends do); on
// bool, sum is or (max) and product is and (min).
ncclRedOp_t ncclReduceOp(DataType type, ReduceOp op);

}  // namespace ronde
