#include "runtime/request_validation.h"

#include <cmath>
#include <numeric>

#include "collectives/adasum.h"
#include "common/reduce_kernels.h"
#include "runtime/process_sets.h"

namespace ronde::runtime {
namespace {

template <typename... Parts>
[[noreturn]] void reject(const Request& request, const Parts&... parts) {
  throw makeError(ErrorCode::kInvalidArgument, kindName(static_cast<uint8_t>(request.kind)), " '",
                  request.name, "': ", parts...);
}

bool carriesTensor(RequestKind kind) {
  return kind != RequestKind::kBarrier && kind != RequestKind::kJoin;
}

}  // namespace

Descriptor describeRequest(Request& request, const std::vector<int>& members, int rank) {
  Descriptor d;
  d.process_set = request.process_set;
  d.kind = static_cast<uint8_t>(request.kind);
  if (request.name.empty()) reject(request, "a request needs a name");
  if (indexIn(members, rank) < 0) {
    reject(request, "rank ", rank, " is not a member of process set ", request.process_set);
  }
  if (!carriesTensor(request.kind)) {
    d.name = std::move(request.name);
    return d;
  }

  if (!request.input) reject(request, "no input tensor");
  d.dtype = request.input->dtype();
  d.shape = request.input->shape();
  d.device = request.input->device();
  for (int64_t dim : d.shape) {
    if (dim < 0) reject(request, "negative dimension in shape ", formatShape(d.shape));
  }
  auto k = static_cast<int64_t>(members.size());
  switch (request.kind) {
    case RequestKind::kAllreduce:
    case RequestKind::kReducescatter:
      if (request.op == ReduceOp::kAdasum) {
        std::string why = request.kind == RequestKind::kAllreduce
                              ? adasumUnsupported(static_cast<int>(k), d.dtype)
                              : std::string("Adasum is an allreduce op only");
        if (!why.empty()) reject(request, why);
      } else {
        try {
          checkReducible(d.dtype, request.op);
        } catch (const Error& e) {
          reject(request, e.what());
        }
      }
      if (!std::isfinite(request.scaling.prescale) || !std::isfinite(request.scaling.postscale)) {
        reject(request, "scale factors must be finite");
      }
      d.op = request.op;
      d.prescale = request.scaling.prescale;
      d.postscale = request.scaling.postscale;
      if (request.kind == RequestKind::kReducescatter && d.shape.empty()) {
        reject(request, "reducescatter needs at least one dimension");
      }
      break;
    case RequestKind::kBroadcast:
      if (request.root < 0 || request.root >= k) {
        reject(request, "root ", request.root, " is outside the process set of ", k, " ranks");
      }
      d.root = request.root;
      break;
    case RequestKind::kAlltoall: {
      if (d.shape.empty()) reject(request, "alltoall needs at least one dimension");
      if (request.splits.empty()) {
        if (d.shape[0] % k != 0) {
          reject(request, "first dimension ", d.shape[0], " does not divide among ", k,
                 " ranks; give splits");
        }
      } else {
        if (static_cast<int64_t>(request.splits.size()) != k) {
          reject(request, request.splits.size(), " splits for ", k, " ranks");
        }
        for (int64_t s : request.splits) {
          if (s < 0) reject(request, "negative split ", s);
        }
        int64_t sum = std::accumulate(request.splits.begin(), request.splits.end(), int64_t{0});
        if (sum != d.shape[0]) reject(request, "splits add up to ", sum, ", not ", d.shape[0]);
        d.splits = request.splits;
      }
      break;
    }
    default:
      break;
  }
  bool same_shape =
      request.kind == RequestKind::kAllreduce || request.kind == RequestKind::kBroadcast;
  if (request.output) {
    if (request.output->dtype() != d.dtype) {
      reject(request, "output dtype ", dataTypeName(request.output->dtype()),
             " differs from input ", dataTypeName(d.dtype));
    }
    if (same_shape && request.output->numel() != request.input->numel()) {
      reject(request, "output shape ", formatShape(request.output->shape()), " differs from input ",
             formatShape(d.shape));
    }
  }
  d.name = std::move(request.name);
  return d;
}

}  // namespace ronde::runtime
