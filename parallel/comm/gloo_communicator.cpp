// parallel/comm/gloo_communicator.cpp — the collectives over Gloo. The ranks find each other in
// gloo_rendezvous.cpp; each collective runs in order on gloo_queue.cpp's thread, which also turns
// a failure into an error naming the collective and the rank that died.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <tandem/core/check.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/parallel/comm/gloo_communicator.h>
#include <tandem/parallel/comm/gloo_dtypes.h>
#include <tandem/parallel/comm/gloo_queue.h>
#include <tandem/parallel/comm/gloo_rendezvous.h>
#include <type_traits>

namespace tandem::parallel {
namespace {

using namespace gloo_detail;  // by_dtype, reduce_fn, classic_fn, divide

// A host tensor holding `t`'s values (t itself when it is on the CPU): Gloo reads and writes host
// memory only.
// Afterwards the result is t's; a CPU tensor Gloo wrote into directly gets a new version, as
// any in-place write does (what remembers t's contents by version, the CPU GEMM's packed
// weights, then knows they changed: DDP broadcasts its parameters so).
Tensor staged(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }
void unstage(Tensor& t, const Tensor& host) {
  if (t.device().is_cpu()) {
    ::tandem::detail::bump_version(t);
  } else {
    t.copy_(host);
  }
}

}  // namespace

struct GlooCommunicator::Impl {
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::unique_ptr<GlooQueue> queue;
  std::mutex mu;  // orders sequence numbers with the queue
  uint64_t next_seq = 0;
};

GlooCommunicator::GlooCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                   GlooOptions options)
    : Communicator(rank, size, options.timeout), impl_(std::make_unique<Impl>()) {
  const std::string hostname =
      options.hostname.empty() ? local_address_towards(options.peer_hint) : options.hostname;
  impl_->context = connect_full_mesh(std::move(store), rank, size, hostname, timeout_);
  impl_->queue = std::make_unique<GlooQueue>(rank, std::move(options.departed_ranks));
}

GlooCommunicator::~GlooCommunicator() = default;  // the queue finishes its collectives first

WorkPtr GlooCommunicator::enqueue(const std::string& op, const Tensor* t, const std::string& extra,
                                  std::function<void(uint32_t)> run) {
  std::lock_guard lk(impl_->mu);
  const uint64_t seq = impl_->next_seq++;
  auto work = std::make_shared<Work>(seq, describe(op, seq, t, extra), timeout_);
  impl_->queue->push(work, std::move(run), uint32_t(seq));
  return work;
}

WorkPtr GlooCommunicator::all_reduce(Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce");
  check_reduce_op(op, "all_reduce");
  TD_CHECK_DTYPE(op != ReduceOp::Mean || tensor.dtype() != DType::i64,
                 "gloo all_reduce: mean needs a floating tensor, but got int64");
  auto ctx = impl_->context;
  const int world = size_;
  const auto timeout = timeout_;
  return enqueue("all_reduce", &tensor, name(op), [=, t = tensor](uint32_t tag) mutable {
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
  check_tensor(tensor, "broadcast");
  TD_CHECK_VALUE(root >= 0 && root < size_, "gloo broadcast: root ", root,
                 " is not a rank of a world of size ", size_);
  auto ctx = impl_->context;
  const auto timeout = timeout_;
  return enqueue("broadcast", &tensor, "root " + std::to_string(root),
                 [=, t = tensor](uint32_t tag) mutable {
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
  check_tensor(input, "all_gather");
  TD_CHECK_VALUE(int(outputs.size()) == size_, "gloo all_gather: expected ", size_,
                 " output tensors (one per rank), but got ", outputs.size());
  for (const Tensor& o : outputs) {
    check_tensor(o, "all_gather");
    TD_CHECK_SHAPE(o.shape() == input.shape() && o.dtype() == input.dtype(),
                   "gloo all_gather: every output must match the input ", ::tandem::describe(input),
                   ", but one is ", ::tandem::describe(o));
  }
  auto ctx = impl_->context;
  const auto timeout = timeout_;
  const int world = size_;
  return enqueue("all_gather", &input, "", [=, in = input, outs = outputs](uint32_t tag) mutable {
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
  check_tensor(input, "reduce_scatter");
  check_tensor(output, "reduce_scatter");
  check_reduce_op(op, "reduce_scatter");
  TD_CHECK_SHAPE(input.numel() == output.numel() * size_ && input.dtype() == output.dtype(),
                 "gloo reduce_scatter: the input must hold ", size_,
                 " chunks shaped like the output ", ::tandem::describe(output), ", but it is ",
                 ::tandem::describe(input));
  TD_CHECK_DTYPE(op != ReduceOp::Mean || input.dtype() != DType::i64,
                 "gloo reduce_scatter: mean needs a floating tensor, but got int64");
  auto ctx = impl_->context;
  const int world = size_;
  return enqueue(
      "reduce_scatter", &input, name(op), [=, in = input, out = output](uint32_t) mutable {
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

}  // namespace tandem::parallel
