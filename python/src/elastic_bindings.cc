// ronde._core.ElasticWorkerView: what ronde.common.elastic asks the driver between steps.
#include "elastic_bindings.h"

#include <pybind11/pybind11.h>

#include "ronde/elastic.h"

namespace ronde::python {

void registerElastic(pybind11::module_& module) {
  namespace py = pybind11;
  py::class_<ElasticWorkerView>(module, "ElasticWorkerView",
                                "An elastic worker's view of the driver's generations.")
      .def(py::init([] {
        py::gil_scoped_release release;
        return new ElasticWorkerView();
      }))
      .def_property_readonly("worker_id", &ElasticWorkerView::workerId)
      .def("published", &ElasticWorkerView::published, py::call_guard<py::gil_scoped_release>(),
           "The newest generation the driver published.")
      .def("joined", &ElasticWorkerView::joined, py::call_guard<py::gil_scoped_release>(),
           "The generation this worker's newest init joined (0: none).");
}

}  // namespace ronde::python
