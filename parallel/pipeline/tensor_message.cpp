// parallel/pipeline/tensor_message.cpp — the header before the data.
#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/tensor_message.h>

namespace tandem::parallel {
namespace {
constexpr int64_t kMaxDims = 8, kHeader = 4 + kMaxDims;  // tag, dtype, dims, sizes

// The header travels where the data does, except from the meta device (a rehearsal's thread
// ranks, tools/plan/): a meta tensor has no values, and the receiver must read the shape.
Device header_device(Device data) { return data.is_meta() ? Device::cpu() : data; }
}  // namespace

void send_tensor(Communicator& comm, const Tensor& t, int dst, std::vector<WorkPtr>& sends,
                 MessageTag tag) {
  TD_CHECK_SHAPE(t.dim() <= kMaxDims, "send_tensor: a tensor of ", t.dim(), " dimensions; at most ",
                 kMaxDims, " can be sent with their shape");
  std::vector<int64_t> header(size_t(kHeader), 0);
  header[0] = tag[0], header[1] = tag[1];
  header[2] = static_cast<int64_t>(t.dtype());
  header[3] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) header[size_t(4 + d)] = t.size(d);
  sends.push_back(comm.send(from_vector(header, {kHeader}, header_device(t.device())), dst));
  sends.push_back(comm.send(t.contiguous(), dst));
}

Tensor recv_tensor(Communicator& comm, int src, Device device, MessageTag* tag) {
  Tensor header = empty({kHeader}, {.dtype = kInt64, .device = header_device(device)});
  comm.recv(header, src)->wait();
  const std::vector<int64_t> h = header.to_vector<int64_t>();
  TD_CHECK_SHAPE(h[3] >= 0 && h[3] <= kMaxDims, "recv_tensor: rank ", src, " sent a header of ",
                 h[3], " dimensions: not a send_tensor message");
  if (tag) *tag = {h[0], h[1]};
  const std::vector<int64_t> shape(h.begin() + 4, h.begin() + 4 + h[3]);
  Tensor t = empty(shape, {.dtype = static_cast<DType>(h[2]), .device = device});
  comm.recv(t, src)->wait();
  return t;
}

}  // namespace tandem::parallel
