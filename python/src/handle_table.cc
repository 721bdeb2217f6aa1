#include "handle_table.h"

#include <string>
#include <utility>
#include <vector>

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
    std::shared_ptr<Runtime> runtime = runtime_();
    Entry entry;
    {
      py::gil_scoped_release release;
      entry.core = runtime->enqueue(std::move(request));
    }
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

}  // namespace

void registerHandleTable(py::module_& m, std::shared_ptr<Runtime> (*runtime)()) {
  py::class_<HandleTable>(m, "HandleTable",
                          "Integer handles for async requests, and the in-place allreduce of a "
                          "torch tensor in one call.")
      .def(py::init([runtime](py::dict dtype_codes, py::object namer) {
             return HandleTable(std::move(dtype_codes), std::move(namer), runtime);
           }),
           py::arg("dtype_codes"), py::arg("namer"),
           "dtype_codes: {torch dtype: DataType code}; namer(kind, name, process_set) -> the "
           "full request name, for names that are not a str (None: numbered)")
      .def("add", &HandleTable::add, py::arg("core"), py::arg("finish"),
           py::arg("value") = py::none())
      .def("allreduce_", &HandleTable::allreduceInPlace,
           "allreduce_(tensor, name, op, prescale, postscale, process_set) -> handle, or None "
           "for a non-contiguous tensor (op: the int value of a ReduceOp)")
      .def("poll", &HandleTable::poll)
      .def("synchronize", &HandleTable::synchronize)
      .def("clear", &HandleTable::clear)
      .def("__len__", &HandleTable::size);
}

}  // namespace ronde::python
