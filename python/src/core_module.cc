// ronde._core: the runtime for Python frontends. Tensors arrive as raw facts (address,
// dtype code, shape, device) plus the owning object, so the module knows no framework.
//
// GIL rule: no call into the runtime is made with the GIL held, because the runtime's thread
// may itself need the GIL (to allocate an output through a Python callback) while holding
// its own locks. Python objects dropped by the runtime's thread are released later by a
// Python thread (see py_tensor.h). The runtime is the process's shared one
// (ronde/shared_runtime.h), which ronde.tensorflow's compiled kernels submit to as well.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend_registry.h"
#include "elastic_bindings.h"
#include "error_mapping.h"
#include "handle_table.h"
#include "host_output.h"
#include "py_convert.h"
#include "py_request.h"
#include "py_tensor.h"
#include "store_bindings.h"
#include "ronde/runtime.h"
#include "ronde/settings.h"
#include "ronde/shared_runtime.h"

namespace ronde::python {
namespace {

// The in-place allreduce of every gradient hook, without building the Python objects of a
// TensorRef and a Request per call: the arguments are read straight from their Python
// objects (each checked), which is most of what a call costs.
std::vector<int64_t> toShape(py::handle shape) {
  if (!PyTuple_Check(shape.ptr())) return shape.cast<std::vector<int64_t>>();  // any sequence
  const Py_ssize_t n = PyTuple_GET_SIZE(shape.ptr());
  std::vector<int64_t> dims(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i)
    dims[static_cast<size_t>(i)] = toInt64(PyTuple_GET_ITEM(shape.ptr(), i), "a dimension");
  return dims;
}

Request inPlaceAllreduce(py::handle owner, py::handle address, py::handle dtype, py::handle shape,
                         py::handle device_index, py::handle name, py::handle op,
                         py::handle prescale, py::handle postscale, py::handle process_set) {
  const int64_t code = toInt64(dtype, "dtype");
  if (code < 0 || code >= kNumDataTypes)
    throw Error(ErrorCode::kInvalidArgument, "unsupported dtype code " + std::to_string(code));
  Py_ssize_t name_length = 0;
  const char* name_chars = PyUnicode_AsUTF8AndSize(name.ptr(), &name_length);
  if (name_chars == nullptr) {
    PyErr_Clear();
    throw Error(ErrorCode::kInvalidArgument, "a request name must be a str");
  }
  Device device;
  const int64_t index = toInt64(device_index, "device_index");
  if (index >= 0) device = {Device::Kind::kCuda, static_cast<int>(index)};
  auto tensor = std::make_shared<PyTensor>(py::reinterpret_borrow<py::object>(owner),
                                           static_cast<uintptr_t>(toInt64(address, "address")),
                                           static_cast<DataType>(code), toShape(shape), device);
  Request request;
  request.kind = RequestKind::kAllreduce;
  request.name.assign(name_chars, static_cast<size_t>(name_length));
  request.input = tensor;
  request.output = std::move(tensor);
  request.op = toReduceOp(op);
  request.scaling.prescale = toDouble(prescale, "prescale");
  request.scaling.postscale = toDouble(postscale, "postscale");
  request.process_set = static_cast<int>(toInt64(process_set, "process_set"));
  return request;
}

Duration toDuration(std::optional<double> seconds) {
  if (!seconds) return Duration::max();
  return Duration(static_cast<int64_t>(*seconds * 1000.0));
}

// The runtime for calls that hold the GIL until they enqueue (the handle table's).
std::shared_ptr<Runtime> initializedRuntime() { return shared_runtime::get(); }

template <typename Fn>
auto withRuntime(Fn fn) {
  releaseDeferredObjects();
  std::shared_ptr<Runtime> runtime = shared_runtime::get();
  py::gil_scoped_release release;
  return fn(*runtime);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "ronde's runtime for Python frontends (framework-free).";
  m.attr("__version__") = RONDE_VERSION;
  registerErrors(m);
  registerRequestTypes(m);
  registerHostOutput(m);
  registerStore(m);

  py::class_<Tensor, std::shared_ptr<Tensor>>(m, "Tensor");
  py::class_<PyTensor, Tensor, std::shared_ptr<PyTensor>>(m, "TensorRef")
      .def(py::init([](py::object owner, uintptr_t address, int dtype,
                       std::vector<int64_t> shape, int device_index) {
             if (dtype < 0 || dtype >= kNumDataTypes) {
               throw Error(ErrorCode::kInvalidArgument,
                           "unsupported dtype code " + std::to_string(dtype));
             }
             Device device;
             if (device_index >= 0) device = {Device::Kind::kCuda, device_index};
             return std::make_shared<PyTensor>(std::move(owner), address,
                                               static_cast<DataType>(dtype), std::move(shape),
                                               device);
           }),
           py::arg("owner"), py::arg("address"), py::arg("dtype"), py::arg("shape"),
           py::arg("device_index") = -1)
      .def_property_readonly("owner", &PyTensor::owner);

  py::class_<Handle, std::shared_ptr<Handle>>(m, "Handle")
      .def("poll",
           [](Handle& handle) {
             releaseDeferredObjects();
             py::gil_scoped_release release;
             return handle.poll();
           })
      .def(
          "wait",
          [](Handle& handle, std::optional<double> timeout_seconds) {
            {
              py::gil_scoped_release release;
              handle.wait(toDuration(timeout_seconds));
            }
            releaseDeferredObjects();
          },
          py::arg("timeout_seconds") = py::none())
      .def("output",
           [](Handle& handle) -> py::object {
             std::shared_ptr<Tensor> output;
             {
               py::gil_scoped_release release;
               output = handle.output();
             }
             auto tensor = std::dynamic_pointer_cast<PyTensor>(output);
             // An output ronde made (HOST_OUTPUT) comes as a DLPack capsule, else None.
             if (!tensor) return dlpackOf(output);
             return tensor->owner();
           })
      .def("result", [](Handle& handle) {
        py::gil_scoped_release release;
        return handle.result();
      });

  m.def("init", [] {
    py::gil_scoped_release release;
    shared_runtime::init();
  });
  m.def("shutdown", [] {
    {
      py::gil_scoped_release release;
      shared_runtime::shutdown();
    }
    releaseDeferredObjects();
  });
  // Horovod shuts down at interpreter exit: a script that ends without hvd.shutdown() then
  // stops in step with its peers, which see an orderly stop rather than a dead rank.
  py::module_::import("atexit").attr("register")(m.attr("shutdown"));
  m.def("is_initialized", [] { return shared_runtime::initialized(); });
  // The communication backends compiled into this build ("native", "mpi"), and the transports
  // of the running communicator ("shm", "shm+tcp", "mpi"): what Horovod's mpi_built() and
  // mpi_enabled() report.
  m.def("built_backends", [] {
    std::vector<std::string> names;
    for (const Backend& b : backends())
      if (b.built) names.emplace_back(b.name);
    return names;
  });
  // What Horovod's cuda_built() and nccl_built() report: the CUDA kernels are in this build;
  // the NCCL version the NCCL backend loaded (e.g. 22809), 0 without one.
  m.def("cuda_built", [] { return cudaBuilt(); });
  m.def("nccl_version", [] { return ncclBuiltVersion(); });
  m.def("transport_name",
        [] { return withRuntime([](Runtime& r) { return r.communicator().transportName(); }); });
  m.def("rank", [] { return withRuntime([](Runtime& r) { return r.rank(); }); });
  m.def("size", [] { return withRuntime([](Runtime& r) { return r.size(); }); });
  m.def("local_rank", [] { return withRuntime([](Runtime& r) { return r.localRank(); }); });
  m.def("local_size", [] { return withRuntime([](Runtime& r) { return r.localSize(); }); });
  m.def("cross_rank", [] { return withRuntime([](Runtime& r) { return r.crossRank(); }); });
  m.def("cross_size", [] { return withRuntime([](Runtime& r) { return r.crossSize(); }); });

  // The request is copied: the caller may reuse or change its object afterwards.
  m.def("enqueue", [](const Request& request) {
    Request copy = request;
    return withRuntime([&](Runtime& r) { return r.enqueue(std::move(copy)); });
  });
  m.def(
      "enqueue_allreduce_",
      [](py::handle owner, py::handle address, py::handle dtype, py::handle shape,
         py::handle device_index, py::handle name, py::handle op, py::handle prescale,
         py::handle postscale, py::handle process_set) {
        Request request = inPlaceAllreduce(owner, address, dtype, shape, device_index, name, op,
                                           prescale, postscale, process_set);
        return withRuntime([&](Runtime& r) { return r.enqueue(std::move(request)); });
      },
      "enqueue_allreduce_(owner, address, dtype, shape, device_index, name, op, prescale, "
      "postscale, process_set): the in-place allreduce of Request(ALLREDUCE, name, t, t, "
      "ReduceOp(op), ...) for t = TensorRef(owner, address, dtype, shape, device_index), in one "
      "call (op is the int value of a ReduceOp)");
  registerHandleTable(m, &initializedRuntime);
  m.def("enqueue_group", [](std::vector<Request> requests) {
    return withRuntime([&](Runtime& r) { return r.enqueueGroup(std::move(requests)); });
  });

  m.def("add_process_set", [](std::vector<int> ranks) {
    return withRuntime([&](Runtime& r) { return r.addProcessSet(std::move(ranks)); });
  });
  m.def("remove_process_set", [](int id) {
    withRuntime([&](Runtime& r) { r.removeProcessSet(id); });
  });
  m.def("start_timeline", [](const std::string& path, bool mark_cycles) {
    withRuntime([&](Runtime& r) { r.startTimeline(path, mark_cycles); });
  });
  m.def("stop_timeline", [] { withRuntime([](Runtime& r) { r.stopTimeline(); }); });
  m.def("set_fusion_threshold", [](int64_t bytes) {
    withRuntime([&](Runtime& r) { r.setFusionThreshold(bytes); });
  });
  m.def("set_cycle_time", [](double ms) {
    withRuntime([&](Runtime& r) { r.setCycleTime(ms); });
  });

  // RONDE_TENSORFLOW_OPS as this process has it: "auto", "compiled" or "python".
  m.def("tensorflow_ops",
        [] { return std::string(tensorflowOpsName(Settings::fromEnvironment().tensorflow_ops)); });
  // Settings knobs: what each RONDE_* variable means, and what this process would use.
  m.def("settings_documentation", [] {
    py::list docs;
    for (const Settings::Doc& doc : Settings::documentation()) {
      docs.append(py::make_tuple(doc.name, doc.help, doc.default_value));
    }
    return docs;
  });
  registerElastic(m);
}

}  // namespace ronde::python
