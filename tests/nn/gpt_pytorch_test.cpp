// Tandem's GPT against PyTorch's (tests/fixtures/gpt-pytorch: nanoGPT's model in float64): the
// same weights give the same logits, loss and every gradient, and three AdamW steps with decay
// groups and clipping give the same parameters, to 1e-9 relative (llm.c's test_gpt2 does the
// same against its PyTorch dump).
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/safetensors_util.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;

namespace {

constexpr double kRtol = 1e-9, kAtol = 1e-12;

struct Fixture {
  SafetensorsFile file =
      load_safetensors(TANDEM_TEST_FIXTURES "/gpt-pytorch/gpt2layer.safetensors");
  nn::Sequential model = nn::gpt({.block_size = 8,
                                  .vocab_size = 11,
                                  .n_layer = 2,
                                  .n_head = 2,
                                  .n_embd = 16,
                                  .bias = true,
                                  .tensor = {.dtype = kFloat64}});
  Fixture() {
    nn::StateDict weights;
    for (auto& [name, t] : file.tensors)
      if (name.starts_with("weight.")) weights.emplace_back(name.substr(7), t);
    model.load_state_dict(weights);  // strict: every name is nanoGPT's, lm_head.weight included
  }
  Tensor batch(const char* name, int64_t step) const { return file.at(name).select(0, step); }
};

}  // namespace

TEST(GPTMatchesPyTorch, LogitsLossAndEveryGradient) {
  Fixture f;
  const Tensor logits = f.model(f.batch("x", 0));
  EXPECT_TRUE(all_close(logits, f.file.at("logits"), kAtol, kRtol));
  const Tensor loss = nn::gpt_loss(logits, f.batch("y", 0));
  EXPECT_TRUE(all_close(loss.reshape({1}), f.file.at("loss"), kAtol, kRtol));
  loss.backward();
  int checked = 0;
  for (auto& [name, p] : f.model.named_parameters()) {
    EXPECT_TRUE(all_close(p.grad(), f.file.at("grad." + name), kAtol, kRtol)) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 2 + 2 * 12 + 2);  // the tied weight once, its gradient summed over both uses
}

TEST(GPTMatchesPyTorch, ThreeAdamWStepsWithDecayGroupsAndClipping) {
  Fixture f;
  optim::AdamW opt(optim::adamw_groups(
      f.model.named_parameters(), {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1}));
  const std::vector<double> want_norms = f.file.at("grad_norms").to_vector<double>();
  for (int64_t s = 0; s < 3; ++s) {
    opt.zero_grad();
    nn::gpt_loss(f.model(f.batch("x", s)), f.batch("y", s)).backward();
    const double norm = optim::clip_grad_norm_(f.model.parameters(), 1.0);
    EXPECT_NEAR(norm, want_norms[size_t(s)], kRtol * want_norms[size_t(s)]) << "step " << s;
    opt.step();
  }
  for (auto& [name, t] : f.model.state_dict())
    EXPECT_TRUE(all_close(t, f.file.at("after." + name), kAtol, kRtol)) << name;
}

namespace {

// Runs nanoGPT's model in PyTorch on `model_file` (strictly, by nanoGPT's names) and the input of
// `io_file`; returns what the script printed (the load's result, the tie, the largest logit
// difference from io_file's "logits").
std::string pytorch_check(tandem::testing::ScratchDir& dir, const std::string& model_file,
                          const std::string& io_file) {
  const std::string script = dir.file("check.py");
  std::ofstream(script) << R"(import json, struct, sys, torch
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, sys.argv[1])
import make_fixture
def load(path):  # safetensors.torch.load_file, emulated (Debian has no safetensors package)
    data = open(path, 'rb').read(); n = struct.unpack('<Q', data[:8])[0]; header = json.loads(data[8:8 + n])
    dt = {'F32': torch.float32, 'F64': torch.float64, 'I64': torch.int64}
    return {k: torch.frombuffer(bytearray(data[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]), dtype=dt[v['dtype']]).reshape(v['shape'])
            for k, v in header.items() if k != '__metadata__'}
torch.set_default_dtype(torch.float64)
model = make_fixture.GPT(); print(model.load_state_dict(load(sys.argv[2])))
io = load(sys.argv[3])
print('tied', model.lm_head.weight is model.transformer.wte.weight)
print('max_abs_diff', (model(io['x']) - io['logits']).abs().max().item())
)";
  const std::string command = "/usr/bin/python3 " + script +
                              " " TANDEM_TEST_FIXTURES "/gpt-pytorch " + model_file + " " +
                              io_file + " 2>&1";
  FILE* p = ::popen(command.c_str(), "r");
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  EXPECT_EQ(::pclose(p), 0) << out;
  return out;
}

void expect_pytorch_agrees(const std::string& out) {
  EXPECT_THAT(out, ::testing::HasSubstr("<All keys matched successfully>"));
  EXPECT_THAT(out, ::testing::HasSubstr("tied True"));
  const size_t at = out.find("max_abs_diff");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_LT(std::stod(out.substr(at + 13)), 1e-12) << out;
}

bool have_pytorch() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

}  // namespace

// The other way: PyTorch loads Tandem's checkpoint into nanoGPT's model (strictly, by nanoGPT's
// names) and computes the same logits.
TEST(GPTMatchesPyTorch, PyTorchLoadsTandemsCheckpoint) {
  if (!have_pytorch()) GTEST_SKIP() << "PyTorch not available: apt-get install python3-torch";
  Fixture f;
  tandem::testing::ScratchDir dir;
  manual_seed(7);
  for (Tensor& p : f.model.parameters()) {
    NoGradGuard no_grad;
    p.copy_(randn(p.shape(), {.dtype = kFloat64}) * 0.1);
  }
  const Tensor x = f.batch("x", 1);
  nn::save_model(dir.file("gpt.safetensors"), f.model);
  save_safetensors(dir.file("io.safetensors"), {{"x", x}, {"logits", f.model(x)}});
  expect_pytorch_agrees(
      pytorch_check(dir, dir.file("gpt.safetensors"), dir.file("io.safetensors")));
}

// A model fully sharded over 2 ranks (threads), exported as one file from its whole state dict
// (what `tandem train --zero 3` checkpoints): PyTorch loads it as it loads one device's.
TEST(GPTMatchesPyTorch, PyTorchLoadsAFullyShardedModelsExport) {
  if (!have_pytorch()) GTEST_SKIP() << "PyTorch not available: apt-get install python3-torch";
  Fixture f;
  tandem::testing::ScratchDir dir;
  const Tensor x = f.batch("x", 1);
  save_safetensors(dir.file("io.safetensors"), {{"x", x}, {"logits", f.model(x)}});
  std::vector<nn::Sequential> models{nn::clone(f.model), nn::clone(f.model)};
  models[1].to(Device::cpu(1));
  parallel::spawn_threads(
      [&](std::shared_ptr<parallel::Communicator> group) {
        parallel::FullyShardedModule fsdp(std::move(models[size_t(group->rank())]),
                                          {.group = group});
        const nn::StateDict whole = fsdp.full_state_dict(/*rank0_only=*/true);
        if (group->rank() == 0) nn::save_model(dir.file("export.safetensors"), whole);
      },
      2);
  expect_pytorch_agrees(
      pytorch_check(dir, dir.file("export.safetensors"), dir.file("io.safetensors")));
}
