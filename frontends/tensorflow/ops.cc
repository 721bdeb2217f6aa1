// The ops of ronde.tensorflow: their inputs, outputs, attributes and shapes. Each carries the
// request's full name (tensor_name, as ronde.tensorflow makes it: every rank must build the
// same) and its process set. Scale factors are strings holding a double, since TensorFlow's
// float attributes are 32-bit.
//
// Every op is stateful: a collective's result is not a function of its input alone, and
// running it on one rank has an effect on the others. Without the mark TensorFlow treats an op
// as a pure function and may run it while it *builds* a graph (the shape refiner evaluates
// the inputs of a Reshape or a slice as constants), fold it into a constant, or merge two
// alike: each of those runs a collective on one rank that its peers never join. Stateful ops
// are never folded, merged or run early. Inside a tf.function, TensorFlow would also run
// stateful ops one after another in program order, so that nothing could be fused and ranks
// that build two collectives in different orders would wait for each other forever;
// ronde.tensorflow therefore marks each collective it creates there as independent
// (AutomaticControlDependencies.run_independently: it must run, in any order).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace ronde::tensorflow_ops {
namespace {

namespace tf = ::tensorflow;
using tf::shape_inference::InferenceContext;
using tf::shape_inference::ShapeHandle;

#define RONDE_TYPES \
  "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}"
// Every op's request: its full name and process set.
#define RONDE_REQUEST_ATTRS .Attr("tensor_name: string").Attr("process_set_id: int = 0")
// The reducing ops' ReduceOp code and scale factors.
#define RONDE_REDUCTION_ATTRS                                   \
  .Attr("reduce_op: int")                                       \
  .Attr("prescale_factor: string = '1'")                        \
  .Attr("postscale_factor: string = '1'")

// The first dimension unknown (it depends on the other ranks), the rest kept; a scalar counts
// as one row.
absl::Status gatheredShape(InferenceContext* c, int index) {
  ShapeHandle input = c->input(index);
  if (!c->RankKnown(input)) {
    c->set_output(index, c->UnknownShape());
    return absl::OkStatus();
  }
  if (c->Rank(input) == 0) {
    c->set_output(index, c->Vector(InferenceContext::kUnknownDim));
    return absl::OkStatus();
  }
  ShapeHandle output;
  TF_RETURN_IF_ERROR(c->ReplaceDim(input, 0, c->UnknownDim(), &output));
  c->set_output(index, output);
  return absl::OkStatus();
}

absl::Status sameShapes(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

absl::Status gatheredShapes(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) TF_RETURN_IF_ERROR(gatheredShape(c, i));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("RondeAllreduce")
    .Attr("T: " RONDE_TYPES)
    RONDE_REQUEST_ATTRS
    RONDE_REDUCTION_ATTRS
    .Input("tensor: T")
    .Output("reduced: T")
    .SetIsStateful()
    .SetShapeFn(sameShapes)
    .Doc("ronde's allreduce of `tensor` over the ranks of the process set.");

REGISTER_OP("RondeGroupedAllreduce")
    .Attr("T: list(" RONDE_TYPES ")")
    RONDE_REQUEST_ATTRS
    RONDE_REDUCTION_ATTRS
    .Input("tensors: T")
    .Output("reduced: T")
    .SetIsStateful()
    .SetShapeFn(sameShapes)
    .Doc("One negotiated, fused group of allreduces; member i is named tensor_name.i.");

REGISTER_OP("RondeAllgather")
    .Attr("T: " RONDE_TYPES)
    RONDE_REQUEST_ATTRS
    .Input("tensor: T")
    .Output("gathered: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return gatheredShape(c, 0); })
    .Doc("Every rank's `tensor` concatenated along the first dimension, in rank order.");

REGISTER_OP("RondeGroupedAllgather")
    .Attr("T: list(" RONDE_TYPES ")")
    RONDE_REQUEST_ATTRS
    .Input("tensors: T")
    .Output("gathered: T")
    .SetIsStateful()
    .SetShapeFn(gatheredShapes)
    .Doc("One negotiated group of allgathers; member i is named tensor_name.i.");

REGISTER_OP("RondeBroadcast")
    .Attr("T: " RONDE_TYPES)
    RONDE_REQUEST_ATTRS
    .Attr("root: int")
    .Input("tensor: T")
    .Output("broadcast: T")
    .SetIsStateful()
    .SetShapeFn(sameShapes)
    .Doc("The tensor of the set's member `root` (an index into the set) on every member.");

REGISTER_OP("RondeAlltoall")
    .Attr("T: " RONDE_TYPES)
    RONDE_REQUEST_ATTRS
    .Attr("process_set_size: int = 0")
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("exchanged: T")
    .Output("received_splits: int32")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(gatheredShape(c, 0));
      c->set_output(1, c->Vector(InferenceContext::kUnknownDim));
      return absl::OkStatus();
    })
    .Doc(
        "Sends splits[j] first-dimension rows to member j (empty splits: even shares over "
        "process_set_size members, or over the set as it is when the op runs if 0) and "
        "returns what every member sent this one, with the row count from each.");

REGISTER_OP("RondeReducescatter")
    .Attr("T: " RONDE_TYPES)
    RONDE_REQUEST_ATTRS
    RONDE_REDUCTION_ATTRS
    .Input("tensor: T")
    .Output("share: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return gatheredShape(c, 0); })
    .Doc(
        "This member's share of the first dimension of the reduction (the first rows % size "
        "members get one extra row).");

REGISTER_OP("RondeGroupedReducescatter")
    .Attr("T: list(" RONDE_TYPES ")")
    RONDE_REQUEST_ATTRS
    RONDE_REDUCTION_ATTRS
    .Input("tensors: T")
    .Output("shares: T")
    .SetIsStateful()
    .SetShapeFn(gatheredShapes)
    .Doc("One negotiated group of reducescatters; member i is named tensor_name.i.");

REGISTER_OP("RondeJoin")
    RONDE_REQUEST_ATTRS
    .Output("last_joined: int32")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::ScalarShape)
    .Doc("Marks this rank done until every rank joined; the rank that joined last.");

REGISTER_OP("RondeBarrier")
    RONDE_REQUEST_ATTRS
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::NoOutputs)
    .Doc("Returns once every member of the process set has reached it.");

// The job's facts, read when the op runs rather than when the graph is built (Horovod's
// size_op and friends): a graph built before an elastic job re-formed still sees the world
// it runs in.
REGISTER_OP("RondeSize")
    .Attr("process_set_id: int = 0")
    .Output("size: int32")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::ScalarShape)
    .Doc("The number of ranks in the process set.");

REGISTER_OP("RondeRank")
    .Output("rank: int32")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::ScalarShape)
    .Doc("This process's rank in the job.");

REGISTER_OP("RondeLocalSize")
    .Output("local_size: int32")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::ScalarShape)
    .Doc("The number of ranks on this host.");

REGISTER_OP("RondeLocalRank")
    .Output("local_rank: int32")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::ScalarShape)
    .Doc("This process's rank on its host.");

REGISTER_OP("RondeProcessSetIncluded")
    .Attr("process_set_id: int = 0")
    .Output("included: int32")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::ScalarShape)
    .Doc("1 when this process belongs to the process set, else 0.");

}  // namespace ronde::tensorflow_ops
