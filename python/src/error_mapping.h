// The one place where ronde::ErrorCode meets Python exceptions.
#pragma once

#include <pybind11/pybind11.h>

#include "ronde/errors.h"

namespace ronde::python {

// Adds RondeError (a RuntimeError) and one subclass per ErrorCode to `module`, and
// translates every ronde::Error crossing into Python to the class of its code.
void registerErrors(pybind11::module_& module);

// Sets the Python error for `error`, of its code's class: for functions that bypass
// pybind11's dispatcher (and so its translators).
void setPythonError(const Error& error);

}  // namespace ronde::python
