// parallel/comm/gloo_communicator.cpp — Gloo's rendezvous, its collectives, and the one worker
// thread that runs them in order. Gloo reports a dead peer (connection reset) or a timeout as a
// gloo::IoException; it becomes a DistributedError naming the collective, its sequence number, the
// seconds it ran and, when the store knows, which rank died. After a failure the mesh is broken:
// every later collective fails at once with the first error.
#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/core/trace.h>
#include <tandem/parallel/comm/gloo_communicator.h>
#include <tandem/parallel/comm/gloo_dtypes.h>
#include <unistd.h>
#include <csignal>
#include <deque>
#include <thread>
#include <type_traits>

namespace tandem::parallel {
namespace {

using namespace gloo_detail;  // by_dtype, reduce_fn, classic_fn, divide

using Clock = std::chrono::steady_clock;

// Gloo's rendezvous speaks its own Store interface; this forwards it to ours.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit GlooStoreAdapter(std::shared_ptr<parallel::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const Bytes b = store_->get(key);
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    store_->wait(keys, t);
  }

 private:
  std::shared_ptr<parallel::Store> store_;
};

// A host tensor holding `t`'s values (t itself when it is on the CPU): Gloo reads and writes host
// memory only.
Tensor staged(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }
void unstage(Tensor& t, const Tensor& host) {
  if (!t.device().is_cpu()) t.copy_(host);
}

struct Task {
  WorkPtr work;
  std::function<void(uint32_t)> run;
  uint32_t tag;
};

}  // namespace

struct GlooCommunicator::Impl {
  GlooOptions options;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> queue;
  bool stop = false;
  uint64_t next_seq = 0;
  std::exception_ptr broken;  // the first failure; the mesh is unusable after it
  std::thread worker;

  void work_loop(int rank) {
    for (;;) {
      Task task;
      {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        task = std::move(queue.front());
        queue.pop_front();
      }
      if (broken) {
        task.work->mark_done(broken);
        continue;
      }
      const auto start = Clock::now();
      try {
        NoGradGuard no_grad;  // staging copies are not part of any graph
        const int64_t t0 = trace::enabled() ? trace::now_us() : -1;
        task.run(task.tag);
        if (t0 >= 0) trace::record(task.work->description(), "comm", t0, trace::now_us());
        task.work->mark_done();
      } catch (const std::exception& e) {
        const double secs = std::chrono::duration<double>(Clock::now() - start).count();
        std::string who;
        if (options.departed_ranks) {
          // A dead peer's sockets close at once, but the store may see its connection close a
          // moment after Gloo does: ask for up to a second.
          for (int tries = 0; tries < 20 && who.empty(); ++tries) {
            for (int64_t r : options.departed_ranks())
              if (r != rank) who += (who.empty() ? "" : ", ") + std::to_string(r);
            if (who.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        }
        auto error = std::make_exception_ptr(DistributedError(
            str("gloo ", task.work->description(), " failed after ", secs, " s: ", e.what(),
                who.empty()
                    ? ""
                    : "\n  rank " + who + (who.find(',') == std::string::npos ? " has" : " have") +
                          " exited or crashed (its store connection closed)",
                "\n  hint: the group cannot be used after a failed collective; restart the job")));
        broken = error;
        task.work->mark_done(error);
      }
    }
  }
};

std::string local_address_towards(const std::string& peer) {
  if (peer.empty() || peer == "localhost" || peer.rfind("127.", 0) == 0 || peer == "::1")
    return "127.0.0.1";
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* ai = nullptr;
  if (::getaddrinfo(peer.c_str(), "9", &hints, &ai) != 0) return "127.0.0.1";
  std::string out = "127.0.0.1";
  const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  // A UDP connect sends nothing; it only asks the kernel which local address routes to the peer.
  if (fd >= 0 && ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    char buf[INET6_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, buf, sizeof(buf), nullptr, 0,
                      NI_NUMERICHOST) == 0)
      out = buf;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(ai);
  return out;
}

GlooCommunicator::GlooCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                   GlooOptions options)
    : Communicator(rank, size, options.timeout), impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  // Gloo writes to its sockets with writev(2), which raises SIGPIPE when the peer has died; the
  // default action would kill this rank silently instead of letting it report the dead peer.
  struct sigaction old_action {};
  if (::sigaction(SIGPIPE, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL)
    std::signal(SIGPIPE, SIG_IGN);
  gloo::transport::tcp::attr attr;
  attr.hostname = impl_->options.hostname.empty() ? local_address_towards(impl_->options.peer_hint)
                                                  : impl_->options.hostname;
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    impl_->context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    impl_->context->setTimeout(timeout_);
    GlooStoreAdapter adapter(store);
    impl_->context->connectFullMesh(adapter, device);
  } catch (const std::exception& e) {
    ::tandem::detail::fail<DistributedError>(
        "gloo: rank ", rank, " of ", size, " could not connect to the other ranks (listening on ",
        attr.hostname, "): ", e.what(),
        "\n  hint: every rank must start, with the same WORLD_SIZE and MASTER_ADDR/MASTER_PORT, "
        "within the timeout (",
        timeout_.count() / 1000.0, " s)");
  }
  impl_->worker = std::thread([this, rank] {
    if (trace::enabled()) trace::set_thread_name("gloo collectives");
    impl_->work_loop(rank);
  });
}

