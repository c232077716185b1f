// tests/parallel/trace_test.cpp — the Chrome trace of a DDP step shows what the design promises:
// backward ops on the training thread, bucket all-reduces on the communication thread, and the
// first bucket launched while backward is still running (the overlap), one file per rank.
#include <tandem/core/trace.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>

#include <nlohmann/json.hpp>

#include "data/temp_dir.h"
#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

TEST(Trace, ADdpStepShowsBackwardOpsBucketAllReducesAndTheirOverlap) {
  tandem::testing::TempDir dir;
  spawn(
      [&](int rank) {
        trace::enable();
        trace::set_process(rank, "rank " + std::to_string(rank));
        trace::set_thread_name("training");
        // Gloo: its collectives always run on their own thread (shared memory runs one issued
        // while idle in the caller's thread, so its all-reduces would sit on the backward track).
        init_process_group({.backend = "gloo", .timeout = std::chrono::seconds(60)});
        tandem::testing::Mlp model;
        // First bucket 5 KiB: fc3 and fc2.bias, ready before fc1's backward runs.
        DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.05, .first_bucket_mb = 0.005});
        auto [x, y] = tandem::testing::synthetic_data(16);
        cross_entropy(ddp(x), y).backward();
        trace::write_chrome_trace(dir.file("trace-rank" + std::to_string(rank) + ".json"));
        destroy_process_group();
      },
      2);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string text =
        tandem::testing::read_bytes(dir.file("trace-rank" + std::to_string(rank) + ".json"));
    const auto j = nlohmann::json::parse(text);
    int64_t last_backward_end = 0, first_launch = -1;
    int backward_ops = 0, all_reduces = 0;
    std::set<int64_t> comm_threads, backward_threads;
    for (const auto& e : j["traceEvents"]) {
      const std::string cat = e.value("cat", ""), name = e.value("name", "");
      if (cat == "backward") {
        ++backward_ops;
        backward_threads.insert(e["tid"].get<int64_t>());
        last_backward_end =
            std::max(last_backward_end, e["ts"].get<int64_t>() + e["dur"].get<int64_t>());
      }
      if (cat == "comm" && name.rfind("all_reduce #", 0) == 0) {
        ++all_reduces;
        comm_threads.insert(e["tid"].get<int64_t>());
      }
      if (cat == "ddp" && name == "bucket 0 launched" && first_launch < 0)
        first_launch = e["ts"].get<int64_t>();
      EXPECT_EQ(e["pid"].get<int>(), rank);
    }
    EXPECT_GE(backward_ops, 6) << "linear, relu, ... backward spans";
    EXPECT_GE(all_reduces, 3) << "the buckets (plus construction broadcasts are not all_reduces)";
    EXPECT_EQ(comm_threads.size(), 1u);
    EXPECT_TRUE(backward_threads.size() == 1 && *backward_threads.begin() != *comm_threads.begin())
        << "communication runs on its own thread";
    ASSERT_GE(first_launch, 0);
    EXPECT_LT(first_launch, last_backward_end) << "bucket 0 started before backward finished";
  }
}

// A named track stays named in traces written after clear() (which drops events, not names).
TEST(Trace, ThreadNamesSurviveClear) {
  tandem::testing::TempDir dir;
  trace::enable();
  trace::set_thread_name("the test thread");
  trace::clear();
  trace::record("after clear", "test", trace::now_us(), trace::now_us() + 1);
  trace::write_chrome_trace(dir.file("t.json"));
  trace::enable(false);
  trace::clear();
  const auto j = nlohmann::json::parse(tandem::testing::read_bytes(dir.file("t.json")));
  int64_t named_tid = -1, event_tid = -2;
  for (const auto& e : j["traceEvents"]) {
    if (e["name"] == "thread_name" && e["args"]["name"] == "the test thread") named_tid = e["tid"];
    if (e["name"] == "after clear") event_tid = e["tid"];
  }
  EXPECT_EQ(named_tid, event_tid);
}

}  // namespace
}  // namespace tandem::parallel
