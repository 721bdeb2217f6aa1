#include "handle_table.h"

#include <string>
#include <utility>
#include <vector>

#include "error_mapping.h"
#include "host_output.h"
#include "py_convert.h"
#include "py_tensor.h"
#include "ronde/errors.h"
#include "tensor_reader.h"

namespace ronde::python {
namespace {

// What synchronize(handle) waits on, and how it makes the result.
struct Entry {
  enum class Result : uint8_t {
    kValue,    // `value`
    kFinish,   // finish(the handle object)
    kOutput,   // the request's output, adopted by the table's `adopt`
    kOutputs,  // a list of the group members' outputs, each adopted
  };
  std::shared_ptr<Handle> core;                  // a runtime handle, or
  std::vector<std::shared_ptr<Handle>> members;  // a group's runtime handles, or
  py::object waitable;  // a Python object with poll() and wait() (a group made in Python)
  Result result = Result::kValue;
  py::object finish;
  py::object value;
};

class HandleTable {
 public:
  HandleTable(py::dict dtype_codes, py::object namer, py::object adopt,
              std::shared_ptr<Runtime> (*runtime)())
      : reader_(std::move(dtype_codes)),
        namer_(std::move(namer)),
        adopt_(std::move(adopt)),
        runtime_(runtime) {}

  // An integer handle for `core` (a ronde._core.Handle, or anything with poll() and wait()):
  // synchronize returns finish(core), or `value` when finish is None.
  int64_t add(py::object core, py::object finish, py::object value) {
    Entry entry;
    if (py::isinstance<Handle>(core)) {
      entry.core = core.cast<std::shared_ptr<Handle>>();
    } else {
      entry.waitable = std::move(core);
    }
    entry.result = finish.is_none() ? Entry::Result::kValue : Entry::Result::kFinish;
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
    TensorReader::Read read = reader_.read(tensor, /*contiguous_copy=*/false);
    if (!read.view) return py::none();
    Request request =
        requestOf(RequestKind::kAllreduce, "allreduce", name, op, prescale, postscale, process_set);
    request.input = read.view;
    request.output = std::move(read.view);
    Entry entry;
    entry.core = enqueue(std::move(request));
    entry.value = py::reinterpret_borrow<py::object>(tensor);
    return py::int_(insert(std::move(entry)));
  }

  // The allgather or reducescatter of one host tensor (a non-contiguous one through its
  // contiguous copy), its output made by ronde (HOST_OUTPUT) and adopted by synchronize. None
  // for a CUDA or bool tensor, whose output comes from the framework's allocator.
  py::object submitOne(py::handle kind, py::handle tensor, py::handle name, py::handle op,
                       py::handle prescale, py::handle postscale, py::handle process_set) {
    const RequestKind request_kind = gatheringKind(kind);
    TensorReader::Read read = reader_.read(tensor, /*contiguous_copy=*/true);
    if (!read.view || read.view->dtype() == DataType::kBool) return py::none();
    Request request =
        requestOf(request_kind, kindName(request_kind), name, op, prescale, postscale, process_set);
    request.allocate_output = hostOutputAllocator(read.view->dtype());
    request.input = std::move(read.view);
    Entry entry;
    entry.core = enqueue(std::move(request));
    entry.result = Entry::Result::kOutput;
    return py::int_(insert(std::move(entry)));
  }

