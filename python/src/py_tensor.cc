#include "py_tensor.h"

#include <mutex>

namespace ronde::python {
namespace {

std::mutex deferred_mutex;
std::vector<PyObject*> deferred_objects;  // guarded by deferred_mutex

}  // namespace

PyRef::~PyRef() {
  if (object_ == nullptr) return;
  if (Py_IsInitialized() && PyGILState_Check()) {
    Py_DECREF(object_);
    return;
  }
  std::lock_guard<std::mutex> lock(deferred_mutex);
  deferred_objects.push_back(object_);
}

void releaseDeferredObjects() {
  std::vector<PyObject*> objects;
  {
    std::lock_guard<std::mutex> lock(deferred_mutex);
    if (deferred_objects.empty()) return;
    objects.swap(deferred_objects);
  }
  for (PyObject* object : objects) Py_DECREF(object);
}

}  // namespace ronde::python
