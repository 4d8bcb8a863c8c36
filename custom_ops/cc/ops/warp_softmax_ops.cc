// Schema of WarpSoftmax and WarpSoftmaxGrad: what the ops are, independent of
// the device that runs them (the kernels live in ../kernels/).
//
// The shape functions are what tf.function and SavedModel use before any
// kernel runs, so they must agree with the kernels: the output has the
// input's shape, and the input must have rank >= 1 (softmax is taken over the
// last axis; the Python wrapper moves any other axis there).

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tflab {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("WarpSoftmax")
    .Input("logits: T")
    .Output("softmax: T")
    .Attr("T: {half, bfloat16, float}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle in;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &in));
      c->set_output(0, in);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Softmax over the last axis, computed in float32 for every storage dtype.

logits: rank >= 1.
softmax: same shape and dtype as logits; each last-axis row sums to 1.
)doc");

REGISTER_OP("WarpSoftmaxGrad")
    .Input("softmax: T")
    .Input("grad_softmax: T")
    .Output("grad_logits: T")
    .Attr("T: {half, bfloat16, float}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle y, dy, merged;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &y));
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(1), 1, &dy));
      // Merge keeps whatever each side knows (one may know the batch dim,
      // the other the class dim) and fails on a real mismatch.
      TF_RETURN_IF_ERROR(c->Merge(y, dy, &merged));
      c->set_output(0, merged);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Gradient of WarpSoftmax: grad_logits = y * (dy - sum(dy * y, axis=-1)).

softmax: y, the forward output.
grad_softmax: dy, same shape as y.
)doc");

}  // namespace tflab
