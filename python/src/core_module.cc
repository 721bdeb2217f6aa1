// ronde._core: the runtime for Python frontends. Tensors arrive as raw facts (address,
// dtype code, shape, device) plus the owning object, so the module knows no framework.
//
// GIL rule: no call into the runtime is made with the GIL held, because the runtime's thread
// may itself need the GIL (to allocate an output through a Python callback) while holding
// its own locks. Python objects dropped by the runtime's thread are released later by a
// Python thread (see py_tensor.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "error_mapping.h"
#include "py_tensor.h"
#include "store_bindings.h"
#include "ronde/runtime.h"
#include "ronde/settings.h"

namespace ronde::python {
namespace {

// The process-wide runtime behind hvd.init(): Horovod's API is module level, so one
// instance lives here; calls keep it alive with their own reference while they run.
class RuntimeSlot {
 public:
  std::shared_ptr<Runtime> get() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!runtime_) {
      throw Error(ErrorCode::kInvalidArgument,
                  "ronde has not been initialized; call hvd.init() first");
    }
    return runtime_;
  }
  bool initialized() {
    std::lock_guard<std::mutex> lock(mutex_);
    return runtime_ != nullptr && runtime_->isInitialized();
  }
  void init() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (runtime_) return;
    runtime_ = std::shared_ptr<Runtime>(Runtime::init());
  }
  void shutdown() {
    std::shared_ptr<Runtime> runtime;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      runtime.swap(runtime_);
    }
    if (runtime) runtime->shutdown();
  }

 private:
  std::mutex mutex_;
  std::shared_ptr<Runtime> runtime_;  // guarded by mutex_
};

RuntimeSlot& slot() {
  static RuntimeSlot* instance = new RuntimeSlot();  // never destroyed: no exit-order trouble
  return *instance;
}

std::shared_ptr<PyTensor> toTensor(py::handle object) {
  if (object.is_none()) return nullptr;
  return object.cast<std::shared_ptr<PyTensor>>();
}

// (kind, name, input, output, allocator, op, prescale, postscale, root, splits, process_set)
Request buildRequest(const py::tuple& spec) {
  if (spec.size() != 11) throw Error(ErrorCode::kInvalidArgument, "malformed request tuple");
  Request request;
  request.kind = static_cast<RequestKind>(spec[0].cast<int>());
  request.name = spec[1].cast<std::string>();
  request.input = toTensor(spec[2]);
  request.output = toTensor(spec[3]);
  if (!spec[4].is_none()) {
    auto allocator = std::make_shared<PyRef>(py::reinterpret_borrow<py::object>(spec[4]));
    request.allocate_output =
        [allocator](const std::vector<int64_t>& shape) -> std::shared_ptr<Tensor> {
      py::gil_scoped_acquire gil;
      try {
        py::object made = allocator->get()(py::cast(shape));
        return made.cast<std::shared_ptr<PyTensor>>();
      } catch (py::error_already_set& e) {
        throw Error(ErrorCode::kInvalidArgument,
                    std::string("allocating an output tensor failed: ") + e.what());
      } catch (py::cast_error& e) {
        throw Error(ErrorCode::kInvalidArgument,
                    "the output allocator did not return a ronde._core.TensorRef");
      }
    };
  }
  request.op = static_cast<ReduceOp>(spec[5].cast<int>());
  request.scaling.prescale = spec[6].cast<double>();
  request.scaling.postscale = spec[7].cast<double>();
  request.root = spec[8].cast<int>();
  request.splits = spec[9].cast<std::vector<int64_t>>();
  request.process_set = spec[10].cast<int>();
  return request;
}

Duration toDuration(std::optional<double> seconds) {
  if (!seconds) return Duration::max();
  return Duration(static_cast<int64_t>(*seconds * 1000.0));
}

template <typename Fn>
auto withRuntime(Fn fn) {
  releaseDeferredObjects();
  std::shared_ptr<Runtime> runtime = slot().get();
  py::gil_scoped_release release;
  return fn(*runtime);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "ronde's runtime for Python frontends (framework-free).";
  m.attr("__version__") = RONDE_VERSION;
  registerErrors(m);
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
             if (!tensor) return py::none();
             return tensor->owner();
           })
      .def("result", [](Handle& handle) {
        py::gil_scoped_release release;
        return handle.result();
      });

  m.def("init", [] {
    py::gil_scoped_release release;
    slot().init();
  });
  m.def("shutdown", [] {
    {
      py::gil_scoped_release release;
      slot().shutdown();
    }
    releaseDeferredObjects();
  });
  // Horovod shuts down at interpreter exit: a script that ends without hvd.shutdown() then
  // stops in step with its peers, which see an orderly stop rather than a dead rank.
  py::module_::import("atexit").attr("register")(m.attr("shutdown"));
  m.def("is_initialized", [] { return slot().initialized(); });
  m.def("rank", [] { return withRuntime([](Runtime& r) { return r.rank(); }); });
  m.def("size", [] { return withRuntime([](Runtime& r) { return r.size(); }); });
  m.def("local_rank", [] { return withRuntime([](Runtime& r) { return r.localRank(); }); });
  m.def("local_size", [] { return withRuntime([](Runtime& r) { return r.localSize(); }); });
  m.def("cross_rank", [] { return withRuntime([](Runtime& r) { return r.crossRank(); }); });
  m.def("cross_size", [] { return withRuntime([](Runtime& r) { return r.crossSize(); }); });

  m.def("enqueue", [](const py::tuple& spec) {
    Request request = buildRequest(spec);
    return withRuntime([&](Runtime& r) { return r.enqueue(std::move(request)); });
  });
  m.def("enqueue_group", [](const py::list& specs) {
    std::vector<Request> requests;
    for (py::handle spec : specs) requests.push_back(buildRequest(spec.cast<py::tuple>()));
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

  // Settings knobs: what each RONDE_* variable means, and what this process would use.
  m.def("settings_documentation", [] {
    py::list docs;
    for (const Settings::Doc& doc : Settings::documentation()) {
      docs.append(py::make_tuple(doc.name, doc.help, doc.default_value));
    }
    return docs;
  });
}

}  // namespace ronde::python
