// Expert parallelism (parallel/ep/plan.h) trains an MoE GPT as one device does: ep = 2, 4 and 8
// alone, dp × ep = 2 × 2 and 2 × 4 under DDP, 2 × 2 under ZeRO-1 and ZeRO-2, 2 × 2 and 2 × 4
// under fully_shard, and with tensor parallelism cutting the dense blocks (ep × tp = 2 × 2,
// dp × ep × tp = 2 × 2 × 2 under DDP and fully_shard), in float64 on thread ranks, 3 AdamW steps of
// the GPT loss plus the MoE's auxiliary losses with clipping that bites, with a capacity that drops
// tokens. The routing is one device's on every layout (the same counts, the same drops), and the
// parameters and AdamW state put together from the ranks are one device's (≤ 1e-12 relative).
#include <gtest/gtest.h>
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/parallel/whole_state.h>
#include <tandem/tandem.h>

#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "parallel/token_batch.h"

namespace tandem::parallel::expert_parallel_test {  // named: unity builds join test files
namespace {

constexpr int64_t kBatch = 8, kT = 8, kVocab = 37, kExperts = 8;
constexpr int kSteps = 3;
constexpr double kClip = 0.3, kTolerance = 1e-12;

// 2 blocks, both MoE (8 experts, top-2, capacity 1.0: some choices dropped in every step); with
// moe_every 2, block 1 dense (the one tensor parallelism cuts).
nn::Sequential moe_gpt(int64_t experts = kExperts, int64_t moe_every = 1) {
  static std::mutex drawing;  // ranks draw one at a time: the default generator is shared
  std::lock_guard lock(drawing);
  manual_seed(57);
  return nn::gpt({.block_size = kT,
                  .vocab_size = kVocab,
                  .padded_vocab_size = tp::padded_vocab_size(kVocab, 2),  // unread: for TP's cut
                  .n_layer = 2,
                  .n_head = 4,
                  .n_embd = 16,
                  .bias = true,
                  .moe_every = moe_every,
                  .moe = {.n_experts = experts, .top_k = 2, .capacity_factor = 1.0},
                  .tensor = {.dtype = kFloat64}});
}

std::pair<Tensor, Tensor> batch(int step) {
  return tandem::testing::random_token_batch(kBatch, kT, kVocab, uint64_t(step + 90));
}

optim::AdamW adamw(const nn::StateDict& named) {
  return optim::AdamW(optim::adamw_groups(named, {.lr = 1e-2, .beta2 = 0.99, .weight_decay = 0.1}));
}

// What a run routed in each step, layer by layer.
using Routing = std::vector<std::vector<int64_t>>;  // [step·layers + layer]: counts..., dropped

Routing routing_of(nn::Module& model) {
  Routing out;
  for (auto& [name, m] : nn::moe_layers(model)) {
    std::vector<int64_t> r = m->tokens_per_expert;
    r.push_back(m->dropped);
    out.push_back(r);
  }
  return out;
}

struct Trained {
  nn::StateDict params;
  optim::OptimizerState state;
  std::vector<double> losses;
  Routing routing;
};

Trained one_device(int64_t moe_every = 1) {
  nn::Sequential model = moe_gpt(kExperts, moe_every);
  optim::AdamW opt = adamw(model.named_parameters());
  Trained t;
  for (int s = 0; s < kSteps; ++s) {
    const auto [x, y] = batch(s);
    opt.zero_grad();
    const Tensor logits = model(x);  // before moe_aux_loss: it reads this forward's losses
    const Tensor loss = nn::gpt_loss(logits, y) + nn::moe_aux_loss(model);
    loss.backward();
    EXPECT_GT(optim::clip_grad_norm_(model.parameters(), kClip), kClip) << "the clip must bite";
    opt.step();
    t.losses.push_back(loss.item());
    for (auto& r : routing_of(model)) t.routing.push_back(r);
  }
  t.params = model.named_parameters();
  t.state = opt.state_dict();
  return t;
}

double relative_error(const Tensor& a, const Tensor& b) {
  const double scale = std::sqrt(sum(b * b).item());
  return std::sqrt(sum((a - b) * (a - b)).item()) / (scale > 0 ? scale : 1);
}

enum class Data { DDP, Zero1, Zero2, FullyShard };

// Rank world->rank()'s run of dp × ep, data parallelism over dp by `data`; rank 0's result (the
// whole state), the others' empty.
Trained run_layout(int dp, int ep, int tp, Data data, const std::shared_ptr<Communicator>& world) {
  DeviceMesh mesh(world, {dp, ep, tp}, {"dp", "ep", "tp"});
  const auto rows = mesh.flatten({"dp", "ep"});  // a tp group's ranks share their rows
  const Device dev = Device::cpu(world->rank());
  auto table = std::make_shared<PlacementTable>();
  nn::Sequential whole = moe_gpt(kExperts, tp > 1 ? 2 : 1);
  if (tp > 1)  // the dense blocks' attention and MLP cut; the MoE whole on every tp rank
    whole = tp::tensor_parallel_gpt(whole, mesh.group("tp"), {.placements = table});
  auto model = std::make_shared<nn::Sequential>(
      ep::expert_parallel(whole, mesh.group("ep"), {.rows = rows, .placements = table}));
  move_to(*model, dev, *table);
  std::shared_ptr<DistributedDataParallel<nn::Sequential>> ddp;
  std::shared_ptr<FullyShardedModule> fsdp;
  if (dp > 1 && data == Data::FullyShard)
    fsdp = std::make_shared<FullyShardedModule>(
        model, FullyShardOptions{.group = mesh.group("dp"), .placements = table});
  else if (dp > 1)
    ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(
        *model, DDPOptions{.group = mesh.group("dp"),
                           .bucket_cap_mb = 0.01,
                           .zero_stage = data == Data::Zero1   ? 1
                                         : data == Data::Zero2 ? 2
                                                               : 0,
                           .placements = table});
  const auto groups = optim::adamw_groups(model->named_parameters(),
                                          {.lr = 1e-2, .beta2 = 0.99, .weight_decay = 0.1}, true);
  std::shared_ptr<optim::Optimizer> opt;
  optim::Optimizer* local = nullptr;
  if (ddp && data != Data::DDP) {
    std::shared_ptr<ZeroOptimizer> zero = zero_optimizer<optim::AdamW>(*ddp, groups);
    local = &zero->inner();
    opt = zero;
  } else {
    opt = std::make_shared<optim::AdamW>(groups);
    local = opt.get();
  }
  Trained t;
  const int64_t n = kBatch / rows->size(), k = rows->rank();
  for (int s = 0; s < kSteps; ++s) {
    const auto [x, y] = batch(s);
    opt->zero_grad();
    const Tensor xs = x.narrow(0, k * n, n).to(dev), ys = y.narrow(0, k * n, n).to(dev);
    const Tensor logits = fsdp ? (*fsdp)(xs) : ddp ? (*ddp)(xs) : (*model)(xs);
    const Tensor ce =
        tp > 1 ? tp::gpt_loss(logits, ys, mesh.group("tp")) : nn::gpt_loss(logits, ys);
    const Tensor loss = ce + nn::moe_aux_loss(*model);
    loss.backward();
    ep::reduce_gradients(*table);
    clip_grad_norm_(*table, kClip);
    opt->step();
    Tensor mean = loss.detach().reshape({1}).clone();
    rows->all_reduce(mean)->wait();
    t.losses.push_back(mean.item() / double(rows->size()));
    for (auto& r : routing_of(*model)) t.routing.push_back(r);
  }
  nn::StateDict params = full_state_dict(*table, *model, world.get());
  optim::OptimizerState state = full_optimizer_state(*table, *model, *local, world.get());
  if (world->rank() != 0) return {};
  t.params = std::move(params);
  t.state = std::move(state);
  return t;
}

TEST(ExpertParallel, EveryLayoutTrainsAsOneDeviceWithTheSameDrops) {
  // With tensor parallelism, the GPT of moe_every 2: block 1's MLP is the one TP cuts.
  const Trained wants[2] = {one_device(1), one_device(2)};
  for (const Trained& want : wants) {
    int64_t drops = 0;
    for (const auto& r : want.routing) drops += r.back();
    EXPECT_GT(drops, 0) << "the capacity must drop tokens for the test to mean anything";
  }
  const std::vector<std::tuple<int, int, int, Data>> layouts = {
      {1, 2, 1, Data::DDP},   {1, 4, 1, Data::DDP},        {1, 8, 1, Data::DDP},
      {2, 2, 1, Data::DDP},   {2, 4, 1, Data::DDP},        {2, 2, 1, Data::Zero1},
      {2, 2, 1, Data::Zero2}, {2, 2, 1, Data::FullyShard}, {2, 4, 1, Data::FullyShard},
      {1, 2, 2, Data::DDP},   {2, 2, 2, Data::DDP},        {2, 2, 2, Data::FullyShard}};
  const char* data_names[] = {"DDP", "ZeRO-1", "ZeRO-2", "fully_shard"};
  for (const auto& layout : layouts) {
    // Plain variables: clang 14 does not let a lambda capture structured bindings.
    const int dp = std::get<0>(layout), ep = std::get<1>(layout), tp = std::get<2>(layout);
    const Data data = std::get<3>(layout);
    const Trained& want = wants[tp > 1 ? 1 : 0];
    const std::string what = "dp " + std::to_string(dp) + " x ep " + std::to_string(ep) + " x tp " +
                             std::to_string(tp) + " (" + data_names[int(data)] + ")";
    Trained got;
    std::mutex mu;
    spawn_threads(
        [&](std::shared_ptr<Communicator> world) {
          Trained t = run_layout(dp, ep, tp, data, world);
          std::lock_guard lock(mu);
          if (world->rank() == 0)
            got = std::move(t);
          else
            EXPECT_EQ(t.routing.size(), 0u);
        },
        dp * ep * tp);
    EXPECT_EQ(got.routing, want.routing) << what << ": the routing differs from one device's";
    for (int s = 0; s < kSteps; ++s)
      EXPECT_NEAR(got.losses[size_t(s)], want.losses[size_t(s)], 1e-12 * want.losses[size_t(s)])
          << what << ", step " << s;
    std::map<std::string, Tensor> by_name(got.params.begin(), got.params.end());
    for (const auto& [name, p] : want.params) {
      ASSERT_TRUE(by_name.count(name)) << what << ": no " << name;
      EXPECT_LE(relative_error(by_name.at(name), p), kTolerance) << what << ": " << name;
    }
    ASSERT_EQ(got.state.tensors.size(), want.state.tensors.size()) << what;
    for (size_t i = 0; i < want.state.tensors.size(); ++i)
      if (want.state.tensors[i].second.dim() > 0) {
        EXPECT_LE(relative_error(got.state.tensors[i].second, want.state.tensors[i].second),
                  kTolerance)
            << what << ": " << want.state.tensors[i].first;
      }
  }
}

// The experts are recorded as Shard(0) along "ep": one device's state loads into ep = 2, and the
// whole state put back together from the ranks is it again (names, shapes and values).
TEST(ExpertParallel, TheWholeStateLoadsUnderAnotherLayout) {
  const nn::StateDict whole = moe_gpt().named_parameters();
  spawn_threads(
      [&](std::shared_ptr<Communicator> world) {
        auto table = std::make_shared<PlacementTable>();
        nn::Sequential model = ep::expert_parallel(moe_gpt(), world, {.placements = table});
        {
          NoGradGuard no_grad;
          for (Tensor& p : model.parameters()) p.zero_();  // what the load must overwrite
        }
        load_full_state_dict(*table, model, whole, world.get(), "whole");
        nn::StateDict back = full_state_dict(*table, model, world.get());
        if (world->rank() != 0) return;
        std::map<std::string, Tensor> by_name(back.begin(), back.end());
        for (const auto& [name, p] : whole)
          EXPECT_EQ(relative_error(by_name.at(name), p), 0) << name;
      },
      2);
}

// Memory per rank against the formula: each rank holds the dense parameters whole and 1/ep of
// the experts', counted in parameters and in the bytes its device holds after the move (the
// model's whole copy stays on the host).
TEST(ExpertParallel, EachRankHoldsOneEpthOfTheExperts) {
  nn::Sequential whole = moe_gpt();
  int64_t experts = 0;
  for (const Tensor& t : ep::expert_parameters(whole)) experts += t.numel();
  const int64_t dense = whole.parameter_count() - experts;
  // 2 layers × (c_fc [E, 4C, C] + [E, 4C] and c_proj [E, C, 4C] + [E, C]), C = 16, E = 8.
  EXPECT_EQ(experts, 2 * kExperts * (64 * 16 + 64 + 16 * 64 + 16));
  for (int ep : {2, 4, 8}) {
    spawn_threads(
        [&](std::shared_ptr<Communicator> world) {
          const Device dev = Device::cpu(world->rank() + 1);  // cpu:0 is the host's, `whole`'s
          const int64_t before = memory_stats(dev).allocated_bytes;
          auto table = std::make_shared<PlacementTable>();
          nn::Sequential model = ep::expert_parallel(whole, world, {.placements = table});
          move_to(model, dev, *table);
          const int64_t want = dense + experts / ep;
          EXPECT_EQ(model.parameter_count(), want) << "ep " << ep;
          EXPECT_EQ(memory_stats(dev).allocated_bytes - before, want * int64_t(sizeof(double)))
              << "ep " << ep << ", rank " << world->rank();
        },
        ep);
  }
}

TEST(ExpertParallel, BadLayoutsAreClearErrors) {
  spawn_threads(
      [&](std::shared_ptr<Communicator> world) {
        try {
          ep::expert_parallel(moe_gpt(6), world);
          ADD_FAILURE() << "6 experts over 4 ranks were accepted";
        } catch (const ValueError& e) {
          EXPECT_NE(std::string(e.what()).find("6 experts, which do not divide by the "
                                               "expert-parallel size 4"),
                    std::string::npos)
              << e.what();
        }
        nn::Sequential dense =
            nn::gpt({.block_size = 8, .vocab_size = 11, .n_layer = 1, .n_head = 2, .n_embd = 8});
        EXPECT_THROW(ep::expert_parallel(dense, world), ValueError);
      },
      4);
}

}  // namespace
}  // namespace tandem::parallel::expert_parallel_test
