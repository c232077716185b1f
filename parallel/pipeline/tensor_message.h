// parallel/pipeline/tensor_message.h — a tensor sent to another rank with its dtype and shape, so
// the receiver needs to know neither: a header of ten int64s (dtype, number of dimensions, sizes)
// goes first, then the data. A pipeline stage's activations, and the stages' tensors gathered
// for a checkpoint, travel this way.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <vector>

namespace tandem::parallel {

/// Posts `t` (at most 8 dimensions) for rank `dst` of `comm`; the two Works are appended to
/// `sends` (wait for them before relying on the message having left).
void send_tensor(Communicator& comm, const Tensor& t, int dst, std::vector<WorkPtr>& sends);

/// The next tensor rank `src` sent with send_tensor, allocated on `device`.
Tensor recv_tensor(Communicator& comm, int src, Device device);

}  // namespace tandem::parallel
