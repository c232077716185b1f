// PyTorch interop: a checkpoint Tandem writes is read by PyTorch (safetensors.load_file emulated
// with json + torch.frombuffer, since the package is not in Debian 12) with the same values, and
// nn.Linear(2, 3) accepts it and computes what Tandem computes; and a file PyTorch writes with the
// reference writer's rules loads in Tandem, and is byte-identical to Tandem's own; bfloat16 and
// float16 included (the same bits both ways). Skipped when
// /usr/bin/python3 cannot import torch.
#include <tandem/core/serialize/safetensors.h>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <sys/wait.h>

#include "core/safetensors_util.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::ScratchDir;

namespace {

constexpr const char* kPython = "/usr/bin/python3";  // Debian's, with python3-torch

constexpr const char* kScript = R"PY(
import json, struct, sys, torch
DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "BOOL": torch.bool,
          "BF16": torch.bfloat16, "F16": torch.float16}
NAMES = {v: k for k, v in DTYPES.items()}
RANK = {"I64": 5, "F64": 4, "F32": 3, "BF16": 2, "F16": 1, "BOOL": 0}  # the reference's enum order
BITS = {torch.bfloat16: torch.int16}  # numpy has no bfloat16: its bytes travel as int16

def load_file(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    buf, out = bytearray(data[8 + n:]), {}
    for name, info in header.items():
        (b, e), dt = info["data_offsets"], DTYPES[info["dtype"]]
        size = torch.empty(0, dtype=dt).element_size()
        raw = BITS.get(dt, dt)
        flat = torch.frombuffer(buf, dtype=raw, offset=b, count=(e - b) // size).view(dt) \
            if e > b else torch.empty(0, dtype=dt)
        out[name] = flat.reshape(info["shape"])
    return out

def save_file(tensors, path, metadata):
    items = sorted(tensors.items(), key=lambda kv: (-RANK[NAMES[kv[1].dtype]], kv[0]))
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in items:
        blob = t.contiguous().view(BITS.get(t.dtype, t.dtype)).numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))

def show(name, t):
    vals = [repr(float(v)) if t.is_floating_point() else str(int(v)) for v in t.flatten().tolist()]
    print(name, NAMES[t.dtype], ",".join(map(str, t.shape)) or "-", *vals)

mode, path = sys.argv[1], sys.argv[2]
if mode == "load":
    sd = load_file(path)
    for name in sorted(sd):
        show(name, sd[name])
    lin = torch.nn.Linear(2, 3)
    print("load_state_dict", lin.load_state_dict({"weight": sd["fc.weight"], "bias": sd["fc.bias"]}))
    with torch.no_grad():
        show("linear", lin(torch.tensor([[1.0, -2.0]])))
else:
    save_file({"fc.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3).t() * 0.25 - 0.5,
               "fc.bias": torch.tensor([0.1, -0.2, 0.3]),
               "step": torch.tensor(2**40 + 7),
               "scale": torch.tensor([1 / 3, -2.5e-300], dtype=torch.float64),
               "mask": torch.tensor([True, False, True]),
               # rounded from float32, as Tandem's side is (to nearest, ties to even)
               "brain": torch.tensor([1 / 3, -3e38, 1e-40, 65520.0]).to(torch.bfloat16),
               "half": torch.tensor([1 / 3, -65504.0, 6e-8, 65520.0]).to(torch.float16),
               "empty": torch.zeros(0, 4)}, path, {"format": "pt"})
)PY";

