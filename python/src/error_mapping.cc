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
  bool internal;         // a HorovodInternalError: the runtime failed, not the caller
};

// Filled once at import; the classes live as long as the module.
std::array<PyObject*, kNumCodes> classes{};
PyObject* base_class = nullptr;

}  // namespace

void registerErrors(pybind11::module_& module) {
  namespace py = pybind11;
  base_class = PyErr_NewExceptionWithDoc(
      "ronde._core.RondeError", "A ronde failure; `code` names the ronde::ErrorCode.",
      PyExc_RuntimeError, nullptr);
  module.attr("RondeError") = py::handle(base_class);
  // Horovod raises HorovodInternalError for every collective that fails once submitted (its
  // synchronize wraps the runtime's error): a peer lost, the communicator aborted, a wait timed
  // out, and the ranks disagreeing about a tensor. An elastic script catches it to restore its
  // state and re-form. A bad argument refused at submission is the script's own error and stays
  // outside it (ValueError), as in Horovod.
  PyObject* internal_class = PyErr_NewExceptionWithDoc(
      "ronde._core.HorovodInternalError",
      "A submitted collective failed: a peer was lost, the communicator was aborted, a wait "
      "timed out, or the ranks disagreed about it. Horovod's name; elastic training "
      "recovers from it (except from a disagreement, which a retry repeats).",
      base_class, nullptr);
  module.attr("HorovodInternalError") = py::handle(internal_class);
  const CodeClass table[] = {
      {ErrorCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError, false},
      {ErrorCode::kMismatch, "MismatchError", nullptr, true},
      {ErrorCode::kTimeout, "TimeoutError", PyExc_TimeoutError, true},
      {ErrorCode::kPeerLost, "PeerLostError", nullptr, true},
      {ErrorCode::kAuth, "AuthError", nullptr, false},
      {ErrorCode::kConfig, "ConfigError", PyExc_ValueError, false},
      {ErrorCode::kIo, "IoError", PyExc_OSError, false},
      {ErrorCode::kAborted, "AbortedError", nullptr, true},
      {ErrorCode::kInternal, "InternalError", nullptr, false},
  };
  for (const CodeClass& entry : table) {
    std::string qualified = std::string("ronde._core.") + entry.name;
    PyObject* base = entry.internal ? internal_class : base_class;
    PyObject* bases = entry.extra_base ? PyTuple_Pack(2, base, entry.extra_base)
                                       : PyTuple_Pack(1, base);
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