  // A group of host tensors of one kind as one negotiated request group, members named
  // "<group_name>.<i>": allreduce in place (outputs None) or into `outputs`, allgather or
  // reducescatter into outputs ronde makes. synchronize returns the list of results. None,
  // with nothing submitted, where some tensor needs the general path: a CUDA tensor, a
  // non-contiguous one to reduce in place, a bool one to gather or scatter.
  py::object submitGroup(py::handle kind, py::handle tensors, py::handle outputs,
                         py::handle group_name, py::handle op, py::handle prescale,
                         py::handle postscale, py::handle process_set) {
    const auto kind_code = toInt64(kind.ptr(), "kind");
    const bool reducing = kind_code == static_cast<int64_t>(RequestKind::kAllreduce);
    const RequestKind request_kind = reducing ? RequestKind::kAllreduce : gatheringKind(kind);
    py::object inputs = sequence(tensors, "tensors");
    const Py_ssize_t count = PySequence_Fast_GET_SIZE(inputs.ptr());
    py::object targets;
    if (!outputs.is_none()) {
      if (!reducing) throw py::value_error("only an allreduce group takes outputs");
      targets = sequence(outputs, "outputs");
      if (PySequence_Fast_GET_SIZE(targets.ptr()) != count)
        throw py::value_error("a group needs as many outputs as tensors");
    }
    const bool in_place = reducing && !targets;
    std::vector<std::shared_ptr<PyTensor>> views(static_cast<size_t>(count));
    std::vector<std::shared_ptr<PyTensor>> output_views(targets ? views.size() : 0);
    for (Py_ssize_t i = 0; i < count; ++i) {
      TensorReader::Read read =
          reader_.read(PySequence_Fast_GET_ITEM(inputs.ptr(), i), /*contiguous_copy=*/!in_place);
      if (!read.view || (!reducing && read.view->dtype() == DataType::kBool)) return py::none();
      views[static_cast<size_t>(i)] = std::move(read.view);
      if (!targets) continue;
      read = reader_.read(PySequence_Fast_GET_ITEM(targets.ptr(), i), /*contiguous_copy=*/false);
      if (!read.view) return py::none();
      output_views[static_cast<size_t>(i)] = std::move(read.view);
    }
    if (!PyUnicode_Check(group_name.ptr())) throw py::type_error("a group's name must be a str");
    const std::string base = py::reinterpret_borrow<py::str>(group_name);
    Request common =
        requestOf(request_kind, nullptr, py::none(), op, prescale, postscale, process_set);
    std::vector<Request> requests(views.size());
    for (size_t i = 0; i < views.size(); ++i) {
      Request& request = requests[i];
      request.kind = common.kind;
      request.op = common.op;
      request.scaling = common.scaling;
      request.process_set = common.process_set;
      request.name.reserve(base.size() + 8);
      request.name.append(base).append(".").append(std::to_string(i));
      if (reducing) {
        request.output = in_place ? views[i] : std::move(output_views[i]);
      } else {
        request.allocate_output = hostOutputAllocator(views[i]->dtype());
      }
      request.input = std::move(views[i]);
    }
    Entry entry;
    releaseDeferredObjects();
    entry.members = runtime_()->enqueueGroup(std::move(requests));  // with the GIL: see enqueue
    if (reducing) {
      entry.value = targets ? py::reinterpret_borrow<py::object>(outputs)
                            : py::object(checked(PySequence_List(inputs.ptr())));
    } else {
      entry.result = Entry::Result::kOutputs;
    }
    return py::int_(insert(std::move(entry)));
  }

  bool poll(py::handle handle) {
    auto it = find(handle);
    if (it == entries_.end())
      throw py::value_error("poll: unknown handle " + std::string(py::repr(handle)));
    const Entry& entry = it->second;
    if (entry.core) return entry.core->poll();  // a flag read: never blocks
    if (entry.waitable) return entry.waitable.attr("poll")().cast<bool>();
    for (const auto& member : entry.members)
      if (!member->poll()) return false;
    return true;
  }

