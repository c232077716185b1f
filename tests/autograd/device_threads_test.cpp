// The engine on several devices and threads: a backward thread per device, bit-identical results,
// errors that name the device, concurrent backward passes over shared leaves, nested backward and
// its callbacks, hook handles, and the thread-local state the workers inherit.
#include <tandem/autograd/engine.h>
#include <tandem/autograd/saved_tensor.h>
#include <tandem/autograd/thread_local_state.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/thread_pool.h>
#include <tandem/core/trace.h>
#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/temp_dir.h"
#include "support/expect.h"

namespace tandem {
namespace {

using tandem::testing::error_message;
using ::testing::HasSubstr;

constexpr int kDevices = 4;

// Branch k of the graph lives on `devices[k]`: x is copied there, goes through `layers` tanh
// layers of width `width`, and the branch's sum comes back to cpu:0, where the branches are added.
struct Branches {
  std::vector<Tensor> weights;  // one leaf per branch and layer
  Tensor x;                     // a shared leaf on cpu:0: its gradient has kDevices parts

  Branches(const std::vector<Device>& devices, int layers, int64_t width, int64_t batch) {
    manual_seed(7);
    x = randn({batch, width}, {.dtype = kFloat64}).requires_grad_();
    for (size_t k = 0; k < devices.size(); ++k)
      for (int l = 0; l < layers; ++l)
        weights.push_back(
            (randn({width, width}, {.dtype = kFloat64}) * (1.0 / std::sqrt(double(width))))
                .to(devices[k])
                .detach()
                .requires_grad_());
  }

