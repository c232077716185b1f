// parallel/pipeline/tensor_message.h — a tensor sent to another rank with its dtype and shape, so
// the receiver needs to know neither: a header of twelve int64s (a two-number tag, dtype, number
// of dimensions, sizes) goes first, then the data. A pipeline stage's activations and gradients
// (tagged with their stage and micro-batch), and the stages' tensors gathered for a checkpoint,
// travel this way.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <array>
#include <vector>

namespace tandem::parallel {

/// What a message is, for its receiver: a pipeline's (stage, micro-batch).
using MessageTag = std::array<int64_t, 2>;

/// Posts `t` (at most 8 dimensions) for rank `dst` of `comm`; the two Works are appended to
/// `sends` (wait for them before relying on the message having left).
void send_tensor(Communicator& comm, const Tensor& t, int dst, std::vector<WorkPtr>& sends,
                 MessageTag tag = {0, 0});

/// The next tensor rank `src` sent with send_tensor, allocated on `device`; its tag in `tag`
/// when given.
Tensor recv_tensor(Communicator& comm, int src, Device device, MessageTag* tag = nullptr);

}  // namespace tandem::parallel
