// The integer handles of a Python frontend (Horovod's API hands out ints) and the submitting
// calls that take host torch tensors (the in-place allreduce of every gradient hook, single
// allgathers and reducescatters, and grouped allreduces, allgathers and reducescatters), all
// in C++: one call per submission and one per synchronize, with no Python dict, tuple,
// Request or Handle wrapper made per tensor, and outputs adopted here. The table lives in the
// frontend's module (ronde.torch keeps one), not in this extension, and is only touched with
// the GIL held.
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
