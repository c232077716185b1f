// bench/shm_vs_mpi.cpp — Open MPI's own MPI_Allreduce (sum, float32) against Tandem's
// shared-memory all-reduce, in the same two processes, round by round. Both take turns within
// every round (the order flips each round), so a change in the machine's speed between rounds
// hits both alike: on 2 vCPUs the two ranks spin on both cores, and measuring the transports one
// after the other (as this bench did before) gave shm/MPI ratios of 0.4-2.6 at one size in runs
// minutes apart. The ratio reported is the median of the per-round ratios.
// Timing rule as bench/comm_bench: the median of single calls per round. Plain MPI_Init; Tandem's
// ranks meet through a FileStore whose directory rank 0 makes and broadcasts.
//   mpirun -np 2 build-bench/bench/shm_vs_mpi [rounds] [alltoallv] > out.txt
//   (lines: bytes mpi_seconds shm_seconds ratio_median ratio_min ratio_max; ratio = shm speed /
//   MPI speed). With `alltoallv`: MPI_Alltoallv against Tandem's all_to_all_v instead, `bytes`
//   the float32s each rank sends in all, unevenly: an odd rank receives 3 times what an even one
//   does from every rank.
#include <mpi.h>
#include <tandem/parallel/comm/shm_communicator.h>
#include <tandem/parallel/store/file_store.h>
#include <tandem/tandem.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "bench_util.h"

using namespace tandem;

namespace {

// The calls per round at a size (bench/comm_bench's rule): a round lasts ~50 ms.
int reps_for(int64_t bytes) { return int(std::clamp<int64_t>((64 << 20) / bytes, 4, 400)); }

// The FileStore's directory, made by rank 0 and sent to the others.
std::string shared_directory(int rank) {
  std::array<char, 256> path{};
  if (rank == 0) {
    std::snprintf(path.data(), path.size(), "/tmp/tandem-shm-vs-mpi-XXXXXX");
    if (::mkdtemp(path.data()) == nullptr) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Bcast(path.data(), int(path.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  return path.data();
}

// The median time of one call over a round of `reps`, after a barrier.
double round_median(int reps, const std::function<void()>& call) {
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<double> calls;
  for (int i = 0; i < reps; ++i) calls.push_back(bench::time_per_call(call, 1));
  return bench::median(calls);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  const bool alltoallv = argc > 2 && std::string(argv[2]) == "alltoallv";
  const std::string dir = shared_directory(rank);
  {
    using namespace std::chrono_literals;
    parallel::ShmCommunicator shm(std::make_shared<parallel::FileStore>(dir), rank, size,
                                  {.timeout = 120s});
    for (int64_t bytes : {4L << 10, 64L << 10, 1L << 20, 4L << 20, 16L << 20, 64L << 20}) {
      std::vector<float> buf(size_t(bytes / 4), 1.0f);
      Tensor t = ones({bytes / 4});
      // all_to_all_v: rank i receives q·(1 or 3) floats from every rank (odd i: 3), q such that
      // the parts come to about `bytes` per rank.
      const int64_t q = std::max<int64_t>(1, bytes / 4 / (2 * size));
      std::vector<int64_t> send_n, recv_n;
      for (int i = 0; i < size; ++i) send_n.push_back(q * (i % 2 ? 3 : 1));
      for (int j = 0; j < size; ++j) recv_n.push_back(q * (rank % 2 ? 3 : 1));
      std::vector<int> sc, sd, rc, rd;
      int64_t s_at = 0, r_at = 0;
      for (int i = 0; i < size; ++i) {
        sc.push_back(int(send_n[size_t(i)])), sd.push_back(int(s_at)), s_at += send_n[size_t(i)];
        rc.push_back(int(recv_n[size_t(i)])), rd.push_back(int(r_at)), r_at += recv_n[size_t(i)];
      }
      std::vector<float> v_in(static_cast<size_t>(s_at), 1.0f), v_out(static_cast<size_t>(r_at));
      Tensor in_t = ones({s_at}), out_t = zeros({r_at});
      auto mpi = [&] {
        if (alltoallv)
          MPI_Alltoallv(v_in.data(), sc.data(), sd.data(), MPI_FLOAT, v_out.data(), rc.data(),
                        rd.data(), MPI_FLOAT, MPI_COMM_WORLD);
        else
          MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
      };
      auto ours = [&] {
        if (alltoallv)
          shm.all_to_all_v(out_t, in_t, recv_n, send_n)->wait();
        else
          shm.all_reduce(t)->wait();
      };
      mpi(), ours();  // first touches, the segment's pages
      std::vector<double> mpi_t, shm_t, ratio;
      for (int r = 0; r < rounds; ++r) {
        const int reps = reps_for(bytes);
        double m = 0, s = 0;
        if (r % 2 == 0) {
          m = round_median(reps, mpi), s = round_median(reps, ours);
        } else {
          s = round_median(reps, ours), m = round_median(reps, mpi);
        }
        mpi_t.push_back(m), shm_t.push_back(s), ratio.push_back(m / s);
      }
      if (rank == 0)
        std::printf("%ld %.9g %.9g %.4g %.4g %.4g\n", long(bytes), bench::median(mpi_t),
                    bench::median(shm_t), bench::median(ratio),
                    *std::min_element(ratio.begin(), ratio.end()),
                    *std::max_element(ratio.begin(), ratio.end()));
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::filesystem::remove_all(dir);
  MPI_Finalize();
  return 0;
}
