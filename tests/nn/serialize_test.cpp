// Checkpoints: model and optimizer files round trip, resuming continues exactly as an
// uninterrupted run, corrupt files are named, and PyTorch loads Tandem's CNN and computes the
// same outputs.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/safetensors_util.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using tandem::testing::ScratchDir;
using tandem::testing::values;
using ::testing::HasSubstr;

namespace {

// The reference MNIST CNN (conv 1→32, conv 32→64, fc 1600→128, fc 128→10), with dropout so that
// resuming must restore the generator state too.
struct SavedNet : nn::Module {
  nn::Conv2d conv1{1, 32, 3};
  nn::Conv2d conv2{32, 64, 3};
  nn::Dropout drop{0.25};
  nn::Linear fc1{1600, 128};
  nn::Linear fc2{128, 10};
  void visit(nn::Visitor& v) override {
    v("conv1", conv1);
    v("conv2", conv2);
    v("drop", drop);
    v("fc1", fc1);
    v("fc2", fc2);
  }
  Tensor forward(const Tensor& x) {
    Tensor h = max_pool2d(relu(conv1(x)), {});
    h = max_pool2d(relu(conv2(h)), {});
    return fc2(relu(fc1(drop(h.flatten(1)))));
  }
};

Tensor batch_x(int step) {
  manual_seed(1000 + uint64_t(step));  // data is a function of the step, not of the run
  return randn({8, 1, 28, 28});
}
Tensor batch_y(int step) {
  return from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, int64_t(step % 10)}, {8});
}