  Tensor loss(const std::vector<Device>& devices, int layers) const {
    Tensor total;
    for (size_t k = 0; k < devices.size(); ++k) {
      Tensor h = x.to(devices[k]);
      for (int l = 0; l < layers; ++l) h = linear(h, weights[k * layers + l], Tensor()).tanh();
      Tensor part = (h * h).sum().to(Device::cpu());
      total = total.defined() ? total + part : part;
    }
    return total;
  }
};

std::vector<Device> cpus(int n, bool spread) {
  std::vector<Device> d;
  for (int k = 0; k < n; ++k) d.push_back(Device::cpu(spread ? k : 0));
  return d;
}

void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  const auto va = a.to(Device::cpu()).to_vector<double>(),
             vb = b.to(Device::cpu()).to_vector<double>();
  ASSERT_EQ(va.size(), vb.size()) << what;
  for (size_t i = 0; i < va.size(); ++i)
    ASSERT_EQ(va[i], vb[i]) << what << " differs at element " << i;
}

TEST(DeviceThreads, FourCpuDevicesGiveTheBitsOfOneDevice) {
  const int layers = 3;
  Branches one(cpus(kDevices, false), layers, 64, 32);
  one.loss(cpus(kDevices, false), layers).backward();
  for (int run = 0; run < 2; ++run) {  // and the same bits every time
    Branches four(cpus(kDevices, true), layers, 64, 32);
    four.loss(cpus(kDevices, true), layers).backward();
    expect_bitwise_equal(four.x.grad(), one.x.grad(), "x.grad (summed from four devices)");
    for (size_t i = 0; i < one.weights.size(); ++i) {
      EXPECT_EQ(four.weights[i].grad().device(), Device::cpu(int(i) / layers));
      expect_bitwise_equal(four.weights[i].grad(), one.weights[i].grad(),
                           "weight " + std::to_string(i));
    }
  }
}

// Whether two devices' backward ops overlap is up to the scheduler: on a 2-core host that other
// work is loading, one pass may run them one after the other. The threads are checked on every
// pass; the overlap must show in one of up to five.
TEST(DeviceThreads, TheTraceShowsDevicesRunningBackwardAtTheSameTime) {
  tandem::testing::TempDir dir;
  const int layers = 4;
  int overlaps = 0;
  for (int attempt = 0; attempt < 5 && overlaps == 0; ++attempt) {
    Branches g(cpus(kDevices, true), layers, 256, 128);
    Tensor loss = g.loss(cpus(kDevices, true), layers);
    trace::clear();
    trace::enable();
    loss.backward();
    trace::enable(false);
    trace::write_chrome_trace(dir.file("t.json"));
    trace::clear();
    const auto j = nlohmann::json::parse(tandem::testing::read_bytes(dir.file("t.json")));
    struct Span {
      int64_t tid, begin, end;
    };
    std::map<std::string, std::vector<Span>> by_device;  // "cpu:1" -> its linear backward spans
    for (const auto& e : j["traceEvents"]) {
      if (e["ph"] != "X" || e["cat"] != "backward") continue;
      const std::string name = e["name"];
      const auto open = name.find('[');
      if (name.rfind("linear", 0) != 0 || open == std::string::npos) continue;
      const std::string device = name.substr(open + 1, name.size() - open - 2);
      by_device[device].push_back({e["tid"], e["ts"], int64_t(e["ts"]) + int64_t(e["dur"])});
    }
    ASSERT_EQ(by_device.size(), size_t(kDevices));
    std::map<int64_t, std::string> thread_of;
    for (const auto& [device, spans] : by_device) {
      ASSERT_EQ(spans.size(), size_t(layers)) << device;
      for (const Span& s : spans) {
        EXPECT_EQ(s.tid, spans[0].tid) << device << "'s ops ran on one thread";
        thread_of.emplace(s.tid, device);
      }
    }
    EXPECT_EQ(thread_of.size(), size_t(kDevices)) << "each device has its own backward thread";
    for (const auto& [d1, s1] : by_device)
      for (const auto& [d2, s2] : by_device)
        if (d1 < d2)
          for (const Span& a : s1)
            for (const Span& b : s2) overlaps += a.begin < b.end && b.begin < a.end;
  }
  EXPECT_GT(overlaps, 0) << "no two devices' backward ops overlapped in time, in five passes";
}

TEST(DeviceThreads, AnErrorOnADeviceNamesTheOpAndTheDeviceAndTheEngineGoesOn) {
  Tensor w = ones({4}, {.device = Device::cpu(2)}).requires_grad_();
  Tensor h = w * 2.0;
  h.register_hook([](const Tensor&) -> Tensor { throw ValueError("the hook failed on purpose"); });
  Tensor loss = (h.to(Device::cpu()) + ones({4}).requires_grad_()).sum();
  const std::string msg = error_message<ValueError>([&] { loss.backward(); });  // type kept
  EXPECT_THAT(msg, HasSubstr("backward of 'mul' on cpu:2"));
  EXPECT_THAT(msg, HasSubstr("the hook failed on purpose"));
  Tensor v = ones({4}, {.device = Device::cpu(2)}).requires_grad_();
  (v * 3.0).to(Device::cpu()).sum().backward();  // the cpu:2 worker still works
  EXPECT_EQ(v.grad().to(Device::cpu()).to_vector<double>(), std::vector<double>(4, 3.0));
}

TEST(DeviceThreads, TwoThreadsRunningBackwardOnSharedLeavesSumTheirGradients) {
  Tensor w = ones({64, 64}, {.dtype = kFloat64}).requires_grad_();
  Tensor w1 = ones({64, 64}, {.dtype = kFloat64, .device = Device::cpu(1)}).requires_grad_();
  constexpr int kSteps = 20;
  auto work = [&](double scale) {
    for (int i = 0; i < kSteps; ++i) {
      Tensor x = full({8, 64}, scale, {.dtype = kFloat64});
      (linear(x, w, Tensor()).sum() +
       linear(x.to(Device::cpu(1)), w1, Tensor()).sum().to(Device::cpu()))
          .backward();
    }
  };
  std::thread a(work, 1.0), b(work, 2.0);
  a.join();
  b.join();
  // d/dw Σ x·wᵀ = Σ_rows x: 8 rows of `scale`, so (1 + 2) · 8 per step per element.
  EXPECT_EQ(w.grad().to_vector<double>(), std::vector<double>(64 * 64, 3.0 * 8 * kSteps));
  EXPECT_EQ(w1.grad().to(Device::cpu()).to_vector<double>(),
            std::vector<double>(64 * 64, 3.0 * 8 * kSteps));
}

TEST(DeviceThreads, NestedBackwardHandsItsCallbacksToTheOutermostPass) {
  Tensor w = tensor({1.0, 2.0}).requires_grad_();
  Tensor other = tensor({3.0}, {.device = Device::cpu(1)}).requires_grad_();
  std::vector<std::string> events;
  std::mutex mu;
  auto log = [&](std::string e) {
    std::lock_guard lk(mu);
    events.push_back(std::move(e));
  };
  other.register_post_accumulate_grad_hook([&](const Tensor&) {
    log("inner accumulated");
    queue_callback([&] { log("callback"); });
  });
  Tensor h = w * 3.0;
  h.register_hook([&](const Tensor& g) {
    EnableGradGuard grad;              // hooks run under no-grad, as the rest of backward
    (other * other).sum().backward();  // a backward inside backward, on another device
    log("inner done");
    return g;
  });
  w.register_post_accumulate_grad_hook([&](const Tensor&) { log("outer accumulated"); });
  h.sum().backward();
  EXPECT_EQ(events, (std::vector<std::string>{"inner accumulated", "inner done",
                                              "outer accumulated", "callback"}));
  EXPECT_EQ(other.grad().to(Device::cpu()).to_vector<double>(), std::vector<double>{6.0});
}

TEST(DeviceThreads, HookHandlesRemoveTheirHooks) {
  Tensor w = tensor({1.0}).requires_grad_();
  int pre = 0, post = 0;
  HookHandle a = w.register_hook([&](const Tensor&) {
    ++pre;
    return Tensor();
  });
  HookHandle b = w.register_post_accumulate_grad_hook([&](const Tensor&) { ++post; });
  Tensor h = w * 2.0;
  int nonleaf = 0;
  HookHandle c = h.register_hook([&](const Tensor&) {
    ++nonleaf;
    return Tensor();
  });
  c.remove();
  h.sum().backward();
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(post, 1);
  EXPECT_EQ(nonleaf, 0);
  a.remove();
  b.remove();
  b.remove();  // twice is fine
  (w * 2.0).sum().backward();
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(post, 1);
}

TEST(DeviceThreads, WorkersRunUnderTheCallersThreadLocalState) {
  Tensor w = ones({2}, {.device = Device::cpu(3)}).requires_grad_();
  std::atomic<bool> non_blocking{false}, hooks_seen{false}, grad_mode{true};
  std::atomic<bool> on_other_thread{false};
  const auto caller = std::this_thread::get_id();
  Tensor h = w * 2.0;
  h.register_hook([&](const Tensor&) {
    on_other_thread = std::this_thread::get_id() != caller;
    non_blocking = cuda::non_blocking_copies();
    hooks_seen = SavedTensorHooks::current() != nullptr;
    grad_mode = GradMode::is_enabled();
    return Tensor();
  });
  Tensor loss = h.to(Device::cpu()).sum();
  {
    cuda::NonBlockingCopies nb;
    SavedTensorHooks hooks([](const Tensor& t) { return std::any(t); },
                           [](const std::any& a) { return std::any_cast<Tensor>(a); });
    loss.backward();
  }
  EXPECT_TRUE(on_other_thread) << "cpu:3's node ran on cpu:3's backward thread";
  EXPECT_TRUE(non_blocking);
  EXPECT_TRUE(hooks_seen);
  EXPECT_FALSE(grad_mode) << "backward runs with grad mode off";
  ThreadLocalState captured;
  {
    NoGradGuard off;
    captured = ThreadLocalState::capture();
  }
  std::thread([&] {
    EXPECT_TRUE(GradMode::is_enabled());
    ThreadLocalStateGuard g(captured);
    EXPECT_FALSE(GradMode::is_enabled());
  }).join();
}

// A backward whose CPU nodes run on two threads (cpu and cpu:1) gives each half the caller's
// intra-op threads, so that the two do not fight over the cores; one on a single device keeps all.
TEST(DeviceThreads, TwoCpuThreadsShareTheCallersIntraOpThreads) {
  set_num_threads(4);
  auto threads_in_backward = [](Device a, Device b) {
    Tensor wa = ones({2}, {.device = a}).requires_grad_();
    Tensor wb = ones({2}, {.device = b}).requires_grad_();
    std::atomic<int> seen_a{0}, seen_b{0};
    Tensor ha = wa * 2.0, hb = wb * 3.0;
    ha.register_hook([&](const Tensor&) {
      seen_a = intra_op_threads();
      return Tensor();
    });
    hb.register_hook([&](const Tensor&) {
      seen_b = intra_op_threads();
      return Tensor();
    });
    if (a == b)
      (ha.sum() + hb.sum()).backward();  // every node on one device's thread
    else
      (ha.to(Device::cpu()).sum() + hb.to(Device::cpu()).sum()).backward();
    return std::make_pair(seen_a.load(), seen_b.load());
  };
  EXPECT_EQ(threads_in_backward(Device::cpu(0), Device::cpu(1)), std::make_pair(2, 2));
  EXPECT_EQ(threads_in_backward(Device::cpu(2), Device::cpu(2)), std::make_pair(4, 4));
  {
    IntraOpThreadsGuard one(1);  // the caller's cap is the budget that is shared
    EXPECT_EQ(threads_in_backward(Device::cpu(0), Device::cpu(1)), std::make_pair(1, 1));
  }
  set_num_threads(int(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(DeviceThreads, TurnedOffEverythingRunsOnTheCallingThreadWithTheSameBits) {
  const int layers = 2;
  Branches threaded(cpus(kDevices, true), layers, 32, 16);
  threaded.loss(cpus(kDevices, true), layers).backward();
  set_backward_device_threads(false);
  Branches serial(cpus(kDevices, true), layers, 32, 16);
  serial.loss(cpus(kDevices, true), layers).backward();
  set_backward_device_threads(true);
  expect_bitwise_equal(serial.x.grad(), threaded.x.grad(), "x.grad");
  for (size_t i = 0; i < serial.weights.size(); ++i)
    expect_bitwise_equal(serial.weights[i].grad(), threaded.weights[i].grad(), "weight");
}

}  // namespace
}  // namespace tandem
