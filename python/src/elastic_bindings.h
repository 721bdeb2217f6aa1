// The elastic part of ronde._core (ronde/elastic.h).
#pragma once

#include <pybind11/pybind11.h>

namespace ronde::python {

void registerElastic(pybind11::module_& module);

}  // namespace ronde::python
