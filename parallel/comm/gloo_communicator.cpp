// parallel/comm/gloo_communicator.cpp — the collectives over Gloo. The ranks find each other in
// gloo_rendezvous.cpp; each collective runs in order on collective_queue.cpp's thread, which also
// turns a failure into an error naming the collective and the rank that died.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <tandem/core/check.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/parallel/comm/collective_queue.h>
#include <tandem/parallel/comm/gloo_communicator.h>
#include <tandem/parallel/comm/gloo_dtypes.h>
#include <tandem/parallel/comm/gloo_rendezvous.h>
#include <tandem/parallel/comm/host_staging.h>
#include <tandem/parallel/store/prefix_store.h>
#include <type_traits>

namespace tandem::parallel {
namespace {

using namespace gloo_detail;  // by_dtype, reduce_fn, classic_fn, divide

using ::tandem::parallel::detail::staged;
using ::tandem::parallel::detail::unstage;

}  // namespace

struct GlooCommunicator::Impl {
  std::shared_ptr<Store> store;  // where sub-groups meet (new_group)
  GlooOptions options;           // the hostname resolved; a sub-group's are these
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::unique_ptr<CollectiveQueue> queue;
  std::mutex mu;  // orders sequence numbers with the queue
  uint64_t next_seq = 0;
  std::vector<uint32_t> sent, received;  // per peer: the numbers of point-to-point messages
};

namespace {
// Point-to-point messages use slots of their own (Gloo's collectives use prefixes 1..8): the
// k-th message between two ranks travels in slot k.
constexpr uint8_t kMessageSlotPrefix = 0x40;
}  // namespace

GlooCommunicator::GlooCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                   GlooOptions options)
    : Communicator(rank, size, options.timeout), impl_(std::make_unique<Impl>()) {
  const std::string hostname =
      options.hostname.empty() ? local_address_towards(options.peer_hint) : options.hostname;
  impl_->store = store;
  impl_->options = {.hostname = hostname, .timeout = options.timeout};
  impl_->context = connect_full_mesh(std::move(store), rank, size, hostname, timeout_);
  impl_->queue = std::make_unique<CollectiveQueue>("gloo", rank, std::move(options.departed_ranks));
  impl_->sent.assign(size_t(size), 0);
  impl_->received.assign(size_t(size), 0);
}

GlooCommunicator::~GlooCommunicator() = default;  // the queue finishes its collectives first

WorkPtr GlooCommunicator::enqueue(const std::string& op, const Tensor* t, const std::string& extra,
                                  std::function<void(uint32_t)> run) {
  std::lock_guard lk(impl_->mu);
  const uint64_t seq = impl_->next_seq++;
  auto work = new_work(op, seq, t, extra, timeout_);
  impl_->queue->push(work, std::move(run), uint32_t(seq));
  return work;
}

WorkPtr GlooCommunicator::all_reduce(Tensor& tensor, ReduceOp op) {
  check_all_reduce(tensor, op);
  auto ctx = impl_->context;
  const int world = size_;
  const auto timeout = timeout_;
  return enqueue("all_reduce", &tensor, name(op), [=, t = tensor](uint32_t tag) mutable {
    if (t.numel() == 0) return;  // Gloo divides by the element count
    Tensor host = staged(t);
    by_dtype(t.dtype(), [&]<typename T>(T*) {
      gloo::AllreduceOptions o(ctx);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setOutput(host.data<T>(), size_t(host.numel()));
      o.setReduceFunction(reduce_fn<T>(op));
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::allreduce(o);
      if (op == ReduceOp::Mean) divide(host.data<T>(), host.numel(), world);
    });
    unstage(t, host);
  });
}

WorkPtr GlooCommunicator::broadcast(Tensor& tensor, int root) {
  check_broadcast(tensor, root);
  auto ctx = impl_->context;
  const auto timeout = timeout_;
  return enqueue("broadcast", &tensor, "root " + std::to_string(root),
                 [=, t = tensor](uint32_t tag) mutable {
                   if (t.numel() == 0) return;
                   Tensor host = staged(t);
                   by_dtype(t.dtype(), [&]<typename T>(T*) {
                     gloo::BroadcastOptions o(ctx);
                     if (ctx->rank == root) o.setInput(host.data<T>(), size_t(host.numel()));
                     o.setOutput(host.data<T>(), size_t(host.numel()));
                     o.setRoot(root);
                     o.setTag(tag);
                     o.setTimeout(timeout);
                     gloo::broadcast(o);
                   });
                   unstage(t, host);
                 });
}

WorkPtr GlooCommunicator::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  check_all_gather(outputs, input);
  auto ctx = impl_->context;
  const auto timeout = timeout_;
  const int world = size_;
  return enqueue("all_gather", &input, "", [=, in = input, outs = outputs](uint32_t tag) mutable {
    if (in.numel() == 0) return;
    Tensor host_in = staged(in);
    Shape all_shape{int64_t(world)};
    for (int64_t d : in.shape()) all_shape.push_back(d);
    Tensor all = empty(all_shape, host_in.options());
    by_dtype(in.dtype(), [&]<typename T>(T*) {
      gloo::AllgatherOptions o(ctx);
      o.setInput(host_in.data<T>(), size_t(in.numel()));
      o.setOutput(all.data<T>(), size_t(all.numel()));
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::allgather(o);
    });
    for (int r = 0; r < world; ++r) outs[size_t(r)].copy_(all.select(0, r));
  });
}

