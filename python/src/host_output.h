// Host outputs that ronde allocates itself, for a frontend that can adopt memory it did not
// allocate (torch, through DLPack). An output allocator written in Python runs on the
// runtime's thread and must take the GIL for every tensor: measured, 31 us per output of a
// fused 200-tensor allgather on one rank, where torch.empty itself takes 3 us, because that
// thread competes for the GIL with the thread that submitted. This allocator takes no GIL;
// Handle.output() hands the memory to Python as a DLPack capsule, which the frontend turns
// into its tensor without a copy, on its own thread.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "ronde/runtime.h"

namespace ronde::python {

namespace py = pybind11;

// What a frontend passes as a request's allocator to have its host output made here:
// ronde._core.HOST_OUTPUT, the one instance, registered by registerHostOutput.
struct HostOutputTag {};
void registerHostOutput(py::module_& m);
bool isHostOutputTag(const py::handle& allocator);

// Makes host tensors of `type` (uninitialized, 64-byte aligned) without the GIL.
OutputAllocator hostOutputAllocator(DataType type);

// A "dltensor" capsule over an output made by hostOutputAllocator, keeping it alive until the
// consumer's tensor is freed; None for any other tensor. The caller holds the GIL.
py::object dlpackOf(const std::shared_ptr<Tensor>& tensor);

}  // namespace ronde::python
