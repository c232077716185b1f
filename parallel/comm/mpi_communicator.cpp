// parallel/comm/mpi_communicator.cpp — the collectives as MPI calls. MPI counts are ints: a
// tensor of more than 2^31 - 1 elements is reduced and broadcast in pieces, and refused with a
// clear error by the collectives whose pieces would not line up (all-gather, reduce-scatter,
// all-to-all).
#include <mpi.h>
#include <tandem/core/check.h>
#include <tandem/parallel/comm/collective_queue.h>
#include <tandem/parallel/comm/dtype_dispatch.h>
#include <tandem/parallel/comm/host_staging.h>
#include <tandem/parallel/comm/mpi_communicator.h>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>

namespace tandem::parallel {

using ::tandem::parallel::detail::by_dtype;
using ::tandem::parallel::detail::staged;
using ::tandem::parallel::detail::unstage;

namespace {

constexpr int64_t kMaxCount = INT_MAX;

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  ::tandem::detail::fail<DistributedError>("mpi ", what,
                                           " failed: ", std::string(msg, size_t(len)));
}

// bfloat16 and float16 have no MPI type: they travel as 2-byte elements, and these operations
// reduce them (MPI calls fn(in, inout, len, type): inout = in ∘ inout, each element in float).
template <typename T, ReduceOp kOp>
void reduce_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = float(a[i]), y = float(b[i]);
    b[i] = T(kOp == ReduceOp::Max ? std::max(x, y) : kOp == ReduceOp::Min ? std::min(x, y) : x + y);
  }
}

struct MpiTypes {
  MPI_Datatype half = MPI_DATATYPE_NULL;     // 2 bytes, for bfloat16 and float16
  MPI_Op ops[2][3] = {};                     // [bf16, f16][sum, max, min]
  int thread_level = MPI_THREAD_SERIALIZED;  // what the library gave (MPI_Query_thread)

  MpiTypes() {
    mpi_check(MPI_Type_contiguous(2, MPI_BYTE, &half), "MPI_Type_contiguous");
    mpi_check(MPI_Type_commit(&half), "MPI_Type_commit");
    auto make = [](MPI_User_function* fn, MPI_Op* op) {
      mpi_check(MPI_Op_create(fn, 1, op), "MPI_Op_create");
    };
    make(&reduce_16bit<BFloat16, ReduceOp::Sum>, &ops[0][0]);
    make(&reduce_16bit<BFloat16, ReduceOp::Max>, &ops[0][1]);
    make(&reduce_16bit<BFloat16, ReduceOp::Min>, &ops[0][2]);
    make(&reduce_16bit<Float16, ReduceOp::Sum>, &ops[1][0]);
    make(&reduce_16bit<Float16, ReduceOp::Max>, &ops[1][1]);
    make(&reduce_16bit<Float16, ReduceOp::Min>, &ops[1][2]);
  }
};

// MPI is initialised once per process, on first use, and finalised at exit (after the
// communicators, which the program has destroyed by then or which leak their duplicate).
MpiTypes& mpi_init() {
  static MpiTypes* types = [] {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      int provided = 0;
      // Ask for MULTIPLE (sub-groups' queues call MPI at once); one group needs SERIALIZED.
      mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                "MPI_Init_thread");
      TD_CHECK_AS(DistributedError, provided >= MPI_THREAD_SERIALIZED,
                  "mpi: this MPI library gives thread level ", provided,
                  ", and Tandem needs MPI_THREAD_SERIALIZED (calls from one thread at a time)");
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    auto* t = new MpiTypes();  // lives as long as MPI does
    MPI_Query_thread(&t->thread_level);
    return t;
  }();
  return *types;
}

MPI_Datatype mpi_type(DType dt) {
  switch (dt) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i64:
      return MPI_INT64_T;
    case DType::bf16:
    case DType::f16:
      return mpi_init().half;
    default:
      ::tandem::detail::fail<DTypeError>("mpi: unsupported dtype ", dt);
  }
}

MPI_Op mpi_op(DType dt, ReduceOp op) {
  const int k = op == ReduceOp::Max ? 1 : op == ReduceOp::Min ? 2 : 0;  // mean: a sum first
  if (dt == DType::bf16 || dt == DType::f16) return mpi_init().ops[dt == DType::bf16 ? 0 : 1][k];
  return k == 1 ? MPI_MAX : k == 2 ? MPI_MIN : MPI_SUM;
}

