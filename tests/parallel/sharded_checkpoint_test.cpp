// The checkpoint matrix: a sharded checkpoint (parallel/sharded_checkpoint.h) saved under one
// layout loads under any other. A 2-layer float64 GPT (a vocabulary of 37, padded to 40 rows)
// trains 2 clipped AdamW steps under each of 6 layouts of thread ranks — ZeRO-1 over 2 ranks,
// TP × ZeRO-2, TP + SP × fully_shard, PP × TP (1F1B), PP × ZeRO-1, fully_shard over 4 — and
// saves; each checkpoint loads under one process and 4 other layouts, which take the third step
// and save again; that checkpoint, loaded on one process, is one device's model and AdamW state
// after 3 steps (≤ 1e-10 relative, each tensor: the layouts' sums round differently).
#include <gtest/gtest.h>
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/parallel/sharded_checkpoint.h>
#include <tandem/tandem.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "data/temp_dir.h"
#include "parallel/drawn_gpt.h"
#include "parallel/token_batch.h"

namespace tandem::parallel::sharded_checkpoint_test {  // named: unity builds join test files
namespace {
namespace fs = std::filesystem;

constexpr int64_t kBatch = 4, kT = tandem::testing::kDrawnT, kVocab = tandem::testing::kDrawnVocab;
constexpr double kClip = 0.3, kTolerance = 1e-10;

std::pair<Tensor, Tensor> batch(int step) {
  return tandem::testing::random_token_batch(kBatch, kT, kVocab, uint64_t(step + 70));
}
Tensor rows_of(const Tensor& t, int k, int n, Device dev) {
  return t.narrow(0, k * kBatch / n, kBatch / n).to(dev);
}
optim::AdamOptions adam() { return {.lr = 1e-2, .beta2 = 0.99, .weight_decay = 0.1}; }
nn::Sequential whole_gpt() { return tandem::testing::drawn_gpt(31); }

// One rank's run under a layout: what it trains (the table), its optimizer over the table's
// tensors, and its step of the global batch (clipped).
struct Member {
  std::shared_ptr<PlacementTable> table;
  std::shared_ptr<nn::Sequential> model;  // what holds the buffers
  optim::Optimizer* local = nullptr;
  std::function<void(int step)> step;
  std::function<void()> after_load = [] {};
  std::vector<std::shared_ptr<void>> keep;  // the wrappers, alive for the run
};
using Layout = std::function<Member(std::shared_ptr<Communicator> world)>;

struct Named {
  std::string name;
  int world;
  Layout build;
};

// A plain optimizer over `named`, kept by `m`.
optim::Optimizer* adamw(Member& m, const nn::StateDict& named) {
  auto opt = std::make_shared<optim::AdamW>(optim::adamw_groups(named, adam(), true));
  m.keep.push_back(opt);
  return opt.get();
}

Member one_process(std::shared_ptr<Communicator>) {
  Member m{.table = std::make_shared<PlacementTable>(),
           .model = std::make_shared<nn::Sequential>(whole_gpt())};
  m.table->keep_only(m.model->named_parameters());
  m.local = adamw(m, m.model->named_parameters());
  m.step = [m](int s) mutable {
    const auto [x, y] = batch(s);
    m.local->zero_grad();
    nn::gpt_loss((*m.model)(x), y).backward();
    clip_grad_norm_(*m.table, kClip);
    m.local->step();
  };
  return m;
}

// DDP with ZeRO `stage` over `dp` (null: the world), of `model` cut as `table` says.
Member zero(Member m, std::shared_ptr<Communicator> dp, int stage,
            std::function<Tensor(const Tensor&, const Tensor&)> loss) {
  auto ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(
      *m.model,
      DDPOptions{.group = dp, .bucket_cap_mb = 0.01, .zero_stage = stage, .placements = m.table});
  auto opt = zero_optimizer<optim::AdamW>(
      *ddp, optim::adamw_groups(m.model->named_parameters(), adam(), true));
  m.local = &opt->inner();
  std::shared_ptr<ZeroOptimizer> z(std::move(opt));
  m.keep.insert(m.keep.end(), {ddp, z});
  const Device dev = m.table->entries().front().local.device();
  m.step = [m, ddp, z, dp, loss, dev](int s) {
    const auto [x, y] = batch(s);
    z->zero_grad();
    loss((*ddp)(rows_of(x, dp->rank(), dp->size(), dev)), rows_of(y, dp->rank(), dp->size(), dev))
        .backward();
    reduce_partial_gradients(*m.table);
    clip_grad_norm_(*m.table, kClip);
    z->step();
  };
  m.after_load = [z] { z->shards().gather_parameters(); };
  return m;
}

Member on_device(nn::Sequential model, int rank) {
  Member m{.table = std::make_shared<PlacementTable>(),
           .model = std::make_shared<nn::Sequential>(std::move(model))};
  m.table->keep_only(m.model->named_parameters());
  move_to(*m.model, Device::cpu(rank), *m.table);
  return m;
}

Member tensor_parallel(DeviceMesh& mesh, bool sp, int rank) {
  nn::Sequential whole = whole_gpt();
  auto table = std::make_shared<PlacementTable>();
  auto model = std::make_shared<nn::Sequential>(tp::tensor_parallel_gpt(
      whole, mesh.group("tp"), {.sequence_parallel = sp, .placements = table}));
  move_to(*model, Device::cpu(rank), *table);
  return {.table = table, .model = model};
}

std::function<Tensor(const Tensor&, const Tensor&)> tp_loss(std::shared_ptr<Communicator> tp) {
  return [tp](const Tensor& out, const Tensor& y) { return tp::gpt_loss(out, y, tp); };
}

Member fully_sharded(Member m, std::shared_ptr<Communicator> dp,
                     std::function<Tensor(const Tensor&, const Tensor&)> loss) {
  auto fsdp = std::make_shared<FullyShardedModule>(
      m.model, FullyShardOptions{.group = dp, .placements = m.table});
  m.local = adamw(m, m.model->named_parameters());
  m.keep.push_back(fsdp);
  const Device dev = m.table->entries().front().local.device();
  m.step = [m, fsdp, dp, loss, dev](int s) {
    const auto [x, y] = batch(s);
    m.local->zero_grad();
    loss((*fsdp)(rows_of(x, dp->rank(), dp->size(), dev)), rows_of(y, dp->rank(), dp->size(), dev))
        .backward();
    reduce_partial_gradients(*m.table);
    clip_grad_norm_(*m.table, kClip);
    m.local->step();
  };
  return m;
}

// A pipeline over mesh "pp" of the model `m` holds (cut by TP or not), with ZeRO-1 over "dp"
// when the mesh has one.
Member pipeline(DeviceMesh& mesh, bool dp, nn::Sequential model,
                std::shared_ptr<PlacementTable> table,
                std::function<Tensor(const Tensor&, const Tensor&)> loss, int rank) {
  auto pipe = std::make_shared<DistributedPipeline>(
      model, mesh.group("pp"),
      DistributedPipelineOptions{
          .chunks = 2, .schedule = PipelineSchedule::OneFOneB, .placements = table});
  move_to(pipe->stage(), Device::cpu(rank), *table);
  Member m{.table = table,
           .model = std::shared_ptr<nn::Sequential>(pipe, &pipe->stage()),
           .keep = {pipe}};
  std::shared_ptr<DistributedDataParallel<nn::Sequential>> ddp;
  std::shared_ptr<ZeroOptimizer> z;
  if (dp) {
    ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(
        pipe->stage(), DDPOptions{.group = mesh.group("dp"),
                                  .bucket_cap_mb = 0.01,
                                  .zero_stage = 1,
                                  .placements = table});
    z = zero_optimizer<optim::AdamW>(
        *ddp, optim::adamw_groups(pipe->stage().named_parameters(), adam(), true));
    m.local = &z->inner();
    m.keep.insert(m.keep.end(), {ddp, z});
    m.after_load = [z] { z->shards().gather_parameters(); };
  } else {
    m.local = adamw(m, pipe->stage().named_parameters());
  }
  optim::Optimizer* opt = z ? static_cast<optim::Optimizer*>(z.get()) : m.local;
  const int k = dp ? mesh.coordinate("dp") : 0, n = dp ? mesh.size("dp") : 1;
  const Device dev = Device::cpu(rank);
  m.step = [pipe, ddp, opt, table, loss, k, n, dev](int s) {
    const auto [x, y] = batch(s);
    opt->zero_grad();
    if (ddp) {
      const auto quiet = ddp->no_sync();
      pipe->step(rows_of(x, k, n, dev), rows_of(y, k, n, dev), loss);
    } else {
      pipe->step(rows_of(x, k, n, dev), rows_of(y, k, n, dev), loss);
    }
    if (ddp) ddp->reduce_gradients();
    reduce_partial_gradients(*table);
    clip_grad_norm_(*table, kClip);
    opt->step();
  };
  return m;
}

const std::vector<Named>& layouts() {
  static const auto gpt_loss = [](const Tensor& out, const Tensor& y) {
    return nn::gpt_loss(out, y);
  };
  static const std::vector<Named> all = {
      {"ZeRO-1 over 2", 2,
       [](std::shared_ptr<Communicator> w) {
         return zero(on_device(whole_gpt(), w->rank()), w, 1, gpt_loss);
       }},
      {"TP x ZeRO-2", 4,
       [](std::shared_ptr<Communicator> w) {
         auto mesh = std::make_shared<DeviceMesh>(w, std::vector<int>{2, 2},
                                                  std::vector<std::string>{"dp", "tp"});
         Member m = zero(tensor_parallel(*mesh, false, w->rank()), mesh->group("dp"), 2,
                         tp_loss(mesh->group("tp")));
         m.keep.push_back(mesh);
         return m;
       }},
      {"TP + SP x fully_shard", 4,
       [](std::shared_ptr<Communicator> w) {
         auto mesh = std::make_shared<DeviceMesh>(w, std::vector<int>{2, 2},
                                                  std::vector<std::string>{"dp", "tp"});
         Member m = fully_sharded(tensor_parallel(*mesh, true, w->rank()), mesh->group("dp"),
                                  tp_loss(mesh->group("tp")));
         m.keep.push_back(mesh);
         return m;
       }},
      {"PP x TP", 4,
       [](std::shared_ptr<Communicator> w) {
         auto mesh = std::make_shared<DeviceMesh>(w, std::vector<int>{2, 2},
                                                  std::vector<std::string>{"pp", "tp"});
         nn::Sequential whole = whole_gpt();
         auto table = std::make_shared<PlacementTable>();
         nn::Sequential cut =
             tp::tensor_parallel_gpt(whole, mesh->group("tp"), {.placements = table});
         Member m =
             pipeline(*mesh, false, std::move(cut), table, tp_loss(mesh->group("tp")), w->rank());
         m.keep.push_back(mesh);
         return m;
       }},
      {"PP x ZeRO-1", 4,
       [](std::shared_ptr<Communicator> w) {
         auto mesh = std::make_shared<DeviceMesh>(w, std::vector<int>{2, 2},
                                                  std::vector<std::string>{"dp", "pp"});
         Member m = pipeline(*mesh, true, whole_gpt(), std::make_shared<PlacementTable>(), gpt_loss,
                             w->rank());
         m.keep.push_back(mesh);
         return m;
       }},
      {"fully_shard over 4", 4,
       [](std::shared_ptr<Communicator> w) {
         return fully_sharded(on_device(whole_gpt(), w->rank()), w, gpt_loss);
       }},
  };
  return all;
}

// Runs `layout`: builds it, maybe loads `from`, takes steps [first, last), saves to `to`.
void run(const Named& layout, const std::string& from, int first, int last, const std::string& to) {
  spawn_threads(
      [&](std::shared_ptr<Communicator> world) {
        Member m = layout.build(world);
        if (!from.empty()) {
          EXPECT_EQ(load_sharded_checkpoint(from, *m.table, m.model->named_buffers(), m.local),
                    first);
          m.after_load();
        }
        for (int s = first; s < last; ++s) m.step(s);
        save_sharded_checkpoint(to, last, *world, *m.table, m.model->named_buffers(), m.local);
      },
      layout.world);
}

double relative_error(const Tensor& a, const Tensor& b) {
  const double scale = std::sqrt(sum(b * b).item());
  return std::sqrt(sum((a - b) * (a - b)).item()) / (scale > 0 ? scale : 1);
}

TEST(ShardedCheckpointMatrix, SavedUnderAnyLayoutLoadsUnderAnyOther) {
  tandem::testing::TempDir tmp;
  // One device after 3 steps: the reference.
  Member want = one_process(nullptr);
  for (int s = 0; s < 3; ++s) want.step(s);
  const optim::OptimizerState want_state = want.local->state_dict();
  const Named one{"one process", 1, one_process};
  std::vector<const Named*> loaders = {&one};
  for (const Named& l : layouts())
    if (l.name != "ZeRO-1 over 2" && l.name != "TP + SP x fully_shard") loaders.push_back(&l);
  int i = 0;
  for (const Named& saver : layouts()) {
    const std::string saved = tmp.file("saved-" + std::to_string(i++));
    run(saver, "", 0, 2, saved);
    for (const Named* loader : loaders) {
      const std::string what = saver.name + " -> " + loader->name;
      const std::string next = tmp.file("next-" + std::to_string(i++));
      run(*loader, saved, 2, 3, next);
      // The next checkpoint, on one process: one device's model and state after 3 steps.
      Member got = one_process(nullptr);
      load_sharded_checkpoint(next, *got.table, got.model->named_buffers(), got.local);
      const nn::StateDict params = got.model->named_parameters();
      const nn::StateDict expected = want.model->named_parameters();
      for (size_t k = 0; k < expected.size(); ++k)
        EXPECT_LE(relative_error(params[k].second, expected[k].second), kTolerance)
            << what << ": " << expected[k].first;
      const optim::OptimizerState state = got.local->state_dict();
      const std::map<std::string, Tensor> by_key(state.tensors.begin(), state.tensors.end());
      ASSERT_EQ(by_key.size(), want_state.tensors.size()) << what;
      for (const auto& [key, t] : want_state.tensors) {
        ASSERT_TRUE(by_key.count(key)) << what << ": no " << key;
        if (t.dim() > 0)
          EXPECT_LE(relative_error(by_key.at(key), t), kTolerance) << what << ": " << key;
        else
          EXPECT_EQ(by_key.at(key).item(), t.item()) << what << ": " << key;
      }
    }
  }
}

}  // namespace
}  // namespace tandem::parallel::sharded_checkpoint_test
