// Python numbers to C++ for the bindings that read their arguments straight from Python
// objects (the hot allreduce paths): bad arguments raise InvalidArgumentError (a ValueError).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "ronde/errors.h"
#include "ronde/types.h"

namespace ronde::python {

namespace py = pybind11;

inline int64_t toInt64(py::handle value, const char* what) {
  long long v = PyLong_AsLongLong(value.ptr());
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + " must be an integer");
  }
  return v;
}

inline double toDouble(py::handle value, const char* what) {
  double v = PyFloat_AsDouble(value.ptr());
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + " must be a number");
  }
  return v;
}

// A ReduceOp from its int value (int(ReduceOp.SUM) is 0).
inline ReduceOp toReduceOp(py::handle value) {
  const int64_t code = toInt64(value, "op");
  if (code < 0 || code > static_cast<int64_t>(ReduceOp::kAdasum))
    throw Error(ErrorCode::kInvalidArgument, "unknown reduction op code " + std::to_string(code));
  return static_cast<ReduceOp>(code);
}

}  // namespace ronde::python
