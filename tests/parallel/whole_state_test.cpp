// The whole state of any layout (parallel/whole_state.h): the drawn GPT (2 layers, float64, a
// vocabulary of 37 padded to 40 rows) trains 2 clipped AdamW steps under each of 8 layouts of
// thread ranks (stacked_layouts.h); rank 0's full_state_dict and full_optimizer_state are one
// device's state_dict and AdamW state after 2 steps (every name, the tied weight under both, each
// tensor ≤ 1e-10 relative: the layouts' sums round differently). Each layout's whole state then
// loads under one process and 4 other layouts, which take step 3: their whole state is one
// device's after 3 steps. Bad input: another model's state names both shapes, an extra or a
// missing tensor is named, on every rank.
#include <gtest/gtest.h>
#include <tandem/parallel/whole_state.h>

#include <atomic>
#include <cmath>
#include <map>

#include "parallel/stacked_layouts.h"
#include "support/expect.h"

namespace tandem::parallel::whole_state_test {  // named: unity builds join test files
namespace {

using tandem::testing::stacked::Data;
using tandem::testing::stacked::Member;
using tandem::testing::stacked::relative_error;
using tandem::testing::stacked::Stack;

constexpr double kTolerance = 1e-10;

struct Whole {
  nn::StateDict model;
  optim::OptimizerState optimizer;
};

// Runs `stack` for steps [first, last), loading `from` first if given: rank 0's whole state.
Whole run(const Stack& stack, const Whole* from, int first, int last) {
  Whole out;
  spawn_threads(
      [&](std::shared_ptr<Communicator> world) {
        Member m = tandem::testing::stacked::build(stack, world);
        if (from) {
          load_full_state_dict(*m.table, *m.model, from->model, world.get(), "the saved state");
          load_full_optimizer_state(*m.table, *m.model, *m.local, from->optimizer, world.get());
          m.after_load();  // ZeRO: the pieces' parameters gathered
        }
        for (int s = first; s < last; ++s) m.step(s);
        Whole w{full_state_dict(*m.table, *m.model, world.get()),
                full_optimizer_state(*m.table, *m.model, *m.local, world.get())};
        if (world->rank() == 0)
          out = std::move(w);
        else
          EXPECT_TRUE(w.model.empty() && w.optimizer.tensors.empty()) << stack.str();
      },
      stack.world());
  return out;
}

void expect_equal(const Whole& got, const Whole& want, const std::string& what) {
  ASSERT_EQ(got.model.size(), want.model.size()) << what;
  for (size_t k = 0; k < want.model.size(); ++k) {
    EXPECT_EQ(got.model[k].first, want.model[k].first) << what;  // one device's names, in order
    EXPECT_EQ(got.model[k].second.shape(), want.model[k].second.shape()) << what;
    EXPECT_LE(relative_error(got.model[k].second, want.model[k].second.to(Device::cpu())),
              kTolerance)
        << what << ": " << want.model[k].first;
  }
  const std::map<std::string, Tensor> by_key(got.optimizer.tensors.begin(),
                                             got.optimizer.tensors.end());
  ASSERT_EQ(by_key.size(), want.optimizer.tensors.size()) << what;
  for (const auto& [key, t] : want.optimizer.tensors) {
    ASSERT_TRUE(by_key.count(key)) << what << ": no " << key;
    if (t.dim() > 0) {
      EXPECT_LE(relative_error(by_key.at(key), t.to(Device::cpu())), kTolerance)
          << what << ": " << key;
    } else {
      EXPECT_EQ(by_key.at(key).item(), t.item()) << what << ": " << key;
    }
  }
  EXPECT_EQ(got.optimizer.param_groups_json, want.optimizer.param_groups_json) << what;
}

Whole one_device(int steps) {
  Member m = tandem::testing::stacked::build(Stack{}, make_thread_group(1)[0]);
  for (int s = 0; s < steps; ++s) m.step(s);
  return {m.model->state_dict(), m.local->state_dict()};
}

TEST(WholeStateMatrix, AnyLayoutIsOneDevicesStateAndLoadsUnderAnyOther) {
  const Whole after2 = one_device(2), after3 = one_device(3);
  ASSERT_TRUE(after2.model[0].first == "transformer.wte.weight");
  const Stack ddp{.dp = 2}, zero1{.data = Data::Zero1, .dp = 2},
      tp_zero2{.data = Data::Zero2, .dp = 2, .tp = 2},
      fsdp_tp{.data = Data::FullyShard, .dp = 2, .tp = 2, .sp = true}, pp_tp{.tp = 2, .pp = 2},
      pp_zero1{.data = Data::Zero1, .dp = 2, .pp = 2}, fsdp4{.data = Data::FullyShard, .dp = 4},
      mesh{.data = Data::Zero2, .dp = 2, .tp = 2, .pp = 2, .checkpointed = true};
  const std::vector<Stack> savers = {Stack{}, ddp,      zero1, tp_zero2, fsdp_tp,
                                     pp_tp,   pp_zero1, fsdp4, mesh};
  const std::vector<Stack> loaders = {Stack{}, tp_zero2, pp_tp, pp_zero1, fsdp4};
  for (const Stack& saver : savers) {
    const Whole saved = run(saver, nullptr, 0, 2);
    expect_equal(saved, after2, saver.str() + " after 2 steps");
    for (const Stack& loader : loaders)
      expect_equal(run(loader, &saved, 2, 3), after3, saver.str() + " -> " + loader.str());
  }
}

// Every rank of `stack` loads `whole`; each must throw a DataError: returns one of the texts.
std::string load_error(const Stack& stack, const Whole& whole) {
  std::atomic<int> threw{0};
  std::string text;
  spawn_threads(
      [&](std::shared_ptr<Communicator> world) {
        Member m = tandem::testing::stacked::build(stack, world);
        try {
          load_full_state_dict(*m.table, *m.model, whole.model, world.get(), "ckpt.safetensors");
          load_full_optimizer_state(*m.table, *m.model, *m.local, whole.optimizer, world.get());
        } catch (const DataError& e) {
          ++threw;
          if (world->rank() == 0) text = e.what();
        }
      },
      stack.world());
  EXPECT_EQ(threw.load(), stack.world()) << "every rank throws: " << stack.str();
  return text;
}

TEST(WholeStateMatrix, ABadStateIsADataErrorOnEveryRankNamingIt) {
  const Whole good = one_device(1);
  const Stack pp_tp{.tp = 2, .pp = 2}, zero1{.data = Data::Zero1, .dp = 2};
  // Another model: n_embd 8 instead of 16.
  nn::Sequential other = nn::gpt({.block_size = 8,
                                  .vocab_size = 37,
                                  .padded_vocab_size = 40,
                                  .n_layer = 2,
                                  .n_head = 4,
                                  .n_embd = 8,
                                  .tensor = {.dtype = kFloat64}});
  const std::string shape = load_error(pp_tp, {other.state_dict(), good.optimizer});
  EXPECT_NE(shape.find("load_full_state_dict (ckpt.safetensors): the state dict does not fit the "
                       "model:"),
            std::string::npos)
      << shape;
  EXPECT_NE(shape.find("\n  transformer.wte.weight: [40, 8] given, [40, 16] expected"),
            std::string::npos)
      << shape;
  // A tensor only the last stage holds is missing: the first stage throws too.
  Whole missing = good;
  std::erase_if(missing.model, [](const auto& e) { return e.first == "transformer.ln_f.weight"; });
  const std::string gone = load_error(pp_tp, missing);
  EXPECT_NE(gone.find("\n  missing: transformer.ln_f.weight"), std::string::npos) << gone;
  // A tensor no rank's model has: a checkpoint of another model.
  Whole extra = good;
  extra.model.emplace_back("transformer.h.2.ln_1.weight", ones({16}, {.dtype = kFloat64}));
  const std::string more = load_error(zero1, extra);
  EXPECT_NE(
      more.find("(a checkpoint of another model?):\n  unexpected: transformer.h.2.ln_1.weight"),
      std::string::npos)
      << more;
  // An optimizer state of other groups.
  Whole groups = good;
  groups.optimizer.param_groups_json = "[{\"params\": [0, 1]}]";
  const std::string two = load_error(zero1, groups);
  EXPECT_NE(two.find("the state has 1 parameter groups, the optimizer 2"), std::string::npos)
      << two;
}

}  // namespace
}  // namespace tandem::parallel::whole_state_test
