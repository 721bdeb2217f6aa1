#include "handle_table.h"

#include <string>
#include <utility>
#include <vector>

#include "error_mapping.h"
#include "py_convert.h"
#include "py_tensor.h"
#include "ronde/errors.h"

namespace ronde::python {
namespace {

// What synchronize(handle) waits on and returns.
struct Entry {
  std::shared_ptr<Handle> core;  // a runtime handle; null when `waitable` is used instead
  py::object waitable;           // a Python object with poll() and wait() (a group of handles)
  py::object finish;             // None, or finish(handle object) -> the result
  py::object value;              // the result when finish is None
};

// A new reference from a call or attribute read, or the pending Python error as an exception.
py::object checked(PyObject* result) {
  if (result == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(result);
}

class HandleTable {
 public:
  HandleTable(py::dict dtype_codes, py::object namer, std::shared_ptr<Runtime> (*runtime)())
      : dtype_codes_(std::move(dtype_codes)), namer_(std::move(namer)), runtime_(runtime) {}

  // An integer handle for `core` (a ronde._core.Handle, or anything with poll() and wait()):
  // synchronize returns finish(core), or `value` when finish is None.
  int64_t add(py::object core, py::object finish, py::object value) {
    Entry entry;
    if (py::isinstance<Handle>(core)) {
      entry.core = core.cast<std::shared_ptr<Handle>>();
    } else {
      entry.waitable = std::move(core);
    }
    entry.finish = std::move(finish);
    entry.value = std::move(value);
    return insert(std::move(entry));
  }

  // The in-place allreduce of a contiguous torch tensor, read here from the tensor object
  // (data_ptr, dtype, shape) instead of by the caller; None for a non-contiguous tensor,
  // which the caller stages through a contiguous copy, and for a CUDA tensor, whose request
  // must carry torch's current stream (cuda_streams.py).
  py::object allreduceInPlace(py::handle tensor, py::handle name, py::handle op,
                              py::handle prescale, py::handle postscale, py::handle process_set) {
    PyObject* t = tensor.ptr();
    if (checked(PyObject_CallMethodNoArgs(t, is_contiguous_.ptr())).ptr() != Py_True)
      return py::none();
    py::object dtype = checked(PyObject_GetAttr(t, dtype_.ptr()));
    PyObject* code = PyDict_GetItemWithError(dtype_codes_.ptr(), dtype.ptr());  // borrowed
    if (code == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      throw py::value_error("ronde does not support tensors of dtype " +
                            std::string(py::str(dtype)));
    }
    py::object set_id_object = checked(PyObject_GetAttr(process_set.ptr(), process_set_id_.ptr()));
    if (set_id_object.is_none()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "allreduce_async_: " + std::string(py::repr(process_set)) +
                      " is not registered (never added, or removed)");
    }
    const int64_t set_id = toInt64(set_id_object.ptr(), "process_set");
    Request request;
    request.kind = RequestKind::kAllreduce;
    if (PyUnicode_CheckExact(name.ptr())) {
      Py_ssize_t length = 0;
      const char* chars = PyUnicode_AsUTF8AndSize(name.ptr(), &length);
      if (chars == nullptr) throw py::error_already_set();
      request.name.reserve(sizeof("allreduce.") + static_cast<size_t>(length));
      request.name.append("allreduce.").append(chars, static_cast<size_t>(length));
    } else {  // unnamed (numbered per process set) or not a str: the frontend's own naming
      request.name = namer_(allreduce_, name, process_set).cast<std::string>();
    }
    const int64_t op_code = toInt64(op.ptr(), "op");  // a ReduceOp's value
    if (op_code < 0 || op_code > static_cast<int64_t>(ReduceOp::kAdasum))
      throw Error(ErrorCode::kInvalidArgument,
                  "unknown reduction op code " + std::to_string(op_code));
    request.op = static_cast<ReduceOp>(op_code);
    request.scaling.prescale = toDouble(prescale, "prescale");
    request.scaling.postscale = toDouble(postscale, "postscale");
    request.process_set = static_cast<int>(set_id);

    const auto address = static_cast<uintptr_t>(
        PyLong_AsUnsignedLongLong(checked(PyObject_CallMethodNoArgs(t, data_ptr_.ptr())).ptr()));
    if (PyErr_Occurred()) throw py::error_already_set();
    py::object shape = checked(PyObject_GetAttr(t, shape_.ptr()));
    if (!PyTuple_Check(shape.ptr())) throw py::type_error("tensor.shape must be a tuple");
    const Py_ssize_t rank = PyTuple_GET_SIZE(shape.ptr());
    std::vector<int64_t> dims(static_cast<size_t>(rank));
    for (Py_ssize_t i = 0; i < rank; ++i)
      dims[static_cast<size_t>(i)] = toInt64(PyTuple_GET_ITEM(shape.ptr(), i), "a dimension");
    if (checked(PyObject_GetAttr(t, is_cuda_.ptr())).ptr() == Py_True) return py::none();
    auto view = std::make_shared<PyTensor>(py::reinterpret_borrow<py::object>(tensor), address,
                                           static_cast<DataType>(toInt64(code, "dtype code")),
                                           std::move(dims), Device{});
    request.input = view;
    request.output = std::move(view);

    releaseDeferredObjects();
    Entry entry;
    // With the GIL held, as releasing and retaking it costs more than the enqueue: enqueue
    // takes only the runtime's short hand-over locks, and the runtime's thread never waits
    // for the GIL while it holds one of them (py_request.cc's allocator holds none).
    entry.core = runtime_()->enqueue(std::move(request));
    entry.finish = py::none();
    entry.value = py::reinterpret_borrow<py::object>(tensor);
    return py::int_(insert(std::move(entry)));
  }

  bool poll(py::handle handle) {
    auto it = find(handle);
    if (it == entries_.end())
      throw py::value_error("poll: unknown handle " + std::string(py::repr(handle)));
    if (it->second.core) return it->second.core->poll();  // a flag read: never blocks
    return it->second.waitable.attr("poll")().cast<bool>();
  }

  // Waits for the request behind `handle` and returns its result; None for a handle that is
  // not (or no longer) in the table. The entry is gone even if the wait raises.
  py::object synchronize(py::handle handle) {
    auto it = find(handle);
    if (it == entries_.end()) return py::none();
    Entry entry = std::move(it->second);
    entries_.erase(it);
    if (entry.core) {
      if (!entry.core->poll()) {
        py::gil_scoped_release release;
        entry.core->wait(Duration::max());
      } else {
        entry.core->wait(Duration::max());  // done: raises its error without waiting
      }
      releaseDeferredObjects();
    } else {
      entry.waitable.attr("wait")();
    }
    if (entry.finish.is_none()) return std::move(entry.value);
    return entry.finish(entry.core ? py::cast(entry.core) : entry.waitable);
  }

  // Forgets every handle (after shutdown and init); handle numbers keep growing, so an old
  // handle never names a new request.
  void clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }

