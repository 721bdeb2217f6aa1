// TensorFlow's tensors seen through ronde::Tensor, and ronde's errors as TensorFlow statuses:
// what the kernels of ronde.tensorflow need from both sides. Built against the headers of the
// TensorFlow that loads the library (tf.sysconfig), never into libronde.
#pragma once

#include <exception>
#include <vector>

#include "ronde/errors.h"
#include "ronde/runtime.h"
#include "tensorflow/core/framework/tensor.h"

namespace ronde::tensorflow_ops {

// ronde's type for a TensorFlow dtype the kernels are registered for; kInvalidArgument else.
DataType rondeType(::tensorflow::DataType type);

// A request's view of a TensorFlow tensor. It holds a reference to the tensor's buffer
// (TensorFlow counts them), so the memory outlives the request whatever the kernel's caller
// does with its own reference.
class TfTensor final : public Tensor {
 public:
  explicit TfTensor(const ::tensorflow::Tensor& tensor);
  // With another shape of the same element count (a 0-d tensor gathered as one row).
  TfTensor(const ::tensorflow::Tensor& tensor, std::vector<int64_t> shape);

  DataType dtype() const override { return type_; }
  std::vector<int64_t> shape() const override { return shape_; }
  size_t numel() const override { return numel_; }
  Device device() const override { return {}; }
  void* data() override;

 private:
  ::tensorflow::Tensor tensor_;
  DataType type_;
  std::vector<int64_t> shape_;
  size_t numel_;
};

// The status for a ronde failure. The code follows the failure (a mismatch is
// FAILED_PRECONDITION, a lost peer ABORTED, a timeout DEADLINE_EXCEEDED, ...), and the message
// starts with "ronde <code name>: " so that ronde.tensorflow can raise ronde's own exception
// class for it in eager mode.
absl::Status statusOf(const Error& error);
// The same for whatever `error` holds (a non-ronde exception is INTERNAL).
absl::Status statusOf(const std::exception_ptr& error);

}  // namespace ronde::tensorflow_ops