WorkPtr GlooCommunicator::reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) {
  check_reduce_scatter(output, input, op);
  auto ctx = impl_->context;
  const int world = size_;
  return enqueue(
      "reduce_scatter", &input, name(op), [=, in = input, out = output](uint32_t) mutable {
        if (out.numel() == 0) return;
        // The classic algorithm reduces in a scratch copy of the input and leaves this rank's
        // chunk at the start of it (checked with 2, 3 and 4 ranks in comm_test).
        Tensor buf = ::tandem::detail::convert(in, Device::cpu(), in.dtype());
        const int64_t chunk = out.numel();
        by_dtype(in.dtype(), [&]<typename T>(T*) {
          const std::vector<int> recv(static_cast<size_t>(world), static_cast<int>(chunk));
          gloo::ReduceScatterHalvingDoubling<T> algo(ctx, {buf.data<T>()}, int(buf.numel()), recv,
                                                     classic_fn<T>(op));
          algo.run();
          if (op == ReduceOp::Mean) divide(buf.data<T>(), chunk, world);
        });
        out.copy_(buf.reshape({buf.numel()}).narrow(0, 0, chunk).reshape(out.shape()));
      });
}

WorkPtr GlooCommunicator::barrier() {
  auto ctx = impl_->context;
  const auto timeout = timeout_;
  return enqueue("barrier", nullptr, "", [=](uint32_t tag) {
    gloo::BarrierOptions o(ctx);
    o.setTag(tag);
    o.setTimeout(timeout);
    gloo::barrier(o);
  });
}

WorkPtr GlooCommunicator::all_to_all(Tensor& output, const Tensor& input) {
  check_all_to_all(output, input);
  auto ctx = impl_->context;
  const auto timeout = timeout_;
  return enqueue("all_to_all", &input, "", [=, in = input, out = output](uint32_t tag) mutable {
    if (in.numel() == 0) return;
    Tensor host_in = staged(in);
    Tensor host_out = staged(out);
    by_dtype(in.dtype(), [&]<typename T>(T*) {
      gloo::AlltoallOptions o(ctx);
      o.setInput(host_in.data<T>(), size_t(in.numel()));
      o.setOutput(host_out.data<T>(), size_t(out.numel()));
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::alltoall(o);
    });
    unstage(out, host_out);
  });
}

// Gloo posts a message at once and completes it when the peer takes it. Both are posted here, in
// the caller's thread, and only the wait goes on the queue: two ranks that each send before they
// receive do not wait on each other's queue.
WorkPtr GlooCommunicator::send(const Tensor& tensor, int dst) {
  check_tensor(tensor, "send");
  check_peer(dst, "send");
  std::lock_guard lk(impl_->mu);
  const uint32_t n = impl_->sent[size_t(dst)]++;
  auto work = message_work("send", n, tensor, dst);
  Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
  std::shared_ptr<gloo::transport::UnboundBuffer> buf =
      impl_->context->createUnboundBuffer(host.data_ptr(), size_t(host.nbytes()));
  buf->send(dst, uint64_t(gloo::Slot::build(kMessageSlotPrefix, n)));
  const auto timeout = timeout_;
  impl_->queue->push(
      work,
      [buf, host, timeout](uint32_t) {
        TD_CHECK_AS(DistributedError, buf->waitSend(timeout), "the receiver did not take it");
      },
      n);
  return work;
}

WorkPtr GlooCommunicator::recv(Tensor& tensor, int src) {
  check_tensor(tensor, "recv");
  check_peer(src, "recv");
  std::lock_guard lk(impl_->mu);
  const uint32_t n = impl_->received[size_t(src)]++;
  auto work = message_work("recv", n, tensor, src);
  Tensor host =
      tensor.device().is_cpu() ? tensor : empty(tensor.shape(), {.dtype = tensor.dtype()});
  std::shared_ptr<gloo::transport::UnboundBuffer> buf =
      impl_->context->createUnboundBuffer(host.data_ptr(), size_t(host.nbytes()));
  buf->recv(src, uint64_t(gloo::Slot::build(kMessageSlotPrefix, n)));
  const auto timeout = timeout_;
  impl_->queue->push(
      work,
      [buf, host, t = tensor, timeout](uint32_t) mutable {
        TD_CHECK_AS(DistributedError, buf->waitRecv(timeout), "nothing arrived");
        unstage(t, host);
      },
      n);
  return work;
}

// A sub-group connects its own full mesh, meeting under its own name in this group's store. (It
// does not hear of departed ranks from a TCPStore: its members' numbers are not the world's.)
std::shared_ptr<Communicator> GlooCommunicator::make_subgroup(const std::vector<int>& ranks,
                                                              int index, const std::string& name) {
  if (index < 0) return nullptr;
  return std::make_shared<GlooCommunicator>(std::make_shared<PrefixStore>(name, impl_->store),
                                            index, int(ranks.size()), impl_->options);
}

}  // namespace tandem::parallel
