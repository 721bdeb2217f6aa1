#include "ronde/runtime.h"

namespace ronde {

size_t Tensor::numel() const {
  size_t n = 1;
  for (int64_t d : shape()) n *= static_cast<size_t>(d);
  return n;
}

size_t Tensor::bytes() const { return numel() * dataTypeSize(dtype()); }

HostTensor::HostTensor(DataType type, std::vector<int64_t> shape)
    : type_(type), shape_(std::move(shape)) {
  for (int64_t d : shape_) {
    if (d < 0) throw makeError(ErrorCode::kInvalidArgument, "negative dimension in a tensor shape");
    numel_ *= static_cast<size_t>(d);
  }
  storage_.resize(numel_ * dataTypeSize(type_));
}

}  // namespace ronde
