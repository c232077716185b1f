// parallel/pipeline/tensor_message.cpp — the header before the data.
#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/tensor_message.h>

namespace tandem::parallel {
namespace {
constexpr int64_t kMaxDims = 8, kHeader = 2 + kMaxDims;
}  // namespace

void send_tensor(Communicator& comm, const Tensor& t, int dst, std::vector<WorkPtr>& sends) {
  TD_CHECK_SHAPE(t.dim() <= kMaxDims, "send_tensor: a tensor of ", t.dim(), " dimensions; at most ",
                 kMaxDims, " can be sent with their shape");
  std::vector<int64_t> header(size_t(kHeader), 0);
  header[0] = static_cast<int64_t>(t.dtype());
  header[1] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) header[size_t(2 + d)] = t.size(d);
  sends.push_back(comm.send(from_vector(header, {kHeader}, t.device()), dst));
  sends.push_back(comm.send(t.contiguous(), dst));
}

Tensor recv_tensor(Communicator& comm, int src, Device device) {
  Tensor header = empty({kHeader}, {.dtype = kInt64, .device = device});
  comm.recv(header, src)->wait();
  const std::vector<int64_t> h = header.to_vector<int64_t>();
  TD_CHECK_SHAPE(h[1] >= 0 && h[1] <= kMaxDims, "recv_tensor: rank ", src, " sent a header of ",
                 h[1], " dimensions: not a send_tensor message");
  const std::vector<int64_t> shape(h.begin() + 2, h.begin() + 2 + h[1]);
  Tensor t = empty(shape, {.dtype = static_cast<DType>(h[0]), .device = device});
  comm.recv(t, src)->wait();
  return t;
}

}  // namespace tandem::parallel
