#include "py_request.h"

#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host_output.h"
#include "py_tensor.h"
#include "ronde/errors.h"
#include "ronde/runtime.h"

namespace ronde::python {
namespace {

// A Python allocator runs on the runtime's thread, which holds no GIL and none of its own
// locks while it allocates; HOST_OUTPUT has ronde make the output of `input`'s dtype there.
OutputAllocator wrapAllocator(py::object allocate, const std::shared_ptr<PyTensor>& input) {
  if (allocate.is_none()) return {};
  if (isHostOutputTag(allocate)) {
    if (!input) throw Error(ErrorCode::kInvalidArgument, "HOST_OUTPUT needs the request's input");
    return hostOutputAllocator(input->dtype());
  }
  auto allocator = std::make_shared<PyRef>(std::move(allocate));
  return [allocator](const std::vector<int64_t>& shape) -> std::shared_ptr<Tensor> {
    py::gil_scoped_acquire gil;
    try {
      py::object made = allocator->get()(py::cast(shape));
      return made.cast<std::shared_ptr<PyTensor>>();
    } catch (py::error_already_set& e) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("allocating an output tensor failed: ") + e.what());
    } catch (py::cast_error&) {
      throw Error(ErrorCode::kInvalidArgument,
                  "the output allocator did not return a ronde._core.TensorRef");
    }
  };
}

// Python's view of a request's tensor: the object it was made from, or None.
py::object ownerOf(const std::shared_ptr<Tensor>& tensor) {
  auto py_tensor = std::dynamic_pointer_cast<PyTensor>(tensor);
  return py_tensor ? py::object(py::cast(py_tensor)) : py::object(py::none());
}

}  // namespace

void registerRequestTypes(py::module_& m) {
  py::enum_<RequestKind>(m, "RequestKind")
      .value("ALLREDUCE", RequestKind::kAllreduce)
      .value("ALLGATHER", RequestKind::kAllgather)
      .value("BROADCAST", RequestKind::kBroadcast)
      .value("ALLTOALL", RequestKind::kAlltoall)
      .value("REDUCESCATTER", RequestKind::kReducescatter)
      .value("BARRIER", RequestKind::kBarrier)
      .value("JOIN", RequestKind::kJoin);
  py::enum_<ReduceOp>(m, "ReduceOp")
      .value("SUM", ReduceOp::kSum)
      .value("AVERAGE", ReduceOp::kAverage)
      .value("MIN", ReduceOp::kMin)
      .value("MAX", ReduceOp::kMax)
      .value("PRODUCT", ReduceOp::kProduct)
      .value("ADASUM", ReduceOp::kAdasum);
  py::enum_<DataType>(m, "DataType")
      .value("UINT8", DataType::kUInt8)
      .value("INT8", DataType::kInt8)
      .value("INT16", DataType::kInt16)
      .value("UINT16", DataType::kUInt16)
      .value("INT32", DataType::kInt32)
      .value("INT64", DataType::kInt64)
      .value("FLOAT16", DataType::kFloat16)
      .value("BFLOAT16", DataType::kBFloat16)
      .value("FLOAT32", DataType::kFloat32)
      .value("FLOAT64", DataType::kFloat64)
      .value("BOOL", DataType::kBool);

  // Positional order follows how often a field is set, so the common allreduce passes five
  // arguments and leaves the rest to their defaults.
  py::class_<Request>(m, "Request")
      .def(py::init([](RequestKind kind, std::string name, std::shared_ptr<PyTensor> input,
                       std::shared_ptr<PyTensor> output, ReduceOp op, double prescale,
                       double postscale, int process_set, int root, std::vector<int64_t> splits,
                       py::object allocator) {
             Request r;
             r.kind = kind;
             r.name = std::move(name);
             r.allocate_output = wrapAllocator(std::move(allocator), input);
             r.input = std::move(input);
             r.output = std::move(output);
             r.op = op;
             r.scaling.prescale = prescale;
             r.scaling.postscale = postscale;
             r.process_set = process_set;
             r.root = root;
             r.splits = std::move(splits);
             return r;
           }),
           py::arg("kind"), py::arg("name"), py::arg("input") = nullptr,
           py::arg("output") = nullptr, py::arg("op") = ReduceOp::kSum, py::arg("prescale") = 1.0,
           py::arg("postscale") = 1.0, py::arg("process_set") = 0, py::arg("root") = 0,
           py::arg("splits") = std::vector<int64_t>{}, py::arg("allocator") = py::none())
      .def_readwrite("kind", &Request::kind)
      .def_readwrite("name", &Request::name)
      .def_property(
          "input", [](const Request& r) { return ownerOf(r.input); },
          [](Request& r, std::shared_ptr<PyTensor> t) { r.input = std::move(t); })
      .def_property(
          "output", [](const Request& r) { return ownerOf(r.output); },
          [](Request& r, std::shared_ptr<PyTensor> t) { r.output = std::move(t); })
      .def_readwrite("op", &Request::op)
      .def_property(
          "prescale", [](const Request& r) { return r.scaling.prescale; },
          [](Request& r, double v) { r.scaling.prescale = v; })
      .def_property(
          "postscale", [](const Request& r) { return r.scaling.postscale; },
          [](Request& r, double v) { r.scaling.postscale = v; })
      .def_readwrite("process_set", &Request::process_set)
      .def_readwrite("root", &Request::root)
      .def_readwrite("splits", &Request::splits)
      .def_readwrite("stream", &Request::stream,
                     "CUDA tensors: the cudaStream_t (an int) the input is produced on; the "
                     "output is ready on it when the handle completes")
      .def_property(
          "allocator", [](const Request& r) { return static_cast<bool>(r.allocate_output); },
          [](Request& r, py::object allocate) {
            r.allocate_output =
                wrapAllocator(allocate, std::dynamic_pointer_cast<PyTensor>(r.input));
          },
          "setting it takes a callable(shape) -> TensorRef, HOST_OUTPUT or None; reading it "
          "says whether one is set")
      .def("__repr__", [](const Request& r) {
        return "<ronde._core.Request " + std::string(py::str(py::cast(r.kind))) + " '" + r.name +
               "' process_set=" + std::to_string(r.process_set) + ">";
      });
}

}  // namespace ronde::python
