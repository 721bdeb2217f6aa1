#include "tensor_reader.h"

#include <utility>
#include <vector>

#include "py_convert.h"
#include "ronde/errors.h"

namespace ronde::python {

void TensorReader::refuse(PyObject* tensor, const char* what, const py::str& attribute) const {
  py::object value = checked(PyObject_GetAttr(tensor, attribute.ptr()));
  // The rank as ronde.torch's typed-request paths name it; the reader knows no runtime, and
  // this runs once, on a refusal.
  std::string rank = "?";
  try {
    rank = std::string(py::str(py::module_::import("ronde._core").attr("rank")()));
  } catch (const std::exception&) {
    PyErr_Clear();
  }
  throw makeError(ErrorCode::kInvalidArgument, "ronde does not support tensors ", what,
                  std::string(py::str(value)),
                  " (only dense tensors in host memory or on a CUDA device); rank ", rank);
}

DataType TensorReader::dtypeOf(PyObject* tensor) const {
  py::object dtype = checked(PyObject_GetAttr(tensor, dtype_.ptr()));
  PyObject* code = PyDict_GetItemWithError(dtype_codes_.ptr(), dtype.ptr());  // borrowed
  if (code == nullptr) {
    if (PyErr_Occurred()) throw py::error_already_set();
    throw py::value_error("ronde does not support tensors of dtype " + std::string(py::str(dtype)));
  }
  return static_cast<DataType>(toInt64(code, "dtype code"));
}

TensorReader::Read TensorReader::read(py::handle tensor, bool contiguous_copy) const {
  py::object owner = py::reinterpret_borrow<py::object>(tensor);
  if (checked(PyObject_CallMethodNoArgs(owner.ptr(), is_contiguous_.ptr())).ptr() != Py_True) {
    // A sparse COO tensor is never contiguous: asked here, the check costs dense ones nothing.
    if (checked(PyObject_GetAttr(owner.ptr(), is_sparse_.ptr())).ptr() == Py_True)
      refuse(owner.ptr(), "of layout ", layout_);
    if (!contiguous_copy) return {};
    owner = checked(PyObject_CallMethodNoArgs(owner.ptr(), contiguous_.ptr()));
  }
  PyObject* t = owner.ptr();
  const DataType type = dtypeOf(t);
  if (checked(PyObject_GetAttr(t, is_cuda_.ptr())).ptr() == Py_True) return {nullptr, true};
  // Anything else must be host memory: the runtime would read a meta tensor's null address or
  // another device's memory (mps, xpu) as host memory.
  if (checked(PyObject_GetAttr(t, is_cpu_.ptr())).ptr() != Py_True)
    refuse(t, "on device ", device_);
  PyObject* pointer = PyObject_CallMethodNoArgs(t, data_ptr_.ptr());
  if (pointer == nullptr) {
    // A tensor without storage (sparse, which torch 1.13 calls contiguous; mkldnn) has no
    // address: name its layout rather than pass on torch's words.
    py::error_already_set error;
    py::object layout = checked(PyObject_GetAttr(t, layout_.ptr()));
    if (std::string(py::str(layout)) != "torch.strided") refuse(t, "of layout ", layout_);
    throw error;
  }
  const auto address = static_cast<uintptr_t>(
      PyLong_AsUnsignedLongLong(py::reinterpret_steal<py::object>(pointer).ptr()));
  if (PyErr_Occurred()) throw py::error_already_set();
  py::object shape = checked(PyObject_GetAttr(t, shape_.ptr()));
  if (!PyTuple_Check(shape.ptr())) throw py::type_error("tensor.shape must be a tuple");
  const Py_ssize_t rank = PyTuple_GET_SIZE(shape.ptr());
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (Py_ssize_t i = 0; i < rank; ++i)
    dims[static_cast<size_t>(i)] = toInt64(PyTuple_GET_ITEM(shape.ptr(), i), "a dimension");
  return {std::make_shared<PyTensor>(std::move(owner), address, type, std::move(dims), Device{}),
          false};
}

}  // namespace ronde::python
