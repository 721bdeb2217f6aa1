// Python objects seen from the runtime's threads, and a Python-owned tensor seen through
// ronde::Tensor. The frontend passes the raw facts (address, dtype code, shape, device), so
// this module never includes torch headers; the Python object is held so its memory
// outlives the request.
//
// Threads: the runtime may drop its last reference on its own thread, which must never wait
// for the GIL (the GIL holder may be waiting on the runtime), so a release without the GIL
// is deferred to a queue that Python threads drain (releaseDeferredObjects).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "ronde/runtime.h"

namespace ronde::python {

namespace py = pybind11;

// A strong reference to a Python object that may be destroyed on any thread.
class PyRef {
 public:
  explicit PyRef(py::object object) : object_(object.release().ptr()) {}
  ~PyRef();
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  // A new reference; the caller holds the GIL.
  py::object get() const { return py::reinterpret_borrow<py::object>(object_); }

 private:
  PyObject* object_;
};

class PyTensor : public Tensor {
 public:
  // `owner` is the Python object (a torch.Tensor); the caller holds the GIL.
  PyTensor(py::object owner, uintptr_t address, DataType type, std::vector<int64_t> shape,
           Device device)
      : owner_(std::move(owner)),
        address_(address),
        type_(type),
        shape_(std::move(shape)),
        device_(device) {
    for (int64_t d : shape_) numel_ *= static_cast<size_t>(d);
  }

  DataType dtype() const override { return type_; }
  std::vector<int64_t> shape() const override { return shape_; }
  size_t numel() const override { return numel_; }
  Device device() const override { return device_; }
  void* data() override { return reinterpret_cast<void*>(address_); }

  // The Python object; the caller holds the GIL.
  py::object owner() const { return owner_.get(); }

 private:
  PyRef owner_;
  uintptr_t address_;
  DataType type_;
  std::vector<int64_t> shape_;
  size_t numel_ = 1;
  Device device_;
};

// Drops the references deferred by PyRef destructors that ran without the GIL.
// Call with the GIL held.
void releaseDeferredObjects();

}  // namespace ronde::python
