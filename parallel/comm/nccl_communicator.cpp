// parallel/comm/nccl_communicator.cpp — collectives between GPUs over NCCL. Rank 0 makes the
// unique id and publishes it through the store. The communicator is non-blocking
// (config.blocking = 0), so neither its creation nor a collective can hang the caller: a watcher
// thread polls each collective's completion event and ncclCommGetAsyncError, and past the
// deadline calls ncclCommAbort, which turns a hang into a DistributedError.
// Ordering: a collective runs on the communicator's own stream after an event recorded on the
// caller's (default) stream, so it sees the gradients the backward kernels wrote; Work::wait()
// returns once the collective's completion event has fired.
#include <cuda_runtime.h>
#include <nccl.h>
#include <tandem/core/check.h>
#include <tandem/core/cuda/stream.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/parallel/comm/nccl_communicator.h>
#include <tandem/parallel/comm/nccl_names.h>
#include <algorithm>
#include <deque>
#include <thread>

namespace tandem::parallel {
namespace {

using Clock = std::chrono::steady_clock;
using detail::cuda_check;
using detail::nccl_dtype;
using detail::nccl_op;

struct Pending {
  WorkPtr work;
  cudaEvent_t done;
  Clock::time_point deadline;
  std::vector<Tensor> keep_alive;  // buffers the collective reads or writes
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Store> store, int rank, int size, Device device,
                   std::chrono::milliseconds timeout)
      : Communicator(rank, size, timeout), device_(device) {
    TD_CHECK_DEVICE(device.is_cuda(), "nccl backend: rank ", rank, " was given ", device,
                    ", but NCCL needs a cuda:N device\n  hint: use backend \"gloo\" for CPU");
    cuda_check(cudaSetDevice(device.index()), "cudaSetDevice", rank);
    ncclUniqueId id;
    if (rank == 0) {
      nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store->set("nccl_unique_id", Bytes(reinterpret_cast<uint8_t*>(&id),
                                         reinterpret_cast<uint8_t*>(&id) + sizeof(id)));
    }
    const Bytes got = store->get("nccl_unique_id");
    TD_CHECK_AS(DistributedError, got.size() == sizeof(id), "nccl: the unique id in the store has ",
                got.size(), " bytes, expected ", sizeof(id));
    std::memcpy(&id, got.data(), sizeof(id));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking =
        0;  // calls return ncclInProgress instead of blocking; we poll with a deadline
    nccl_check(ncclCommInitRankConfig(&comm_, size, id, rank, &config), "ncclCommInitRankConfig");
    wait_ready("ncclCommInitRankConfig", Clock::now() + timeout);
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate",
               rank);
    watcher_ = std::thread([this] { watch(); });
  }

