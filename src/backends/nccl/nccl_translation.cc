#include "backends/nccl/nccl_translation.h"

namespace ronde {

ErrorCode errorCodeForNccl(ncclResult_t result) {
  switch (result) {
    case ncclRemoteError:
      return ErrorCode::kPeerLost;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return ErrorCode::kInvalidArgument;
    default:
      return ErrorCode::kIo;
  }
}

Error ncclError(ncclResult_t result, const std::string& what, const std::string& where,
                const std::string& detail) {
  std::string message = what + " failed on " + where + ": " + ncclGetErrorString(result);
  if (!detail.empty()) message += " (NCCL: " + detail + ")";
  return Error(errorCodeForNccl(result), message);
}

ncclDataType_t ncclReduceType(DataType type) {
  switch (type) {
    case DataType::kUInt8:
    case DataType::kBool:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt16:
    case DataType::kUInt16:
      break;
  }
  throw makeError(ErrorCode::kInvalidArgument, "NCCL cannot reduce ", dataTypeName(type),
                  ": use int32, or the host backends");
}

ncclRedOp_t ncclReduceOp(DataType type, ReduceOp op) {
  const bool boolean = type == DataType::kBool;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return boolean ? ncclMax : ncclSum;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return boolean ? ncclMin : ncclProd;
    case ReduceOp::kAdasum:
      break;
  }
  throw makeError(ErrorCode::kInvalidArgument, "NCCL has no ", reduceOpName(op),
                  " reduction: Adasum runs in the Runtime");
}

}  // namespace ronde