  // Waits for the request behind `handle` and returns its result; None for a handle that is
  // not (or no longer) in the table. The entry is gone even if the wait raises; a group's
  // wait raises the first failed member's error, in the group's order.
  py::object synchronize(py::handle handle) {
    auto it = find(handle);
    if (it == entries_.end()) return py::none();
    Entry entry = std::move(it->second);
    entries_.erase(it);
    if (entry.waitable) {
      entry.waitable.attr("wait")();
    } else {
      // One handle or a group's, without a container made per call.
      const std::shared_ptr<Handle>* first = entry.core ? &entry.core : entry.members.data();
      const std::shared_ptr<Handle>* last = first + (entry.core ? 1 : entry.members.size());
      bool done = true;
      for (auto* h = first; done && h != last; ++h) done = (*h)->poll();
      if (done) {
        for (auto* h = first; h != last; ++h) (*h)->wait(Duration::max());  // raises at once
      } else {
        py::gil_scoped_release release;
        for (auto* h = first; h != last; ++h) (*h)->wait(Duration::max());
      }
      releaseDeferredObjects();
    }
    switch (entry.result) {
      case Entry::Result::kValue:
        return std::move(entry.value);
      case Entry::Result::kFinish:
        return entry.finish(entry.core ? py::cast(entry.core) : entry.waitable);
      case Entry::Result::kOutput:
        return adopt(entry.core->output());
      case Entry::Result::kOutputs: {
        py::list outputs(entry.members.size());
        for (size_t i = 0; i < entry.members.size(); ++i)
          outputs[i] = adopt(entry.members[i]->output());
        return std::move(outputs);
      }
    }
    return py::none();
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

  // With the GIL held, as releasing and retaking it costs more than the enqueue: enqueue
  // takes only the runtime's short hand-over locks, and the runtime's thread never waits for
  // the GIL while it holds one of them (py_request.cc's allocator holds none).
  std::shared_ptr<Handle> enqueue(Request request) {
    releaseDeferredObjects();
    return runtime_()->enqueue(std::move(request));
  }

  // A request of `kind` without its tensors: its name ("<prefix>.<name>" for a str name, the
  // frontend's namer for any other; none when prefix is null), op, scaling and process set,
  // each checked.
  Request requestOf(RequestKind kind, const char* prefix, py::handle name, py::handle op,
                    py::handle prescale, py::handle postscale, py::handle process_set) {
    py::object set_id_object = checked(PyObject_GetAttr(process_set.ptr(), process_set_id_.ptr()));
    if (set_id_object.is_none()) {
      throw Error(ErrorCode::kInvalidArgument, std::string(prefix ? prefix : "a group") + ": " +
                                                   std::string(py::repr(process_set)) +
                                                   " is not registered (never added, or removed)");
    }
    Request request;
    request.kind = kind;
    request.process_set = static_cast<int>(toInt64(set_id_object.ptr(), "process_set"));
    if (prefix != nullptr && PyUnicode_CheckExact(name.ptr())) {
      Py_ssize_t length = 0;
      const char* chars = PyUnicode_AsUTF8AndSize(name.ptr(), &length);
      if (chars == nullptr) throw py::error_already_set();
      request.name.reserve(std::char_traits<char>::length(prefix) + 1 +
                           static_cast<size_t>(length));
      request.name.append(prefix).append(".").append(chars, static_cast<size_t>(length));
    } else if (prefix != nullptr) {  // unnamed (numbered per process set) or not a str
      request.name = namer_(py::str(prefix), name, process_set).cast<std::string>();
    }
    request.op = toReduceOp(op);
    request.scaling.prescale = toDouble(prescale, "prescale");
    request.scaling.postscale = toDouble(postscale, "postscale");
    return request;
  }

  // ALLGATHER or REDUCESCATTER from a RequestKind's int value; anything else is refused.
  static RequestKind gatheringKind(py::handle kind) {
    const int64_t code = toInt64(kind.ptr(), "kind");
    if (code == static_cast<int64_t>(RequestKind::kAllgather)) return RequestKind::kAllgather;
    if (code == static_cast<int64_t>(RequestKind::kReducescatter))
      return RequestKind::kReducescatter;
    throw Error(ErrorCode::kInvalidArgument,
                "this call takes an allgather or a reducescatter, not request kind " +
                    std::to_string(code));
  }

  static const char* kindName(RequestKind kind) {
    return kind == RequestKind::kAllgather ? "allgather" : "reducescatter";
  }

  // `value` as a list or tuple (PySequence_Fast), or a TypeError naming `what`.
  static py::object sequence(py::handle value, const char* what) {
    PyObject* fast =
        PySequence_Fast(value.ptr(), (std::string(what) + " must be a list or tuple").c_str());
    return checked(fast);
  }

  // An output as the frontend's tensor: the object its allocator made, or ronde's memory
  // adopted through DLPack.
  py::object adopt(const std::shared_ptr<Tensor>& output) {
    if (auto tensor = std::dynamic_pointer_cast<PyTensor>(output)) return tensor->owner();
    py::object capsule = dlpackOf(output);
    if (capsule.is_none() || adopt_.is_none()) return capsule;
    return checked(PyObject_CallOneArg(adopt_.ptr(), capsule.ptr()));
  }

  TensorReader reader_;
  py::object namer_;  // namer(kind, name, process_set) -> the request's full name
  py::object adopt_;  // adopt(DLPack capsule) -> the frontend's tensor, or None
  std::shared_ptr<Runtime> (*runtime_)();
  Entries entries_;
  int64_t next_id_ = 1;
  py::str process_set_id_{"process_set_id"};
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

PyObject* tableSubmitOne(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  return guarded([&] {
    checkArguments("submit_", n, 7, 7);
    return tableOf(self).submitOne(args[0], args[1], args[2], args[3], args[4], args[5], args[6]);
  });
}

PyObject* tableSubmitGroup(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  return guarded([&] {
    checkArguments("group_", n, 8, 8);
    return tableOf(self).submitGroup(args[0], args[1], args[2], args[3], args[4], args[5], args[6],
                                     args[7]);
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
    {"submit_", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(tableSubmitOne)),
     METH_FASTCALL,
     "submit_(kind, tensor, name, op, prescale, postscale, process_set) -> handle: an allgather "
     "or reducescatter (kind: a RequestKind's int value) of a host tensor, named like "
     "allreduce_; synchronize returns its output, made by ronde and adopted. None for a CUDA "
     "or bool tensor"},
    {"group_", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(tableSubmitGroup)),
     METH_FASTCALL,
     "group_(kind, tensors, outputs, group_name, op, prescale, postscale, process_set) -> "
     "handle: one request group of host tensors, member i named group_name.i: allreduce in "
     "place (outputs None) or into outputs, allgather or reducescatter into outputs ronde makes; "
     "synchronize returns the list of results. None, with nothing submitted, where a tensor "
     "needs the general path (CUDA; non-contiguous in place; bool gathered or scattered)"},
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
      [type, runtime](py::dict dtype_codes, py::object namer, py::object adopt) {
        auto* cls = reinterpret_cast<PyTypeObject*>(type.ptr());
        py::object made = py::reinterpret_steal<py::object>(cls->tp_alloc(cls, 0));
        if (!made) throw py::error_already_set();
        reinterpret_cast<TableObject*>(made.ptr())->table =
            new HandleTable(std::move(dtype_codes), std::move(namer), std::move(adopt), runtime);
        return made;
      },
      py::arg("dtype_codes"), py::arg("namer"), py::arg("adopt") = py::none(),
      "A new handle table. dtype_codes: {torch dtype: DataType code}; namer(kind, name, "
      "process_set) -> the full request name, for names that are not a str (None: numbered); "
      "adopt(DLPack capsule) -> a tensor, for the outputs ronde makes (None: the capsules "
      "themselves)");
}

}  // namespace ronde::python
