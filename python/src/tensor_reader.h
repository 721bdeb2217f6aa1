// Reads what a request needs of a framework tensor (dtype, address, shape, device, whether it
// is contiguous) through the tensor object's own Python attributes, so that the submitting
// calls that take a torch.Tensor build their requests in C++ without including torch's
// headers. Used with the GIL held; one reader per handle table.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "py_tensor.h"
#include "ronde/runtime.h"

namespace ronde::python {

namespace py = pybind11;

// A new reference from a call or attribute read, or the pending Python error as an exception.
inline py::object checked(PyObject* result) {
  if (result == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(result);
}

class TensorReader {
 public:
  // dtype_codes: {framework dtype: ronde::DataType code}.
  explicit TensorReader(py::dict dtype_codes) : dtype_codes_(std::move(dtype_codes)) {}

  // What reading one tensor found. `view` is null for a tensor the caller must hand to the
  // general (Python) path: a CUDA tensor, whose request carries the framework's current
  // stream, or one that is not contiguous where `contiguous_copy` is false.
  struct Read {
    std::shared_ptr<PyTensor> view;
    bool cuda = false;
  };

  // Reads `tensor`. With `contiguous_copy`, a non-contiguous tensor is replaced by its
  // contiguous() copy, which the view holds. An unsupported dtype raises ValueError naming it;
  // a tensor neither in host memory nor on CUDA (meta, mps, xpu), or a sparse one, raises
  // InvalidArgumentError (a ValueError) naming its device or layout.
  Read read(py::handle tensor, bool contiguous_copy) const;

  // The ronde::DataType of `tensor`; raises ValueError for one ronde does not support.
  DataType dtypeOf(PyObject* tensor) const;

 private:
  // Throws InvalidArgumentError for a tensor ronde cannot read, naming its `attribute`
  // (device or layout).
  [[noreturn]] void refuse(PyObject* tensor, const char* what, const py::str& attribute) const;

  py::dict dtype_codes_;
  // Attribute names, made once.
  py::str is_contiguous_{"is_contiguous"};
  py::str contiguous_{"contiguous"};
  py::str dtype_{"dtype"};
  py::str data_ptr_{"data_ptr"};
  py::str shape_{"shape"};
  py::str is_cuda_{"is_cuda"};
  py::str is_cpu_{"is_cpu"};
  py::str is_sparse_{"is_sparse"};
  py::str device_{"device"};
  py::str layout_{"layout"};
};

}  // namespace ronde::python