 private:
  using Entries = std::unordered_map<int64_t, Entry>;

  Entries::iterator find(py::handle handle) {
    if (!PyLong_Check(handle.ptr())) return entries_.end();
    long long id = PyLong_AsLongLong(handle.ptr());
    if (id == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return entries_.end();
    }
    return entries_.find(id);
  }

  int64_t insert(Entry entry) {
    const int64_t id = next_id_++;
    entries_.emplace(id, std::move(entry));
    return id;
  }

  py::dict dtype_codes_;  // torch dtype -> ronde::DataType code
  py::object namer_;      // namer(kind, name, process_set) -> the request's full name
  std::shared_ptr<Runtime> (*runtime_)();
  Entries entries_;
  int64_t next_id_ = 1;
  // Attribute names, made once.
  py::str is_contiguous_{"is_contiguous"};
  py::str dtype_{"dtype"};
  py::str data_ptr_{"data_ptr"};
  py::str shape_{"shape"};
  py::str is_cuda_{"is_cuda"};
  py::str process_set_id_{"process_set_id"};
  py::str allreduce_{"allreduce"};
};

// The table as a plain CPython object rather than a pybind11 class: allreduce_ and
// synchronize run once per gradient, and pybind11's dispatcher (its argument vectors, the
// type lookup of `self`) cost more than their bodies (callgrind: about 1,400 instructions per
// call). `self` is this struct; the methods take their arguments straight from the vector.
struct TableObject {
  PyObject ob_base;    // PyObject_HEAD, spelled out (the macro defeats the formatter)
  HandleTable* table;  // owned; null only if construction failed
};

HandleTable& tableOf(PyObject* self) {
  HandleTable* table = reinterpret_cast<TableObject*>(self)->table;
  if (table == nullptr) throw py::type_error("HandleTable: not constructed");
  return *table;
}

// Runs `body` and turns what it throws into the pending Python error, as pybind11 would.
template <typename Body>
PyObject* guarded(Body&& body) noexcept {
  try {
    return body().release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const Error& e) {
    setPythonError(e);
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

void checkArguments(const char* method, Py_ssize_t given, Py_ssize_t least, Py_ssize_t most) {
  if (given >= least && given <= most) return;
  throw py::type_error(std::string("HandleTable.") + method + "() takes " +
                       (least == most ? std::to_string(least)
                                      : std::to_string(least) + " to " + std::to_string(most)) +
                       " arguments (" + std::to_string(given) + " given)");
}

PyObject* tableAdd(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  return guarded([&] {
    checkArguments("add", n, 2, 3);
    return py::int_(tableOf(self).add(
        py::reinterpret_borrow<py::object>(args[0]), py::reinterpret_borrow<py::object>(args[1]),
        n > 2 ? py::reinterpret_borrow<py::object>(args[2]) : py::object(py::none())));
  });
}

PyObject* tableAllreduce(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  return guarded([&] {
    checkArguments("allreduce_", n, 6, 6);
    return tableOf(self).allreduceInPlace(args[0], args[1], args[2], args[3], args[4], args[5]);
  });
}

PyObject* tablePoll(PyObject* self, PyObject* handle) {
  return guarded([&] { return py::bool_(tableOf(self).poll(handle)); });
}

PyObject* tableSynchronize(PyObject* self, PyObject* handle) {
  return guarded([&] { return tableOf(self).synchronize(handle); });
}

PyObject* tableClear(PyObject* self, PyObject*) {
  return guarded([&] {
    tableOf(self).clear();
    return py::object(py::none());
  });
}

Py_ssize_t tableLength(PyObject* self) {
  HandleTable* table = reinterpret_cast<TableObject*>(self)->table;
  return table ? static_cast<Py_ssize_t>(table->size()) : 0;
}

void tableDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  delete reinterpret_cast<TableObject*>(self)->table;
  type->tp_free(self);
  Py_DECREF(type);  // instances of a heap type hold a reference to it
}

PyMethodDef table_methods[] = {
    {"add", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(tableAdd)), METH_FASTCALL,
     "add(core, finish, value=None) -> handle: `core` is a ronde._core.Handle or anything with "
     "poll() and wait(); synchronize returns finish(core), or `value` when finish is None"},
    {"allreduce_", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(tableAllreduce)),
     METH_FASTCALL,
     "allreduce_(tensor, name, op, prescale, postscale, process_set) -> handle, or None for a "
     "non-contiguous or CUDA tensor (op: the int value of a ReduceOp)"},
    {"poll", tablePoll, METH_O, "poll(handle) -> True once done; never blocks"},
    {"synchronize", tableSynchronize, METH_O,
     "synchronize(handle) -> the result; None for an unknown handle"},
    {"clear", tableClear, METH_NOARGS, "forgets every handle"},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot table_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(tableDealloc)},
    {Py_tp_methods, table_methods},
    {Py_mp_length, reinterpret_cast<void*>(tableLength)},
    {Py_tp_doc, const_cast<char*>("Integer handles for async requests, and the in-place "
                                  "allreduce of a torch tensor in one call.")},
    {0, nullptr}};

PyType_Spec table_spec = {"ronde._core.HandleTable", sizeof(TableObject), 0,
                          Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, table_slots};

}  // namespace

void registerHandleTable(py::module_& m, std::shared_ptr<Runtime> (*runtime)()) {
  py::object type = py::reinterpret_steal<py::object>(PyType_FromSpec(&table_spec));
  if (!type) throw py::error_already_set();
  m.attr("_HandleTableType") = type;
  // Made through this factory, which hands the table the module's runtime.
  m.def(
      "HandleTable",
      [type, runtime](py::dict dtype_codes, py::object namer) {
        auto* cls = reinterpret_cast<PyTypeObject*>(type.ptr());
        py::object made = py::reinterpret_steal<py::object>(cls->tp_alloc(cls, 0));
        if (!made) throw py::error_already_set();
        reinterpret_cast<TableObject*>(made.ptr())->table =
            new HandleTable(std::move(dtype_codes), std::move(namer), runtime);
        return made;
      },
      py::arg("dtype_codes"), py::arg("namer"),
      "A new handle table. dtype_codes: {torch dtype: DataType code}; namer(kind, name, "
      "process_set) -> the full request name, for names that are not a str (None: numbered)");
}

}  // namespace ronde::python
