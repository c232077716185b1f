// The checkpoint matrix: a sharded checkpoint (parallel/sharded_checkpoint.h) saved under one
// layout loads under any other. The drawn GPT (2 layers, float64, a vocabulary of 37 padded to 40
// rows) trains 2 clipped AdamW steps under each of 6 layouts of thread ranks (stacked_layouts.h)
// — ZeRO-1 over 2 ranks, TP × ZeRO-2, TP + SP × fully_shard, PP × TP (1F1B), PP × ZeRO-1,
// fully_shard over 4 — and saves; each checkpoint loads under one process and 4 other layouts,
// which take the third step and save again; that checkpoint, loaded on one process, is one
// device's model and AdamW state after 3 steps (≤ 1e-10 relative, each tensor: the layouts' sums
// round differently).
#include <gtest/gtest.h>
#include <tandem/parallel/sharded_checkpoint.h>

#include <cmath>
#include <map>

#include <fstream>
#include <sstream>

#include "data/temp_dir.h"
#include "parallel/stacked_layouts.h"
#include "support/expect.h"

namespace tandem::parallel::sharded_checkpoint_test {  // named: unity builds join test files
namespace {

using tandem::testing::stacked::Data;
using tandem::testing::stacked::Member;
using tandem::testing::stacked::relative_error;
using tandem::testing::stacked::Stack;

constexpr double kTolerance = 1e-10;

// Runs `stack`: maybe loads `from`, takes steps [first, last), saves to `to`.
void run(const Stack& stack, const std::string& from, int first, int last, const std::string& to) {
  spawn_threads(
      [&](std::shared_ptr<Communicator> world) {
        Member m = tandem::testing::stacked::build(stack, world);
        if (!from.empty()) {
          EXPECT_EQ(load_sharded_checkpoint(from, *m.table, m.model->named_buffers(), m.local),
                    first);
          m.after_load();
        }
        for (int s = first; s < last; ++s) m.step(s);
        save_sharded_checkpoint(to, last, *world, *m.table, m.model->named_buffers(), m.local);
      },
      stack.world());
}

TEST(ShardedCheckpointMatrix, SavedUnderAnyLayoutLoadsUnderAnyOther) {
  tandem::testing::TempDir tmp;
  Member want = tandem::testing::stacked::build(Stack{}, make_thread_group(1)[0]);
  for (int s = 0; s < 3; ++s) want.step(s);
  const optim::OptimizerState want_state = want.local->state_dict();
  const Stack zero1{.data = Data::Zero1, .dp = 2},
      fsdp_tp{.data = Data::FullyShard, .dp = 2, .tp = 2, .sp = true};
  const Stack tp_zero2{.data = Data::Zero2, .dp = 2, .tp = 2}, pp_tp{.tp = 2, .pp = 2},
      pp_zero1{.data = Data::Zero1, .dp = 2, .pp = 2}, fsdp4{.data = Data::FullyShard, .dp = 4};
  const std::vector<Stack> savers = {zero1, tp_zero2, fsdp_tp, pp_tp, pp_zero1, fsdp4};
  const std::vector<Stack> loaders = {Stack{}, tp_zero2, pp_tp, pp_zero1, fsdp4};
  int i = 0;
  for (const Stack& saver : savers) {
    const std::string saved = tmp.file("saved-" + std::to_string(i++));
    run(saver, "", 0, 2, saved);
    for (const Stack& loader : loaders) {
      const std::string what = saver.str() + " -> " + loader.str();
      const std::string next = tmp.file("next-" + std::to_string(i++));
      run(loader, saved, 2, 3, next);
      // The next checkpoint, on one process: one device's model and state after 3 steps.
      Member got = tandem::testing::stacked::build(Stack{}, make_thread_group(1)[0]);
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
        if (t.dim() > 0) {
          EXPECT_LE(relative_error(by_key.at(key), t), kTolerance) << what << ": " << key;
        } else {
          EXPECT_EQ(by_key.at(key).item(), t.item()) << what << ": " << key;
        }
      }
    }
  }
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Bad input: a checkpoint of another model names both shapes and the index; an index whose
// part is not a list of placements names the index; a rank's file gone names the file.
TEST(ShardedCheckpointMatrix, ABadCheckpointIsADataErrorNamingIt) {
  using tandem::testing::error_message;
  tandem::testing::TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  run(Stack{.data = Data::Zero1, .dp = 2}, "", 0, 1, dir);
  // Another model: n_embd 8 instead of 16.
  nn::Sequential other = nn::gpt({.block_size = 8,
                                  .vocab_size = 37,
                                  .padded_vocab_size = 40,
                                  .n_layer = 2,
                                  .n_head = 4,
                                  .n_embd = 8,
                                  .bias = true,
                                  .tensor = {.dtype = kFloat64}});
  PlacementTable table;
  table.keep_only(other.named_parameters());
  const std::string shape = error_message<DataError>(
      [&] { load_sharded_checkpoint(dir, table, other.named_buffers(), nullptr); });
  EXPECT_NE(shape.find("\"model.transformer.wte.weight\" is [40, 16] in " + dir +
                       "/step-1/index.json, [40, 8] in the model"),
            std::string::npos)
      << shape;
  // A part whose placements are not a list.
  Member m = tandem::testing::stacked::build(Stack{}, make_thread_group(1)[0]);
  const std::string index = dir + "/step-1/index.json";
  const std::string text = read_all(index);
  std::string bad = text;
  const size_t at = bad.find("\"placements\"");
  ASSERT_NE(at, std::string::npos);
  bad.replace(at, 12, "\"placements\": 7, \"x\"");
  std::ofstream(index) << bad;
  const std::string part = error_message<DataError>(
      [&] { load_sharded_checkpoint(dir, *m.table, m.model->named_buffers(), m.local); });
  EXPECT_NE(part.find("is not a list of placements"), std::string::npos) << part;
  EXPECT_NE(part.find(index), std::string::npos) << part;
  std::ofstream(index) << text;
  std::filesystem::remove(dir + "/step-1/rank-1-of-2.safetensors");
  const std::string gone = error_message<Error>(
      [&] { load_sharded_checkpoint(dir, *m.table, m.model->named_buffers(), m.local); });
  EXPECT_NE(gone.find("rank-1-of-2.safetensors"), std::string::npos) << gone;
  // Saved with a communicator of fewer ranks than the table spans (fully_shard's own group under
  // TP): refused on every rank before anything is written.
  spawn_threads(
      [&](std::shared_ptr<Communicator> world) {
        Member tp_fsdp = tandem::testing::stacked::build(
            Stack{.data = Data::FullyShard, .dp = 2, .tp = 2}, world);
        const auto lone = make_thread_group(1)[0];
        const std::string msg = error_message<ValueError>([&] {
          save_sharded_checkpoint(tmp.file("lone"), 1, *lone, *tp_fsdp.table, {}, nullptr);
        });
        EXPECT_NE(msg.find("the placement table spans 4 ranks"), std::string::npos) << msg;
      },
      4);
  EXPECT_FALSE(std::filesystem::exists(tmp.file("lone")));
}

}  // namespace
}  // namespace tandem::parallel::sharded_checkpoint_test
