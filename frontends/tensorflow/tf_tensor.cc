#include "tf_tensor.h"

#include <string>
#include <utility>

namespace ronde::tensorflow_ops {
namespace tf = ::tensorflow;

DataType rondeType(tf::DataType type) {
  switch (type) {
    case tf::DT_UINT8:
      return DataType::kUInt8;
    case tf::DT_INT8:
      return DataType::kInt8;
    case tf::DT_INT16:
      return DataType::kInt16;
    case tf::DT_UINT16:
      return DataType::kUInt16;
    case tf::DT_INT32:
      return DataType::kInt32;
    case tf::DT_INT64:
      return DataType::kInt64;
    case tf::DT_HALF:
      return DataType::kFloat16;
    case tf::DT_BFLOAT16:
      return DataType::kBFloat16;
    case tf::DT_FLOAT:
      return DataType::kFloat32;
    case tf::DT_DOUBLE:
      return DataType::kFloat64;
    case tf::DT_BOOL:
      return DataType::kBool;
    default:
      throw Error(ErrorCode::kInvalidArgument,
                  "ronde does not support tensors of dtype " + tf::DataTypeString(type));
  }
}

namespace {
std::vector<int64_t> dimsOf(const tf::Tensor& tensor) {
  const auto dims = tensor.shape().dim_sizes();  // a copy: both ends from this one
  return std::vector<int64_t>(dims.begin(), dims.end());
}
}  // namespace

TfTensor::TfTensor(const tf::Tensor& tensor) : TfTensor(tensor, dimsOf(tensor)) {}

TfTensor::TfTensor(const tf::Tensor& tensor, std::vector<int64_t> shape)
    : tensor_(tensor),
      type_(rondeType(tensor.dtype())),
      shape_(std::move(shape)),
      numel_(static_cast<size_t>(tensor.NumElements())) {}

void* TfTensor::data() {
  // The buffer is writable: outputs are allocated for the kernel, and an input is only ever
  // written where the kernel forwarded it as its output.
  return const_cast<char*>(tensor_.tensor_data().data());
}

absl::Status statusOf(const Error& error) {
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (error.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kConfig:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case ErrorCode::kMismatch:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    case ErrorCode::kTimeout:
      code = absl::StatusCode::kDeadlineExceeded;
      break;
    case ErrorCode::kPeerLost:
    case ErrorCode::kAborted:
      code = absl::StatusCode::kAborted;
      break;
    case ErrorCode::kAuth:
      code = absl::StatusCode::kPermissionDenied;
      break;
    case ErrorCode::kIo:
      code = absl::StatusCode::kUnavailable;
      break;
    case ErrorCode::kInternal:
      code = absl::StatusCode::kInternal;
      break;
  }
  return absl::Status(code,
                      std::string("ronde ") + errorCodeName(error.code()) + ": " + error.what());
}

absl::Status statusOf(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return statusOf(e);
  } catch (const std::exception& e) {
    return absl::Status(absl::StatusCode::kInternal, std::string("ronde Internal: ") + e.what());
  } catch (...) {
    return absl::Status(absl::StatusCode::kInternal, "ronde Internal: an unknown failure");
  }
}

}  // namespace ronde::tensorflow_ops
