// bench/mpi_allreduce.cpp — Open MPI's own MPI_Allreduce (sum, float32) at comm_bench's sizes and
// with its timing rule (median of single calls per round, then over rounds): the peer that
// bench/comm_bench.sh puts beside Tandem's transports. Plain MPI, no Tandem.
//   mpirun -np 2 build-bench/bench/mpi_allreduce [rounds] > times.txt   (lines: bytes seconds)
#include <mpi.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  for (long bytes : {4L << 10, 64L << 10, 1L << 20, 4L << 20, 16L << 20, 64L << 20}) {
    std::vector<float> buf(size_t(bytes / 4), 1.0f);
    const int reps = int(std::clamp((64L << 20) / bytes, 4L, 400L));
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<double> per_round;
    for (int r = 0; r < rounds; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      std::vector<double> calls;
      for (int i = 0; i < reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
        calls.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      per_round.push_back(median(calls));
    }
    if (rank == 0) std::printf("%ld %.9g\n", bytes, median(per_round));
  }
  MPI_Finalize();
  return 0;
}