  // A sub-group's communicator (new_group): `comm` from ncclCommSplit, still initialising.
  NcclCommunicator(ncclComm_t comm, int rank, int size, Device device,
                   std::chrono::milliseconds timeout)
      : Communicator(rank, size, timeout), device_(device), comm_(comm) {
    cuda_check(cudaSetDevice(device.index()), "cudaSetDevice", rank);
    wait_ready("ncclCommSplit", Clock::now() + timeout);
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate",
               rank);
    watcher_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watcher_.join();
    if (aborted_) {
      ncclCommAbort(comm_);
    } else {
      ncclCommFinalize(comm_);
      wait_ready("ncclCommFinalize", Clock::now() + std::chrono::seconds(10), /*nothrow=*/true);
      ncclCommDestroy(comm_);
    }
    cudaStreamDestroy(stream_);
  }

  std::string backend() const override { return "nccl"; }

  WorkPtr all_reduce(Tensor& t, ReduceOp op) override {
    check(t, "all_reduce");
    check_reduce_op(op, "all_reduce");
    return launch("all_reduce", &t, name(op), {t}, [&] {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_dtype(t.dtype()),
                           nccl_op(op), comm_, stream_);
    });
  }

  WorkPtr broadcast(Tensor& t, int root) override {
    check(t, "broadcast");
    TD_CHECK_VALUE(root >= 0 && root < size_, "nccl broadcast: root ", root,
                   " is not a rank of a world of size ", size_);
    return launch("broadcast", &t, "root " + std::to_string(root), {t}, [&] {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_dtype(t.dtype()),
                           root, comm_, stream_);
    });
  }

  WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    check(input, "all_gather");
    TD_CHECK_VALUE(int(outputs.size()) == size_, "nccl all_gather: expected ", size_,
                   " outputs, but got ", outputs.size());
    for (Tensor& o : outputs) {
      check(o, "all_gather");
      TD_CHECK_SHAPE(o.shape() == input.shape() && o.dtype() == input.dtype(),
                     "nccl all_gather: every output must match the input ",
                     ::tandem::describe(input), ", but one is ", ::tandem::describe(o));
    }
    Shape all_shape{int64_t(size_)};
    for (int64_t d : input.shape()) all_shape.push_back(d);
    Tensor all = empty(all_shape, input.options());
    std::vector<Tensor> keep = outputs;
    keep.push_back(input);
    keep.push_back(all);
    return launch("all_gather", &input, "", keep, [&] {
      ncclResult_t r = ncclAllGather(input.data_ptr(), all.data_ptr(), size_t(input.numel()),
                                     nccl_dtype(input.dtype()), comm_, stream_);
      for (int i = 0; i < size_ && (r == ncclSuccess || r == ncclInProgress); ++i) {
        auto* src = static_cast<char*>(all.data_ptr()) + size_t(i) * input.nbytes();
        cuda_check(cudaMemcpyAsync(outputs[size_t(i)].data_ptr(), src, input.nbytes(),
                                   cudaMemcpyDeviceToDevice, stream_),
                   "cudaMemcpyAsync", rank_);
      }
      return r;
    });
  }

  WorkPtr reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) override {
    check(input, "reduce_scatter");
    check(output, "reduce_scatter");
    check_reduce_op(op, "reduce_scatter");
    TD_CHECK_SHAPE(input.numel() == output.numel() * size_ && input.dtype() == output.dtype(),
                   "nccl reduce_scatter: the input must hold ", size_,
                   " chunks shaped like the output ", ::tandem::describe(output), ", but it is ",
                   ::tandem::describe(input));
    return launch("reduce_scatter", &input, name(op), {input, output}, [&] {
      return ncclReduceScatter(input.data_ptr(), output.data_ptr(), size_t(output.numel()),
                               nccl_dtype(input.dtype()), nccl_op(op), comm_, stream_);
    });
  }

  WorkPtr all_to_all(Tensor& output, const Tensor& input) override {
    check_all_to_all(output, input);
    check(input, "all_to_all");
    check(output, "all_to_all");
    // NCCL has no all-to-all call: one grouped send and receive per peer is one.
    const std::vector<int64_t> equal(size_t(size_), input.numel() / size_);
    return launch("all_to_all", &input, "", {input, output},
                  [&] { return exchange(input, output, equal, equal); });
  }

  WorkPtr send(const Tensor& t, int dst) override {
    check(t, "send");
    check_peer(dst, "send");
    return launch("send", &t, "to rank " + std::to_string(dst), {t}, [&] {
      return ncclSend(t.data_ptr(), size_t(t.numel()), nccl_dtype(t.dtype()), dst, comm_, stream_);
    });
  }

  WorkPtr recv(Tensor& t, int src) override {
    check(t, "recv");
    check_peer(src, "recv");
    return launch("recv", &t, "from rank " + std::to_string(src), {t}, [&] {
      return ncclRecv(t.data_ptr(), size_t(t.numel()), nccl_dtype(t.dtype()), src, comm_, stream_);
    });
  }

  // A grouped send and receive per peer with a part (NCCL has no all-to-all-v call).
  WorkPtr all_to_all_v(Tensor& output, const Tensor& input,
                       const std::vector<int64_t>& output_splits,
                       const std::vector<int64_t>& input_splits) override {
    const int64_t sent = check_all_to_all_v(output, input, output_splits, input_splits);
    check(input, "all_to_all_v");
    check(output, "all_to_all_v");
    int64_t per_row = 1;
    for (int64_t d = 1; d < input.dim(); ++d) per_row *= input.size(d);
    std::vector<int64_t> send(input_splits), recv(output_splits);
    for (int64_t& n : send) n *= per_row;
    for (int64_t& n : recv) n *= per_row;
    return launch(
        "all_to_all_v", &input, "", {input, output},
        [&] { return exchange(input, output, send, recv); }, sent);
  }

  // One grouped send of send[i] elements to, and receive of recv[i] from, each peer i, the parts
  // side by side in rank order (none for an empty part).
  ncclResult_t exchange(const Tensor& input, Tensor& output, const std::vector<int64_t>& send,
                        const std::vector<int64_t>& recv) {
    const size_t es = element_size(input.dtype());
    ncclResult_t r = ncclGroupStart();
    int64_t in_at = 0, out_at = 0;
    for (int peer = 0; peer < size_ && (r == ncclSuccess || r == ncclInProgress); ++peer) {
      const char* in = static_cast<const char*>(input.data_ptr()) + size_t(in_at) * es;
      char* out = static_cast<char*>(output.data_ptr()) + size_t(out_at) * es;
      if (send[size_t(peer)] > 0)
        r = ncclSend(in, size_t(send[size_t(peer)]), nccl_dtype(input.dtype()), peer, comm_,
                     stream_);
      if (recv[size_t(peer)] > 0 && (r == ncclSuccess || r == ncclInProgress))
        r = ncclRecv(out, size_t(recv[size_t(peer)]), nccl_dtype(input.dtype()), peer, comm_,
                     stream_);
      in_at += send[size_t(peer)], out_at += recv[size_t(peer)];
    }
    const ncclResult_t end = ncclGroupEnd();
    return r == ncclSuccess ? end : r;
  }

  // new_group: ncclCommSplit, which every rank of this communicator calls (a rank outside
  // `ranks` with NCCL_SPLIT_NOCOLOR, getting no communicator). Non-blocking like this one: the
  // split is polled until done, the child until ready.
  std::shared_ptr<Communicator> make_subgroup(const std::vector<int>& ranks, int index,
                                              const std::string&) override {
    std::lock_guard lk(mu_);
    TD_CHECK_AS(DistributedError, !aborted_, "nccl new_group on rank ", rank_,
                ": the communicator was aborted after an earlier failure; restart the job");
    cuda_check(cudaSetDevice(device_.index()), "cudaSetDevice", rank_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t sub = nullptr;
    nccl_check(ncclCommSplit(comm_, index >= 0 ? 0 : NCCL_SPLIT_NOCOLOR, std::max(index, 0), &sub,
                             &config),
               "ncclCommSplit");
    wait_ready("ncclCommSplit", Clock::now() + timeout_);
    if (index < 0) return nullptr;
    return std::make_shared<NcclCommunicator>(sub, index, int(ranks.size()), device_, timeout_);
  }

  WorkPtr barrier() override {
    // NCCL has no barrier: a one-element all-reduce is one.
    Tensor one = ones({1}, {.device = device_});
    return launch("barrier", nullptr, "", {one}, [&] {
      return ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclFloat32, ncclSum, comm_, stream_);
    });
  }

 private:
  void nccl_check(ncclResult_t r, const char* what) {
    TD_CHECK_AS(DistributedError, r == ncclSuccess || r == ncclInProgress, "nccl ", what,
                " on rank ", rank_, " of ", size_, " failed: ", ncclGetErrorString(r), " (",
                ncclGetLastError(comm_), ")");
  }

  // Polls the non-blocking communicator until it is ready, aborting it past the deadline.
  void wait_ready(const char* what, Clock::time_point deadline, bool nothrow = false) {
    ncclResult_t state = ncclInProgress;
    while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress) {
      if (Clock::now() > deadline) {
        ncclCommAbort(comm_);
        aborted_ = true;
        if (nothrow) return;
        ::tandem::detail::fail<DistributedError>(
            "nccl ", what, " on rank ", rank_, " of ", size_, " did not finish within ",
            timeout_.count() / 1000.0,
            " s; the communicator was aborted\n  hint: did every rank "
            "start, each with its own GPU?");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!nothrow) nccl_check(state, what);
  }

  void check(const Tensor& t, const char* what) const {
    check_tensor(t, what);
    TD_CHECK_DEVICE(t.device() == device_, "nccl ", what, ": the tensor ", ::tandem::describe(t),
                    " is not on this communicator's device ", device_,
                    "\n  hint: move it with .to(", device_, ") or use the gloo backend");
  }

  template <typename Enqueue>
  // `counted` >= 0: the Work counts that many elements of t's dtype (all_to_all_v's sent ones).
  WorkPtr launch(const char* op, const Tensor* t, const std::string& extra,
                 std::vector<Tensor> keep, Enqueue&& enqueue, int64_t counted = -1) {
    std::lock_guard lk(mu_);
    TD_CHECK_AS(DistributedError, !aborted_, "nccl ", op, " on rank ", rank_,
                ": the communicator was aborted after an earlier failure; restart the job");
    const uint64_t seq = next_seq_++;
    auto work = counted >= 0 ? new_work(op, seq, counted, t->dtype(), extra, timeout_)
                             : new_work(op, seq, t, extra, timeout_);
    // On this communicator's device for the call, the caller's current device again after it.
    int caller_device = 0;
    cuda_check(cudaGetDevice(&caller_device), "cudaGetDevice", rank_);
    struct Restore {
      int device;
      ~Restore() { cudaSetDevice(device); }
    } restore{caller_device};
    cuda_check(cudaSetDevice(device_.index()), "cudaSetDevice", rank_);
    cudaEvent_t ready, done;
    cuda_check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate", rank_);
    cuda_check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate", rank_);
    // The collective starts after the work already queued on the caller's current stream of the
    // device (the kernels that produced its input: the legacy default stream unless a StreamGuard
    // chose another).
    cuda_check(cudaEventRecord(ready, cuda::current_stream(device_.index())), "cudaEventRecord",
               rank_);
    cuda_check(cudaStreamWaitEvent(stream_, ready, 0), "cudaStreamWaitEvent", rank_);
    cudaEventDestroy(ready);
    // A non-blocking communicator may return before the collective is queued on stream_; the
    // completion event must be recorded after it, so wait until NCCL says the enqueue is done.
    const ncclResult_t queued = enqueue();
    if (queued == ncclInProgress) {
      wait_ready(op, Clock::now() + timeout_);
    } else {
      nccl_check(queued, op);
    }
    cuda_check(cudaEventRecord(done, stream_), "cudaEventRecord", rank_);
    pending_.push_back(Pending{work, done, Clock::now() + timeout_, std::move(keep)});
    cv_.notify_all();
    return work;
  }

  // The watcher: completes collectives in order, or aborts the communicator on error/deadline.
  void watch() {
    cudaSetDevice(device_.index());
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;
      Pending& p = pending_.front();
      const cudaError_t q = cudaEventQuery(p.done);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      std::exception_ptr error;
      if (q == cudaSuccess) {
        // done
      } else if (async != ncclSuccess && async != ncclInProgress) {
        error = std::make_exception_ptr(DistributedError(
            str("nccl ", p.work->description(), " failed: ", ncclGetErrorString(async), " (",
                ncclGetLastError(comm_),
                ")\n  hint: a peer that died or stopped calling "
                "collectives; the communicator was aborted")));
      } else if (q != cudaErrorNotReady) {
        error = std::make_exception_ptr(
            CudaError(str("nccl ", p.work->description(), ": ", cudaGetErrorString(q))));
      } else if (Clock::now() > p.deadline) {
        error = std::make_exception_ptr(DistributedError(
            str("nccl ", p.work->description(), " did not complete within ",
                timeout_.count() / 1000.0, " s; the communicator was aborted (ncclCommAbort)")));
      } else {
        lk.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        lk.lock();
        continue;
      }
      if (error && !aborted_) {
        ncclCommAbort(comm_);
        aborted_ = true;
      }
      // After an abort every later collective fails with the same error.
      for (bool first = true; !pending_.empty() && (first || error); first = false) {
        Pending done = std::move(pending_.front());
        pending_.pop_front();
        cudaEventDestroy(done.done);
        done.work->mark_done(error);
      }
    }
  }

  const Device device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  uint64_t next_seq_ = 0;
  bool stop_ = false;
  bool aborted_ = false;
  std::thread watcher_;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Store> store, int rank,
                                                     int size, Device device,
                                                     std::chrono::milliseconds timeout) {
  return std::make_shared<NcclCommunicator>(std::move(store), rank, size, device, timeout);
}

bool nccl_available() { return true; }

}  // namespace tandem::parallel