void train_steps(SavedNet& net, optim::Adam& opt, int from, int to) {
  for (int s = from; s < to; ++s) {
    Tensor x = batch_x(s);
    default_generator(Device::cpu())
        .set_state({42, uint64_t(1 << 20) * uint64_t(s)});  // dropout stream
    Tensor loss = cross_entropy(net.forward(x), batch_y(s));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

}  // namespace

TEST(Checkpoint, ResumingContinuesExactlyAsAnUninterruptedRun) {
  ScratchDir dir;
  manual_seed(7);
  SavedNet a;
  SavedNet b = nn::clone(a);
  optim::Adam opt_a(a.parameters(), {.lr = 1e-3});
  train_steps(a, opt_a, 0, 6);  // uninterrupted: 6 steps

  optim::Adam opt_b(b.parameters(), {.lr = 1e-3});
  train_steps(b, opt_b, 0, 3);
  nn::save_model(dir.file("model.safetensors"), b);
  nn::save_optimizer(dir.file("optimizer.safetensors"), opt_b, {{"step", "3"}});
  manual_seed(99);
  SavedNet c;  // a fresh process would start from other weights
  optim::Adam opt_c(c.parameters(), {.lr = 0.5});
  nn::load_model(dir.file("model.safetensors"), c);
  EXPECT_EQ(nn::load_optimizer(dir.file("optimizer.safetensors"), opt_c).at("step"), "3");
  train_steps(c, opt_c, 3, 6);
  auto pa = a.state_dict(), pc = c.state_dict();
  ASSERT_EQ(pa.size(), pc.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(values(pa[i].second), values(pc[i].second)) << pa[i].first;
}

TEST(Checkpoint, TrainingIsDeterministic) {
  manual_seed(7);
  SavedNet a;
  SavedNet b = nn::clone(a);
  optim::Adam opt_a(a.parameters(), {.lr = 1e-3}), opt_b(b.parameters(), {.lr = 1e-3});
  train_steps(a, opt_a, 0, 6);
  train_steps(b, opt_b, 0, 3);
  train_steps(b, opt_b, 3, 6);
  auto pa = a.state_dict(), pb = b.state_dict();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(values(pa[i].second), values(pb[i].second)) << pa[i].first;
}

TEST(Checkpoint, ModelFileHasPyTorchNamesAndFormatMetadata) {
  ScratchDir dir;
  SavedNet net;
  nn::BatchNorm2d bn(4);
  nn::save_model(dir.file("net.safetensors"), net, {{"epoch", "2"}});
  const SafetensorsFile f = load_safetensors(dir.file("net.safetensors"));
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.metadata.at("epoch"), "2");
  EXPECT_EQ(f.at("conv2.weight").shape(), (Shape{64, 32, 3, 3}));
  EXPECT_EQ(f.at("fc1.weight").shape(), (Shape{128, 1600}));
  nn::save_model(dir.file("bn.safetensors"), bn);
  EXPECT_EQ(load_safetensors(dir.file("bn.safetensors")).at("num_batches_tracked").dtype(), kInt64);
}

TEST(Checkpoint, CorruptOrMismatchedFilesAreNamed) {
  ScratchDir dir;
  SavedNet net;
  const std::string path = dir.file("model.safetensors");
  nn::save_model(path, net);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  const std::string msg = error_message<DataError>([&] { nn::load_model(path, net); });
  EXPECT_THAT(msg, HasSubstr(path));
  nn::Linear other(3, 4);
  nn::save_model(path, other);
  const std::string mismatch = error_message<ValueError>([&] { nn::load_model(path, net); });
  EXPECT_THAT(mismatch, HasSubstr("missing keys"));
  EXPECT_THAT(mismatch, HasSubstr(path));
  optim::SGD sgd(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  EXPECT_THROW(nn::load_optimizer(path, sgd), DataError);  // a model file is not an optimizer file
}

TEST(Checkpoint, PyTorchLoadsTheWeightsAndComputesTheSameOutputs) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "PyTorch not available: apt-get install python3-torch";
  ScratchDir dir;
  manual_seed(3);
  SavedNet net;
  net.eval();
  Tensor x = randn({4, 1, 28, 28});
  Tensor y = net.forward(x);
  nn::save_model(dir.file("model.safetensors"), net);
  save_safetensors(dir.file("io.safetensors"), {{"x", x}, {"y", y}});
  const std::string script = dir.file("check.py");
  std::ofstream(script) << R"(import json, struct, sys, torch
def load(path):  # safetensors.torch.load_file, emulated (Debian has no safetensors package)
    data = open(path, 'rb').read(); n = struct.unpack('<Q', data[:8])[0]; header = json.loads(data[8:8 + n])
    dt = {'F32': torch.float32, 'F64': torch.float64, 'I64': torch.int64}
    return {k: torch.frombuffer(bytearray(data[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]), dtype=dt[v['dtype']]).reshape(v['shape'])
            for k, v in header.items() if k != '__metadata__'}
class SavedNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3); self.conv2 = torch.nn.Conv2d(32, 64, 3); self.drop = torch.nn.Dropout(0.25)
        self.fc1 = torch.nn.Linear(1600, 128); self.fc2 = torch.nn.Linear(128, 10)
    def forward(self, x):
        h = torch.max_pool2d(torch.relu(self.conv1(x)), 2); h = torch.max_pool2d(torch.relu(self.conv2(h)), 2)
        return self.fc2(torch.relu(self.fc1(self.drop(h.flatten(1)))))
net = SavedNet().eval(); print(net.load_state_dict(load(sys.argv[1])))
io = load(sys.argv[2]); out = net(io['x'])
print('max_abs_diff', (out - io['y']).abs().max().item())
)";
  FILE* p = ::popen(("/usr/bin/python3 " + script + " " + dir.file("model.safetensors") + " " +
                     dir.file("io.safetensors") + " 2>&1")
                        .c_str(),
                    "r");
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  ASSERT_EQ(::pclose(p), 0) << out;
  EXPECT_THAT(out, HasSubstr("<All keys matched successfully>"));
  const double diff = std::stod(out.substr(out.find("max_abs_diff") + 13));
  EXPECT_LT(diff, 1e-5) << out;
}
