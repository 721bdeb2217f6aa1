// The integer handles of a Python frontend (Horovod's API hands out ints) and the in-place
// allreduce of every gradient hook, both in C++: one call per submission and one per
// synchronize, with no Python dict, tuple or Handle wrapper made per request. The table
// lives in the frontend's module (ronde.torch keeps one), not in this extension, and is only
// touched with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "ronde/runtime.h"

namespace ronde::python {

namespace py = pybind11;

// Adds HandleTable to `m`; `runtime` is the module's runtime (throws when not initialized).
void registerHandleTable(py::module_& m, std::shared_ptr<Runtime> (*runtime)());

}  // namespace ronde::python
