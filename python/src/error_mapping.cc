#include "error_mapping.h"

#include <array>

#include "ronde/errors.h"

namespace ronde::python {
namespace {

constexpr int kNumCodes = static_cast<int>(ErrorCode::kInternal) + 1;

struct CodeClass {
  ErrorCode code;
  const char* name;
  PyObject* extra_base;  // a builtin the class also derives from, so plain except clauses work
};

// Filled once at import; the classes live as long as the module.
std::array<PyObject*, kNumCodes> classes{};
PyObject* base_class = nullptr;

}  // namespace

void registerErrors(pybind11::module_& module) {
  namespace py = pybind11;
  base_class = PyErr_NewExceptionWithDoc(
      "ronde._core.RondeError",
      "A ronde failure; `code` names the ronde::ErrorCode. Also known as HorovodInternalError.",
      PyExc_RuntimeError, nullptr);
  module.attr("RondeError") = py::handle(base_class);
  const CodeClass table[] = {
      {ErrorCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError},
      {ErrorCode::kMismatch, "MismatchError", nullptr},
      {ErrorCode::kTimeout, "TimeoutError", PyExc_TimeoutError},
      {ErrorCode::kPeerLost, "PeerLostError", nullptr},
      {ErrorCode::kAuth, "AuthError", nullptr},
      {ErrorCode::kConfig, "ConfigError", PyExc_ValueError},
      {ErrorCode::kIo, "IoError", PyExc_OSError},
      {ErrorCode::kAborted, "AbortedError", nullptr},
      {ErrorCode::kInternal, "InternalError", nullptr},
  };
  for (const CodeClass& entry : table) {
    std::string qualified = std::string("ronde._core.") + entry.name;
    PyObject* bases = entry.extra_base ? PyTuple_Pack(2, base_class, entry.extra_base)
                                       : PyTuple_Pack(1, base_class);
    PyObject* cls = PyErr_NewException(qualified.c_str(), bases, nullptr);
    Py_DECREF(bases);
    if (cls == nullptr) throw py::error_already_set();
    PyObject_SetAttrString(cls, "code", py::str(errorCodeName(entry.code)).ptr());
    classes[static_cast<int>(entry.code)] = cls;
    module.attr(entry.name) = py::handle(cls);
  }
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const Error& e) {
      setPythonError(e);
    }
  });
}

void setPythonError(const Error& error) {
  int index = static_cast<int>(error.code());
  PyObject* cls = index >= 0 && index < kNumCodes && classes[index] ? classes[index] : base_class;
  PyErr_SetString(cls, error.what());
}

}  // namespace ronde::python