GlooCommunicator::~GlooCommunicator() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->worker.join();
}

WorkPtr GlooCommunicator::enqueue(const std::string& op, const Tensor* t, const std::string& extra,
                                  std::function<void(uint32_t)> run) {
  std::lock_guard lk(impl_->mu);
  const uint64_t seq = impl_->next_seq++;
  auto work = std::make_shared<Work>(seq, describe(op, seq, t, extra), timeout_);
  impl_->queue.push_back(Task{work, std::move(run), uint32_t(seq)});
  impl_->cv.notify_one();
  return work;
}

WorkPtr GlooCommunicator::all_reduce(Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce");
  TD_CHECK_DTYPE(op != ReduceOp::Avg || tensor.dtype() != DType::i64,
                 "gloo all_reduce: avg needs a floating tensor, but got int64");
  auto ctx = impl_->context;
  const int world = size_;
  const auto timeout = timeout_;
  return enqueue("all_reduce", &tensor, to_string(op), [=, t = tensor](uint32_t tag) mutable {
    Tensor host = staged(t);
    by_dtype(t.dtype(), [&]<typename T>(T*) {
      gloo::AllreduceOptions o(ctx);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setOutput(host.data<T>(), size_t(host.numel()));
      o.setReduceFunction(reduce_fn<T>(op));
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::allreduce(o);
      if (op == ReduceOp::Avg) divide(host.data<T>(), host.numel(), world);
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
  TD_CHECK_SHAPE(input.numel() == output.numel() * size_ && input.dtype() == output.dtype(),
                 "gloo reduce_scatter: the input must hold ", size_,
                 " chunks shaped like the output ", ::tandem::describe(output), ", but it is ",
                 ::tandem::describe(input));
  TD_CHECK_DTYPE(op != ReduceOp::Avg || input.dtype() != DType::i64,
                 "gloo reduce_scatter: avg needs a floating tensor, but got int64");
  auto ctx = impl_->context;
  const int world = size_;
  return enqueue(
      "reduce_scatter", &input, to_string(op), [=, in = input, out = output](uint32_t) mutable {
        // The classic algorithm reduces in a scratch copy of the input and leaves this rank's
        // chunk at the start of it (checked with 2, 3 and 4 ranks in comm_test).
        Tensor buf = ::tandem::detail::convert(in, Device::cpu(), in.dtype());
        const int64_t chunk = out.numel();
        by_dtype(in.dtype(), [&]<typename T>(T*) {
          const std::vector<int> recv(static_cast<size_t>(world), static_cast<int>(chunk));
          gloo::ReduceScatterHalvingDoubling<T> algo(ctx, {buf.data<T>()}, int(buf.numel()), recv,
                                                     classic_fn<T>(op));
          algo.run();
          if (op == ReduceOp::Avg) divide(buf.data<T>(), chunk, world);
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
