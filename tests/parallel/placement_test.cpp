// The placement table (parallel/placement.h) and the one gradient norm read from it: however the
// wrappers cut a 2-layer GPT (a vocabulary of 37, padded to 40 rows) over thread ranks — DDP,
// ZeRO-1/2's pieces, fully_shard's rows, tensor parallelism with and without sequence
// parallelism, the distributed pipeline with its tied copy, the in-process pipeline, and their
// stacks on 2 × 2 and 2 × 2 × 2 meshes — parallel::grad_norm(table) is one device's norm of the
// same batch's gradient (≤ 1e-12 relative, float64), and clipping keeps a tied weight's copies
// bit-identical.
#include <gtest/gtest.h>
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/tandem.h>

#include <cmath>

#include "parallel/drawn_gpt.h"
#include "parallel/token_batch.h"
#include "support/expect.h"

namespace tandem::parallel::placement_test {  // named: unity builds join test files
namespace {

using tandem::testing::error_message;
using ::testing::HasSubstr;

constexpr int64_t kBatch = 12, kT = tandem::testing::kDrawnT, kVocab = tandem::testing::kDrawnVocab;

nn::Sequential whole_gpt() { return tandem::testing::drawn_gpt(11); }

std::pair<Tensor, Tensor> the_batch() {
  return tandem::testing::random_token_batch(kBatch, kT, kVocab, 5);
}

// One device's gradient norm of the batch's mean loss.
double one_device_norm() {
  nn::Sequential model = whole_gpt();
  const auto [x, y] = the_batch();
  nn::gpt_loss(model(x), y).backward();
  return std::sqrt(optim::grad_square_sum(model.parameters()));
}

// Rows [k·B/n, (k+1)·B/n) of t, on `dev`.
Tensor rows_of(const Tensor& t, int k, int n, Device dev) {
  return t.narrow(0, k * kBatch / n, kBatch / n).to(dev);
}

// `run(group)` on `world` thread ranks; each returns its norm, which must be one device's.
template <typename Run>
void expect_one_device_norm(int world, Run&& run) {
  const double want = one_device_norm();
  std::vector<double> got(size_t(world), 0);
  spawn_threads([&](std::shared_ptr<Communicator> g) { got[size_t(g->rank())] = run(g); }, world);
  for (int r = 0; r < world; ++r) EXPECT_NEAR(got[size_t(r)], want, 1e-12 * want) << "rank " << r;
}

TEST(PlacementTable, RecordsReplacesAndNamesWhatItHolds) {
  const std::shared_ptr<Communicator> group = make_thread_group(1)[0];
  PlacementTable table;
  const Tensor w = zeros({6, 4}), piece = zeros({5});
  table.cut(w, {12, 4}, "tp", group, Shard{.dim = 0, .blocks = 3});
  table.record(w, "attn.c_attn.weight");
  EXPECT_EQ(table.find(w)->name, "attn.c_attn.weight");
  EXPECT_EQ(table.find(w)->whole, (Shape{12, 4}));
  EXPECT_TRUE(table.divides("tp"));
  table.add_dimension("dp", group);
  EXPECT_FALSE(table.divides("dp"));
  table.replace(w, piece, "dp", Piece{.begin = 3, .length = 5});
  EXPECT_EQ(table.find(w), nullptr) << "the piece stands in for the tensor";
  const PlacedTensor& e = *table.find(piece);
  EXPECT_EQ(e.name, "attn.c_attn.weight");
  ASSERT_EQ(e.placements.size(), 2u) << "in the order they were applied";
  EXPECT_EQ(to_string(e.along("tp")), "Shard(dim 0, 3 blocks)");
  EXPECT_EQ(to_string(e.along("dp")), "Piece[3, 8)");
  EXPECT_EQ(to_string(e.along("pp")), "Replicate");
  EXPECT_TRUE(table.divides("dp"));
  EXPECT_THAT(error_message<ValueError>([&] { table.place(piece, "cp", Replicate{}); }),
              HasSubstr("a placement along 'cp', which no wrapper named"));
  EXPECT_THAT(error_message<ValueError>([&] { table.place(piece, "tp", Shard{}); }),
              HasSubstr("'attn.c_attn.weight' is already Shard(dim 0, 3 blocks) along 'tp'"));
  table.keep_only({{"b", w}});
  ASSERT_EQ(table.entries().size(), 1u);
  EXPECT_EQ(table.entries()[0].name, "b") << "a tensor it did not hold is added, replicated";
}

// The TP layers record their own cuts; a row layer's bias, added after the sum, is Partial under
// sequence parallelism (each rank adds it to its positions only) even without the GPT's plan.
TEST(PlacementTable, TensorParallelLayersRecordTheirCuts) {
  const std::shared_ptr<Communicator> group = make_thread_group(1)[0];
  PlacementTable table;
  tp::ColumnParallelLinear c(nn::Linear(4, 6), group, {.stride = 3, .placements = &table});
  tp::RowParallelLinear r(nn::Linear(6, 4), group,
                          {.sequence_parallel = true, .placements = &table});
  EXPECT_EQ(to_string(table.find(c.weight)->along("tp")), "Shard(dim 0, 3 blocks)");
  EXPECT_EQ(to_string(table.find(c.bias)->along("tp")), "Shard(dim 0, 3 blocks)");
  EXPECT_EQ(to_string(table.find(r.weight)->along("tp")), "Shard(dim 1)");
  EXPECT_EQ(to_string(table.find(r.bias)->along("tp")), "Partial");
  EXPECT_EQ(table.find(r.weight)->whole, (Shape{4, 6}));
}

// A table that meets a tensor another table cut adopts its record (a wrapper not given the
// plan's table), moved with move_to too; a layer given no table still leaves its record.
TEST(PlacementTable, ATableAdoptsAnotherTablesCuts) {
  const std::shared_ptr<Communicator> group = make_thread_group(1)[0];
  PlacementTable plan;
  tp::ColumnParallelLinear c(nn::Linear(4, 6), group, {.stride = 3, .placements = &plan});
  tp::RowParallelLinear r(nn::Linear(6, 4), group);  // no table
  move_to(c, Device::cpu(1), plan);
  PlacementTable wrapper;
  EXPECT_EQ(to_string(wrapper.record(c.weight, "c.weight").along("tp")), "Shard(dim 0, 3 blocks)");
  EXPECT_EQ(wrapper.find(c.weight)->whole, (Shape{6, 4}));
  EXPECT_EQ(to_string(wrapper.record(r.weight).along("tp")), "Shard(dim 1)");
  EXPECT_TRUE(wrapper.divides("tp")) << wrapper.str();
  const Tensor plain = zeros({3});
  EXPECT_EQ(to_string(wrapper.record(plain).along("tp")), "Replicate");
}

// Module::to makes new tensors: a table left holding the old ones says so, instead of a norm of
// no gradient; move_to moves the records with the model.
TEST(PlacementTable, AModelMovedBehindItsBackIsAnError) {
  nn::Sequential model = whole_gpt();
  PlacementTable table;
  table.keep_only(model.named_parameters());
  move_to(model, Device::cpu(1), table);
  EXPECT_EQ(table.entries().front().local.device(), Device::cpu(1));
  EXPECT_NO_THROW(grad_norm(table));
  model.to(Device::cpu(0));
  EXPECT_THAT(error_message<ValueError>([&] { grad_norm(table); }),
              HasSubstr("grad_norm: 'transformer.wte.weight' of the placement table is no longer "
                        "part of any model"));
}

// DDP's replicas (nothing summed), ZeRO-1/2's pieces (a Piece of each parameter a bucket's chunk
// cuts; the parameters a rank owns none of are not its to count), on 2 and 3 ranks.
TEST(OneGradientNorm, DataParallelAndZeroPieces) {
  for (int world : {2, 3})
    for (int stage : {0, 1, 2})
      expect_one_device_norm(world, [&](std::shared_ptr<Communicator> g) {
        const Device dev = Device::cpu(g->rank());
        nn::Sequential model = whole_gpt();
        model.to(dev);
        DistributedDataParallel ddp(model,
                                    {.group = g, .bucket_cap_mb = 0.01, .zero_stage = stage});
        const auto [x, y] = the_batch();
        nn::gpt_loss(ddp(rows_of(x, g->rank(), world, dev)), rows_of(y, g->rank(), world, dev))
            .backward();
        return grad_norm(*ddp.placements());
      });
}

// fully_shard's row chunks (on 3 ranks the tied table's 40 rows are cut 14 + 14 + 12 and a
// 16-row LayerNorm weight's 6 + 6 + 4, each with 2 rows of padding).
TEST(OneGradientNorm, FullyShardedRows) {
  for (int world : {2, 3})
    expect_one_device_norm(world, [&](std::shared_ptr<Communicator> g) {
      const Device dev = Device::cpu(g->rank());
      auto model = std::make_shared<nn::Sequential>(whole_gpt());
      model->to(dev);
      FullyShardedModule fsdp(model, {.group = g});
      const auto [x, y] = the_batch();
      nn::gpt_loss(fsdp(rows_of(x, g->rank(), world, dev)), rows_of(y, g->rank(), world, dev))
          .backward();
      return grad_norm(*fsdp.placements());
    });
}

// The tensor-parallel plan's cuts (c_attn in 3 blocks, the padded vocabulary), alone, with
// sequence parallelism (the replicated tensors Partial until reduce_partial_gradients), and
// under DDP or fully_shard on a 2 × 2 mesh.
TEST(OneGradientNorm, TensorParallelAloneAndUnderDataParallelism) {
  for (bool sp : {false, true})
    for (int tp : {2, 4})
      expect_one_device_norm(tp, [&](std::shared_ptr<Communicator> g) {
        const Device dev = Device::cpu(g->rank());
        nn::Sequential whole = whole_gpt();
        auto table = std::make_shared<PlacementTable>();
        nn::Sequential model =
            tp::tensor_parallel_gpt(whole, g, {.sequence_parallel = sp, .placements = table});
        move_to(model, dev, *table);
        const auto [x, y] = the_batch();
        tp::gpt_loss(model(x.to(dev)), y.to(dev), g).backward();
        reduce_partial_gradients(*table);
        return grad_norm(*table);
      });
  for (bool shard : {false, true})
    expect_one_device_norm(4, [&](std::shared_ptr<Communicator> world) {
      DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
      const Device dev = Device::cpu(world->rank());
      nn::Sequential whole = whole_gpt();
      auto table = std::make_shared<PlacementTable>();
      auto model = std::make_shared<nn::Sequential>(tp::tensor_parallel_gpt(
          whole, mesh.group("tp"), {.sequence_parallel = true, .placements = table}));
      move_to(*model, dev, *table);
      const auto [x, y] = the_batch();
      const int dp = mesh.coordinate("dp");
      const Tensor xs = rows_of(x, dp, 2, dev), ys = rows_of(y, dp, 2, dev);
      std::unique_ptr<DistributedDataParallel<nn::Sequential>> ddp;
      std::unique_ptr<FullyShardedModule> fsdp;
      if (shard)
        fsdp = std::make_unique<FullyShardedModule>(
            model, FullyShardOptions{.group = mesh.group("dp"), .placements = table});
      else
        ddp = std::make_unique<DistributedDataParallel<nn::Sequential>>(
            *model, DDPOptions{.group = mesh.group("dp"), .placements = table});
      tp::gpt_loss(shard ? (*fsdp)(xs) : (*ddp)(xs), ys, mesh.group("tp")).backward();
      reduce_partial_gradients(*table);
      return grad_norm(*table);
    });
}

// A pipeline over ranks: the stages hold different tensors (summed over "pp"), the tied
// embedding's copy on the last stage counted once; with the plan's cuts on a pp × tp mesh, and
// on dp × pp × tp = 2 × 2 × 2 (the data-parallel ranks' gradients averaged after the step). After
// clipping that bites, the two copies of the tied weight are still bit-identical.
TEST(OneGradientNorm, DistributedPipelineWithItsTiedCopy) {
  for (const std::vector<int>& shape : {std::vector<int>{1, 2, 1}, {1, 2, 2}, {2, 2, 2}}) {
    const int world = shape[0] * shape[1] * shape[2];
    std::vector<Tensor> copies(static_cast<size_t>(world));
    expect_one_device_norm(world, [&](std::shared_ptr<Communicator> g) {
      DeviceMesh mesh(g, shape, {"dp", "pp", "tp"});
      const Device dev = Device::cpu(g->rank());
      nn::Sequential whole = whole_gpt();
      auto table = std::make_shared<PlacementTable>();
      nn::Sequential model = tp::tensor_parallel_gpt(
          whole, mesh.group("tp"), {.sequence_parallel = shape[2] > 1, .placements = table});
      DistributedPipeline pipe(model, mesh.group("pp"), {.chunks = 2, .placements = table});
      move_to(pipe.stage(), dev, *table);
      const auto [x, y] = the_batch();
      const int dp = mesh.coordinate("dp");
      pipe.step(rows_of(x, dp, shape[0], dev), rows_of(y, dp, shape[0], dev),
                [&](const Tensor& out, const Tensor& t) {
                  return tp::gpt_loss(out, t, mesh.group("tp"));
                });
      reduce_partial_gradients(*table);
      all_reduce_gradients(table->tensors(), *mesh.group("dp"), ReduceOp::Mean);
      const double norm = grad_norm(*table);
      clip_grad_norm_(*table, norm / 10);
      for (const auto& [name, t] : pipe.stage().named_parameters())
        if (name == "transformer.wte.weight" || name == "lm_head.weight")
          copies[size_t(g->rank())] = t.grad().to(Device::cpu());
      return norm;
    });
    // Ranks (dp, pp, tp): pp 0 holds wte, pp 1 lm_head; the same tp slice of both must agree.
    for (int r = 0; r < world; ++r) {
      const int tp = r % shape[2], dp = r / (shape[1] * shape[2]);
      const int first = dp * shape[1] * shape[2] + tp, last = first + shape[2];
      EXPECT_TRUE(copies[size_t(first)].defined() && copies[size_t(last)].defined());
      EXPECT_EQ(copies[size_t(first)].to_vector<double>(), copies[size_t(last)].to_vector<double>())
          << "the tied copies of ranks " << first << " and " << last;
    }
  }
}

// One process's pipeline (stages on cpu:0 and cpu:1, the tied copy on each): no mesh dimension,
// the copy counted once.
TEST(OneGradientNorm, InProcessPipeline) {
  nn::Sequential model = whole_gpt();
  Pipeline pipe(split(model, {Device::cpu(0), Device::cpu(1)}), {.chunks = 2});
  const auto [x, y] = the_batch();
  pipe.step(x, y, [](const Tensor& out, const Tensor& t) { return nn::gpt_loss(out, t); });
  const double want = one_device_norm();
  EXPECT_NEAR(grad_norm(placements(pipe.stages())), want, 1e-12 * want);
}

}  // namespace
}  // namespace tandem::parallel::placement_test