bool torch_available() {
  static const bool ok =
      std::system((std::string(kPython) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
  return ok;
}

// Runs the script; returns its output, failing the test when it exits non-zero.
std::string run_script(const ScratchDir& dir, const std::string& mode, const std::string& path) {
  const std::string script = dir.file("st.py");
  tandem::testing::write_bytes(script, kScript);
  const std::string cmd = str(kPython, " '", script, "' ", mode, " '", path, "' 2>&1");
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int status = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << out;
  return out;
}

// The values PyTorch printed for one tensor ("name DTYPE d0,d1 v0 v1 ...") against Tandem's.
void expect_printed(const std::string& line, const Tensor& t) {
  SCOPED_TRACE(line);
  std::istringstream in(line);
  std::string name, dtype, shape;
  in >> name >> dtype >> shape;
  std::ostringstream want_shape;
  for (size_t i = 0; i < t.shape().size(); ++i) want_shape << (i ? "," : "") << t.shape()[i];
  EXPECT_EQ(shape, t.dim() == 0 ? "-" : want_shape.str());
  std::vector<std::string> vals;
  for (std::string v; in >> v;) vals.push_back(v);
  ASSERT_EQ(int64_t(vals.size()), t.numel());
  if (t.dtype() == kInt64) {
    const std::vector<int64_t> want = t.to_vector<int64_t>();
    for (size_t i = 0; i < vals.size(); ++i) EXPECT_EQ(std::stoll(vals[i]), want[i]) << i;
  } else {
    const std::vector<double> want = t.to_vector<double>();  // float32 -> double is exact
    for (size_t i = 0; i < vals.size(); ++i) EXPECT_EQ(std::stod(vals[i]), want[i]) << i;
  }
}

NamedTensorList torch_side_tensors() {
  return {{"fc.weight", from_vector<float>({-0.5f, 0.25f, -0.25f, 0.5f, 0.0f, 0.75f}, {3, 2})},
          {"fc.bias", from_vector<float>({0.1f, -0.2f, 0.3f}, {3})},
          {"step", scalar_tensor(double((int64_t(1) << 40) + 7), {.dtype = kInt64})},
          {"scale", from_vector<double>({1.0 / 3, -2.5e-300}, {2})},
          {"mask", from_vector<bool>({true, false, true}, {3}, Device())},
          {"brain", from_vector<float>({1.0f / 3, -3e38f, 1e-40f, 65520.0f}, {4}).to(kBFloat16)},
          {"half", from_vector<float>({1.0f / 3, -65504.0f, 6e-8f, 65520.0f}, {4}).to(kFloat16)},
          {"empty", zeros({0, 4})}};
}

}  // namespace

TEST(SafetensorsTorch, PyTorchReadsWhatTandemWrites) {
  if (!torch_available()) GTEST_SKIP() << "PyTorch not available: apt-get install python3-torch";
  ScratchDir dir;
  const std::string path = dir.file("tandem.safetensors");
  // A non-square weight catches a transposed layout; I64 above 2^53 catches a trip through double.
  const NamedTensorList tensors = {
      {"fc.weight", randn({3, 2})},
      {"fc.bias", randn({3})},
      {"count", from_vector<int64_t>({(int64_t(1) << 53) + 1, -7}, {2})},
      {"noise", randn({2, 2}, {.dtype = kFloat64})},
      {"brain", randn({2, 3}).to(kBFloat16)},
      {"half", from_vector<float>({1.0f / 3, 65504.0f, -6e-8f, 1e-3f}, {4}).to(kFloat16)},
  };
  save_safetensors(path, tensors, {{"format", "pt"}});
  std::istringstream out(run_script(dir, "load", path));
  std::map<std::string, std::string> lines;
  for (std::string line; std::getline(out, line);) lines[line.substr(0, line.find(' '))] = line;
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(lines.count(name)) << "PyTorch did not print " << name << ": " << out.str();
    expect_printed(lines[name], t);
  }
  EXPECT_EQ(lines["load_state_dict"], "load_state_dict <All keys matched successfully>");
  // y = x·Wᵀ + b in both frameworks.
  const Tensor y = tensor({{1.0, -2.0}}).matmul(tensors[0].second.t()) + tensors[1].second;
  ASSERT_TRUE(lines.count("linear"));
  std::istringstream in(lines["linear"]);
  std::string skip;
  in >> skip >> skip >> skip;
  for (double want : y.to_vector<double>()) {
    double got = 0;
    in >> got;
    EXPECT_NEAR(got, want, 1e-6);
  }
}

TEST(SafetensorsTorch, TandemReadsWhatPyTorchWrites) {
  if (!torch_available()) GTEST_SKIP() << "PyTorch not available: apt-get install python3-torch";
  ScratchDir dir;
  const std::string path = dir.file("torch.safetensors");
  run_script(dir, "save", path);
  const SafetensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  const NamedTensorList want = torch_side_tensors();
  ASSERT_EQ(f.tensors.size(), want.size());
  for (const auto& [name, t] : want) {
    SCOPED_TRACE(name);
    EXPECT_EQ(f.at(name).dtype(), t.dtype());
    EXPECT_EQ(f.at(name).shape(), t.shape());
    if (t.dtype() == kInt64)
      EXPECT_EQ(f.at(name).to_vector<int64_t>(), t.to_vector<int64_t>());
    else
      EXPECT_EQ(f.at(name).to_vector<double>(), t.to_vector<double>());
  }
  // Same rules, same tensors: Tandem's file is the same bytes as PyTorch's.
  save_safetensors(dir.file("tandem.safetensors"), want, {{"format", "pt"}});
  EXPECT_EQ(tandem::testing::read_bytes(dir.file("tandem.safetensors")),
            tandem::testing::read_bytes(path));
}
