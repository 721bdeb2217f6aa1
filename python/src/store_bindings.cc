#include "store_bindings.h"

#include <memory>
#include <string>

#include "ronde/errors.h"
#include "ronde/settings.h"
#include "ronde/store.h"

namespace ronde::python {
namespace {

namespace py = pybind11;

// Owns the server so that close() can stop it before the Python object is collected: a
// driver must free its port and thread when the job ends, not when the GC gets to it.
class StoreServerHandle {
 public:
  StoreServerHandle(const std::string& bind_address, int port, const std::string& secret)
      : server_(std::make_unique<TcpStoreServer>(bind_address, port, secret)),
        port_(server_->port()) {}

  int port() const {
    if (!server_) throw Error(ErrorCode::kInvalidArgument, "the store server is closed");
    return port_;
  }
  bool closed() const { return server_ == nullptr; }
  void close() { server_.reset(); }

 private:
  std::unique_ptr<TcpStoreServer> server_;
  int port_ = 0;
};

py::bytes toBytes(const Bytes& value) {
  return py::bytes(reinterpret_cast<const char*>(value.data()), value.size());
}

Bytes fromBytes(const py::bytes& value) {
  std::string text = value;
  return Bytes(text.begin(), text.end());
}

// Checked before the conversion: 1e30 s would wrap to a negative count of milliseconds and fail
// every wait at once. The bound is the settings' (about 31 years).
Duration toDuration(double seconds) {
  if (!(seconds >= 0 && seconds <= kLargestRealSetting)) {
    throw makeError(ErrorCode::kInvalidArgument, "a timeout of ", seconds,
                    " s is out of range: expected a number of seconds >= 0, at most ",
                    kLargestRealSetting);
  }
  return Duration(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

void registerStore(py::module_& module) {
  py::class_<StoreServerHandle>(module, "TcpStoreServer",
                                "The job's rendezvous store, served from a background thread.")
      .def(py::init<const std::string&, int, const std::string&>(), py::arg("bind_address"),
           py::arg("port"), py::arg("secret"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("port", &StoreServerHandle::port)
      .def_property_readonly("closed", &StoreServerHandle::closed)
      .def("close", &StoreServerHandle::close, py::call_guard<py::gil_scoped_release>());

  // The drivers poll the job's progress (ranks started, a rank's failure) through this, and
  // the Spark tasks report through it, so no second channel is needed beside the store.
  py::class_<Store, std::shared_ptr<Store>>(module, "TcpStore",
                                            "A client of a TcpStoreServer.")
      .def(py::init([](const std::string& host, int port, const std::string& secret,
                       double connect_timeout_seconds) {
             py::gil_scoped_release release;
             return makeTcpStore(host, port, secret, toDuration(connect_timeout_seconds));
           }),
           py::arg("host"), py::arg("port"), py::arg("secret"),
           py::arg("connect_timeout_seconds") = 30.0)
      .def("set",
           [](Store& store, const std::string& key, const py::bytes& value) {
             Bytes bytes = fromBytes(value);
             py::gil_scoped_release release;
             store.set(key, bytes);
           })
      .def("get",
           [](Store& store, const std::string& key, double timeout_seconds) {
             Bytes value;
             {
               py::gil_scoped_release release;
               value = store.get(key, toDuration(timeout_seconds));
             }
             return toBytes(value);
           })
      .def("try_get",
           [](Store& store, const std::string& key) -> py::object {
             Bytes value;
             bool found = false;
             {
               py::gil_scoped_release release;
               found = store.tryGet(key, &value);
             }
             if (!found) return py::none();
             return toBytes(value);
           })
      .def("add",
           [](Store& store, const std::string& key, int64_t delta) {
             py::gil_scoped_release release;
             return store.add(key, delta);
           })
      .def("erase", [](Store& store, const std::string& key) {
        py::gil_scoped_release release;
        store.erase(key);
      });
}

}  // namespace ronde::python
