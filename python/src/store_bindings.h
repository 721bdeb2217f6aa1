// The rendezvous store server for Python drivers (ronde.spark, ronde.ray) that host a job's
// rendezvous themselves, as the `ronde run` launcher does.
#pragma once

#include <pybind11/pybind11.h>

namespace ronde::python {

// Adds ronde._core.TcpStoreServer to `module`.
void registerStore(pybind11::module_& module);

}  // namespace ronde::python
