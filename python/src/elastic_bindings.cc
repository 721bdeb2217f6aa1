// ronde._core.ElasticWorkerView: what ronde.common.elastic asks the driver between steps; and
// the store keys and assignment format of rendezvous/elastic_assignment.h, so that a Python
// driver (ronde.ray.ElasticRayExecutor) writes exactly what the C++ workers read.
#include "elastic_bindings.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "rendezvous/elastic_assignment.h"
#include "runtime/liveness_monitor.h"
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

  module.attr("ELASTIC_GENERATION_KEY") = kElasticGenerationKey;
  module.def("elastic_assignment_key", &elasticAssignmentKey, py::arg("generation"),
             py::arg("worker_id"), "The store key of a worker's place in generation G.");
  module.def("elastic_reset_request_key", &elasticResetRequestKey, py::arg("generation"),
             "The store key where workers of generation G ask for a new world.");
  module.def(
      "elastic_silent_key",
      [](int64_t generation, int rank) {
        return elasticWorldPrefix(generation) + "/" + runtime::LivenessMonitor::silentKey(rank);
      },
      py::arg("generation"), py::arg("rank"),
      "The store key where the liveness monitors of generation G record that `rank` stopped "
      "answering (a stopped or wedged worker: it neither exits nor closes its sockets).");
  module.def(
      "format_elastic_assignment",
      [](int rank, int size, int local_rank, int local_size, int cross_rank, int cross_size,
         const std::string& hostname) {
        ElasticAssignment a;
        a.rank = rank;
        a.size = size;
        a.local_rank = local_rank;
        a.local_size = local_size;
        a.cross_rank = cross_rank;
        a.cross_size = cross_size;
        a.hostname = hostname;
        std::string text = formatElasticAssignment(a);
        // Checked as the workers will parse it: a bad assignment fails the driver, not a rank.
        parseElasticAssignment("(new assignment)", text, 0);
        return text;
      },
      py::arg("rank"), py::arg("size"), py::arg("local_rank"), py::arg("local_size"),
      py::arg("cross_rank"), py::arg("cross_size"), py::arg("hostname"),
      "An assignment value as elastic workers parse it.");
}

}  // namespace ronde::python
