#include "host_output.h"

#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

#include "ronde/errors.h"

namespace ronde::python {
namespace {

// DLPack's C ABI (dlpack.h, unversioned DLManagedTensor, unchanged from 0.2 to 0.8 and read
// by every torch this frontend supports), declared here so that the module builds without a
// framework's headers.
struct DLDevice {
  int32_t device_type;  // kDLCPU = 1
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

constexpr const char* kCapsuleName = "dltensor";  // a consumer renames it "used_dltensor"
constexpr size_t kAlignment = 64;

DLDataType dlpackType(DataType type) {
  switch (type) {
    case DataType::kUInt8: return {1, 8, 1};
    case DataType::kInt8: return {0, 8, 1};
    case DataType::kInt16: return {0, 16, 1};
    case DataType::kUInt16: return {1, 16, 1};
    case DataType::kInt32: return {0, 32, 1};
    case DataType::kInt64: return {0, 64, 1};
    case DataType::kFloat16: return {2, 16, 1};
    case DataType::kBFloat16: return {4, 16, 1};
    case DataType::kFloat32: return {2, 32, 1};
    case DataType::kFloat64: return {2, 64, 1};
    case DataType::kBool: return {6, 8, 1};
  }
  throw Error(ErrorCode::kInvalidArgument, "no DLPack type for this data type");
}

// Memory of its own, left uninitialized: every element is written by the collective.
class HostOutput final : public Tensor {
 public:
  HostOutput(DataType type, std::vector<int64_t> shape) : type_(type), shape_(std::move(shape)) {
    for (int64_t d : shape_) numel_ *= static_cast<size_t>(d);
    const size_t bytes = numel_ * dataTypeSize(type_);
    // aligned_alloc wants a multiple of the alignment; one byte at least, never null.
    const size_t rounded = (bytes + kAlignment) / kAlignment * kAlignment;
    data_ = std::aligned_alloc(kAlignment, rounded);
    if (data_ == nullptr) throw std::bad_alloc();
  }
  ~HostOutput() override { std::free(data_); }
  HostOutput(const HostOutput&) = delete;
  HostOutput& operator=(const HostOutput&) = delete;

  DataType dtype() const override { return type_; }
  std::vector<int64_t> shape() const override { return shape_; }
  size_t numel() const override { return numel_; }
  Device device() const override { return {}; }
  void* data() override { return data_; }

 private:
  DataType type_;
  std::vector<int64_t> shape_;
  size_t numel_ = 1;
  void* data_ = nullptr;
};

// What a capsule's DLManagedTensor owns: the output, and the shape and strides it points to.
struct Exported {
  std::shared_ptr<Tensor> tensor;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed{};
};

void deleteExported(DLManagedTensor* managed) {
  delete static_cast<Exported*>(managed->manager_ctx);
}

// A capsule nobody consumed still owns its tensor; a consumed one was renamed, and its
// consumer calls the deleter.
void destroyCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed != nullptr) managed->deleter(managed);
}

}  // namespace

void registerHostOutput(py::module_& m) {
  py::class_<HostOutputTag>(m, "HostOutputTag",
                            "passed as a request's allocator: ronde makes the host output")
      .def("__repr__", [](const HostOutputTag&) { return "ronde._core.HOST_OUTPUT"; });
  m.attr("HOST_OUTPUT") = HostOutputTag{};
}

bool isHostOutputTag(const py::handle& allocator) {
  return py::isinstance<HostOutputTag>(allocator);
}

OutputAllocator hostOutputAllocator(DataType type) {
  dlpackType(type);  // refuses an unknown type at submission, not on the runtime's thread
  return [type](const std::vector<int64_t>& shape) -> std::shared_ptr<Tensor> {
    return std::make_shared<HostOutput>(type, shape);
  };
}

py::object dlpackOf(const std::shared_ptr<Tensor>& tensor) {
  if (!std::dynamic_pointer_cast<HostOutput>(tensor)) return py::none();
  auto exported = std::make_unique<Exported>();
  exported->tensor = tensor;
  exported->shape = tensor->shape();
  exported->strides.assign(exported->shape.size(), 1);
  for (size_t i = exported->shape.size(); i-- > 1;)
    exported->strides[i - 1] = exported->strides[i] * exported->shape[i];
  DLTensor& t = exported->managed.dl_tensor;
  t.data = tensor->data();
  t.device = {1, 0};
  t.ndim = static_cast<int32_t>(exported->shape.size());
  t.dtype = dlpackType(tensor->dtype());
  t.shape = exported->shape.data();
  t.strides = exported->strides.data();
  t.byte_offset = 0;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = deleteExported;
  PyObject* capsule = PyCapsule_New(&exported->managed, kCapsuleName, destroyCapsule);
  if (capsule == nullptr) throw py::error_already_set();
  exported.release();  // owned by the capsule now, then by its consumer
  return py::reinterpret_steal<py::object>(capsule);
}

}  // namespace ronde::python