void divide(Tensor& host, int world) {
  by_dtype(host.dtype(), [&]<typename T>(T*) {
    T* p = host.data<T>();
    for (int64_t i = 0; i < host.numel(); ++i) p[i] = T(double(p[i]) / world);  // exact for f64
  });
}

int count_of(const Tensor& t, const char* what) {
  TD_CHECK_VALUE(t.numel() <= kMaxCount, "mpi ", what, ": ", t.numel(),
                 " elements are more than an MPI count holds (2^31 - 1)");
  return int(t.numel());
}

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout)
      : Communicator(rank, size, timeout),
        comm_(comm),
        sent_(size_t(size), 0),
        received_(size_t(size), 0),
        queue_(std::make_unique<CollectiveQueue>("mpi", rank, nullptr, true,
                                                 [this] { return progress(); })) {}

  ~MpiCommunicator() override {
    queue_.reset();  // finishes queued calls (and the sends in flight: progress)
    int finalized = 0;
    MPI_Finalized(&finalized);
    // A group still alive at exit (a static) meets MPI already finalised: nothing left to free.
    if (!finalized) MPI_Comm_free(&comm_);
  }

  std::string backend() const override { return "mpi"; }

  WorkPtr all_reduce(Tensor& tensor, ReduceOp op) override {
    check_all_reduce(tensor, op);
    return enqueue("all_reduce", &tensor, name(op), [this, t = tensor, op]() mutable {
      Tensor host = staged(t);
      const MPI_Datatype type = mpi_type(t.dtype());
      const size_t es = element_size(t.dtype());
      for (int64_t off = 0; off < host.numel(); off += kMaxCount) {
        const int n = int(std::min(kMaxCount, host.numel() - off));
        mpi_check(
            MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(host.data_ptr()) + size_t(off) * es, n,
                          type, mpi_op(t.dtype(), op), comm_),
            "MPI_Allreduce");
      }
      if (op == ReduceOp::Mean) divide(host, size_);
      unstage(t, host);
    });
  }

  WorkPtr broadcast(Tensor& tensor, int root) override {
    check_broadcast(tensor, root);
    return enqueue("broadcast", &tensor, "root " + std::to_string(root),
                   [this, t = tensor, root]() mutable {
                     Tensor host = staged(t);
                     const size_t es = element_size(t.dtype());
                     for (int64_t off = 0; off < host.numel(); off += kMaxCount) {
                       const int n = int(std::min(kMaxCount, host.numel() - off));
                       mpi_check(MPI_Bcast(static_cast<char*>(host.data_ptr()) + size_t(off) * es,
                                           n, mpi_type(t.dtype()), root, comm_),
                                 "MPI_Bcast");
                     }
                     unstage(t, host);
                   });
  }

  WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    check_all_gather(outputs, input);
    const int n = count_of(input, "all_gather");
    return enqueue("all_gather", &input, "", [this, in = input, outs = outputs, n]() mutable {
      const Tensor host_in = staged(in);
      Shape all_shape{int64_t(size_)};
      for (int64_t d : in.shape()) all_shape.push_back(d);
      Tensor all = empty(all_shape, {.dtype = in.dtype()});
      mpi_check(MPI_Allgather(host_in.data_ptr(), n, mpi_type(in.dtype()), all.data_ptr(), n,
                              mpi_type(in.dtype()), comm_),
                "MPI_Allgather");
      for (int r = 0; r < size_; ++r) outs[size_t(r)].copy_(all.select(0, r));
    });
  }

  WorkPtr reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) override {
    check_reduce_scatter(output, input, op);
    const int n = count_of(output, "reduce_scatter");
    return enqueue(
        "reduce_scatter", &input, name(op), [this, in = input, out = output, op, n]() mutable {
          const Tensor host_in = staged(in);
          Tensor host_out = staged(out);
          mpi_check(MPI_Reduce_scatter_block(host_in.data_ptr(), host_out.data_ptr(), n,
                                             mpi_type(in.dtype()), mpi_op(in.dtype(), op), comm_),
                    "MPI_Reduce_scatter_block");
          if (op == ReduceOp::Mean) divide(host_out, size_);
          unstage(out, host_out);
        });
  }

  WorkPtr all_to_all(Tensor& output, const Tensor& input) override {
    check_all_to_all(output, input);
    const int n = int(count_of(input, "all_to_all") / size_);
    return enqueue("all_to_all", &input, "", [this, in = input, out = output, n]() mutable {
      const Tensor host_in = staged(in);
      Tensor host_out = staged(out);
      mpi_check(MPI_Alltoall(host_in.data_ptr(), n, mpi_type(in.dtype()), host_out.data_ptr(), n,
                             mpi_type(in.dtype()), comm_),
                "MPI_Alltoall");
      unstage(out, host_out);
    });
  }

  // MPI_Alltoallv: counts and displacements in elements, which MPI takes as ints.
  WorkPtr all_to_all_v(Tensor& output, const Tensor& input,
                       const std::vector<int64_t>& output_splits,
                       const std::vector<int64_t>& input_splits) override {
    const int64_t sent = check_all_to_all_v(output, input, output_splits, input_splits);
    int64_t per_row = 1;
    for (int64_t d = 1; d < input.dim(); ++d) per_row *= input.size(d);
    const auto ints = [&](const std::vector<int64_t>& rows, std::vector<int>& counts,
                          std::vector<int>& displs) {
      int64_t at = 0;
      for (int64_t r : rows) {
        TD_CHECK_VALUE(r * per_row <= INT32_MAX && at <= INT32_MAX,
                       "mpi all_to_all_v: ", r * per_row, " elements at element ", at,
                       " do not fit MPI's int counts; send fewer rows at once");
        counts.push_back(int(r * per_row)), displs.push_back(int(at));
        at += r * per_row;
      }
    };
    std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
    ints(input_splits, send_counts, send_displs);
    ints(output_splits, recv_counts, recv_displs);
    return enqueue_counted(
        "all_to_all_v", sent, input.dtype(),
        [this, in = input, out = output, send_counts, send_displs, recv_counts,
         recv_displs]() mutable {
          const Tensor host_in = staged(in);
          Tensor host_out = staged(out);
          mpi_check(MPI_Alltoallv(host_in.data_ptr(), send_counts.data(), send_displs.data(),
                                  mpi_type(in.dtype()), host_out.data_ptr(), recv_counts.data(),
                                  recv_displs.data(), mpi_type(in.dtype()), comm_),
                    "MPI_Alltoallv");
          unstage(out, host_out);
        });
  }

  // new_group: MPI_Comm_split of this group's communicator, run on its queue (after the
  // collectives queued before it, which every rank orders the same way). Each sub-group has a
  // queue of its own, so two groups' collectives can be in MPI at once: MPI_THREAD_MULTIPLE.
  std::shared_ptr<Communicator> make_subgroup(const std::vector<int>& ranks, int index,
                                              const std::string&) override {
    TD_CHECK_AS(DistributedError, mpi_init().thread_level >= MPI_THREAD_MULTIPLE,
                "new_group: this MPI library gives thread level ", mpi_init().thread_level,
                ", and sub-groups need MPI_THREAD_MULTIPLE (", int(MPI_THREAD_MULTIPLE),
                "): each group's queue calls MPI from a thread of its own");
    MPI_Comm sub = MPI_COMM_NULL;
    enqueue("new_group", nullptr, str(ranks.size(), " of ", size_, " ranks"), [this, index, &sub] {
      mpi_check(MPI_Comm_split(comm_, index >= 0 ? 0 : MPI_UNDEFINED, std::max(index, 0), &sub),
                "MPI_Comm_split");
    })->wait();
    if (index < 0) return nullptr;
    return std::make_shared<MpiCommunicator>(sub, index, int(ranks.size()), timeout_);
  }

  WorkPtr barrier() override {
    return enqueue("barrier", nullptr, "",
                   [this] { mpi_check(MPI_Barrier(comm_), "MPI_Barrier"); });
  }

  // A buffered send: the message is copied, posted (MPI_Isend) and the Work completes; the queue
  // keeps calling progress() until MPI has delivered it.
  WorkPtr send(const Tensor& tensor, int dst) override {
    check_tensor(tensor, "send");
    check_peer(dst, "send");
    const int n = count_of(tensor, "send");
    std::lock_guard lk(mu_);
    const uint64_t k = sent_[size_t(dst)]++;
    auto work = message_work("send", k, tensor, dst);
    queue_->push(
        work,
        [this, t = tensor, dst, n, k](uint32_t) {
          InFlight f{staged(t).clone(), MPI_REQUEST_NULL};
          mpi_check(MPI_Isend(f.buffer.data_ptr(), n, mpi_type(t.dtype()), dst, tag_of(k), comm_,
                              &f.request),
                    "MPI_Isend");
          in_flight_.push_back(std::move(f));
        },
        uint32_t(k));
    return work;
  }

  WorkPtr recv(Tensor& tensor, int src) override {
    check_tensor(tensor, "recv");
    check_peer(src, "recv");
    const int n = count_of(tensor, "recv");
    std::lock_guard lk(mu_);
    const uint64_t k = received_[size_t(src)]++;
    auto work = message_work("recv", k, tensor, src);
    queue_->push(
        work,
        [this, t = tensor, src, n, k](uint32_t) mutable {
          Tensor host = staged(t);
          MPI_Status status;
          mpi_check(
              MPI_Recv(host.data_ptr(), n, mpi_type(t.dtype()), src, tag_of(k), comm_, &status),
              "MPI_Recv");
          unstage(t, host);
        },
        uint32_t(k));
    return work;
  }

 private:
  struct InFlight {
    Tensor buffer;  // the copy MPI sends from
    MPI_Request request;
  };

  // The k-th message between two ranks carries tag k (MPI guarantees at least 32767 tags).
  static int tag_of(uint64_t k) { return int(k % 32768); }

  WorkPtr enqueue(const std::string& op, const Tensor* t, const std::string& extra,
                  std::function<void()> run) {
    std::lock_guard lk(mu_);
    const uint64_t seq = next_seq_++;
    auto work = new_work(op, seq, t, extra, timeout_);
    queue_->push(
        work, [run = std::move(run)](uint32_t) { run(); }, uint32_t(seq));
    return work;
  }
  // The same for a collective whose Work counts `numel` elements (all_to_all_v's sent ones).
  WorkPtr enqueue_counted(const std::string& op, int64_t numel, DType dtype,
                          std::function<void()> run) {
    std::lock_guard lk(mu_);
    const uint64_t seq = next_seq_++;
    auto work = new_work(op, seq, numel, dtype, "", timeout_);
    queue_->push(
        work, [run = std::move(run)](uint32_t) { run(); }, uint32_t(seq));
    return work;
  }

  // Called by the queue (one MPI caller at a time): completes the sends MPI has delivered, and
  // says whether any is still in flight (then the queue calls again soon).
  bool progress() {
    while (!in_flight_.empty()) {
      int done = 0;
      mpi_check(MPI_Test(&in_flight_.front().request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) return true;
      in_flight_.pop_front();
    }
    return false;
  }

  MPI_Comm comm_;
  std::mutex mu_;  // orders sequence numbers with the queue
  uint64_t next_seq_ = 0;
  std::vector<uint64_t> sent_, received_;
  std::deque<InFlight> in_flight_;  // the queue's thread's alone
  std::unique_ptr<CollectiveQueue> queue_;
};

}  // namespace

bool mpi_available() { return true; }

std::shared_ptr<Communicator> make_mpi_communicator(int rank, int world_size,
                                                    std::chrono::milliseconds timeout) {
  mpi_init();
  MPI_Comm comm;
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  int r = 0, n = 0;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &n);
  // A world of one asked to be more is a process MPI's launcher did not start.
  TD_CHECK_AS(DistributedError, (rank < 0 || rank == r) && (world_size < 0 || world_size == n),
              "mpi: MPI says this process is rank ", r, " of ", n, ", but it was asked to be rank ",
              rank, " of ", world_size, "\n  hint: ",
              n == 1 ? str("start the program with `mpirun -np ", world_size, " <program>`")
                     : std::string("under mpirun, leave rank and world_size unset"));
  return std::make_shared<MpiCommunicator>(comm, r, n, timeout);
}

}  // namespace tandem::parallel
