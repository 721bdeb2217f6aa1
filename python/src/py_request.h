// The typed request of ronde._core: Python builds a ronde::Request directly (enums for kinds,
// ops and dtypes, one attribute per field), the same object for every frontend, instead of
// a positional tuple that every caller had to lay out in the right order.
#pragma once

#include <pybind11/pybind11.h>

namespace ronde::python {

namespace py = pybind11;

// Adds RequestKind, ReduceOp, DataType and Request to `m`.
void registerRequestTypes(py::module_& m);

}  // namespace ronde::python
