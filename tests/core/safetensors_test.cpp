// Safetensors round trips and the writer's exact bytes: every dtype (scalars and empty tensors
// included), views written in row-major order, metadata, the reference's layout order, and the
// two byte-exact vectors of reference.md §3.2 (the upstream test file and PyTorch's Linear(2,3)).
#include <tandem/core/serialize/safetensors.h>
#include <cstdio>

#include "core/safetensors_util.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using tandem::testing::ScratchDir;
using ::testing::HasSubstr;

namespace {

// Same dtype, shape and bit-exact values (int64 compared as integers: doubles lose bits > 2^53).
void expect_identical(const Tensor& got, const Tensor& want, const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(got.shape(), want.shape());
  // (Only when non-empty: core's is_contiguous() says false for shapes with a 0 dim.)
  EXPECT_TRUE(got.numel() == 0 || got.is_contiguous());
  if (want.dtype() == kInt64)
    EXPECT_EQ(got.to_vector<int64_t>(), want.to_vector<int64_t>());
  else
    EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>());
}

std::string sha256_of(const std::string& path) {
  FILE* p = ::popen(("sha256sum '" + path + "'").c_str(), "r");
  if (p == nullptr) return "";
  char buf[65] = {};
  const size_t n = std::fread(buf, 1, 64, p);
  ::pclose(p);
  return std::string(buf, n);
}

}  // namespace

TEST(Safetensors, RoundTripsEveryDTypeScalarsAndEmptyTensors) {
  ScratchDir dir;
  const NamedTensorList tensors = {
      {"w", randn({2, 3})},
      {"f64", from_vector<double>({1.0 / 3, -2.5e-300, 1e300, -0.0}, {4})},
      {"i64", from_vector<int64_t>({INT64_MIN, -1, (int64_t(1) << 53) + 1, INT64_MAX}, {2, 2})},
      {"mask", from_vector<bool>({true, false, true, true, false}, {5}, Device())},
      {"step", scalar_tensor(7.0)},                                      // shape [], F32
      {"bn.num_batches_tracked", scalar_tensor(42, {.dtype = kInt64})},  // shape [], I64
      {"empty", empty({0})},
      {"empty3d", empty({2, 0, 3}, {.dtype = kFloat64})},
  };
  save_safetensors(dir.file("all.safetensors"), tensors);
  const SafetensorsFile f = load_safetensors(dir.file("all.safetensors"));
  ASSERT_EQ(f.tensors.size(), tensors.size());
  EXPECT_TRUE(f.metadata.empty());
  for (const auto& [name, t] : tensors) expect_identical(f.at(name), t, name);
  EXPECT_EQ(f.at("step").dim(), 0);
  EXPECT_EQ(f.at("empty3d").numel(), 0);
}

TEST(Safetensors, WritesViewsAsRowMajorCopies) {
  ScratchDir dir;
  const Tensor grid = arange(0, 6, 1, {.dtype = kFloat32}).reshape({2, 3});  // [[0,1,2],[3,4,5]]
  const Tensor t = grid.t();  // [3, 2], strides [1, 3]
  ASSERT_FALSE(t.is_contiguous());
  const Tensor col = grid.narrow(1, 1, 1);       // [2, 1] at offset 1: values 1, 4
  const Tensor bcast = tensor({5}).expand({3});  // stride 0
  save_safetensors(dir.file("v.safetensors"), {{"t", t}, {"col", col}, {"bcast", bcast}});
  const SafetensorsFile f = load_safetensors(dir.file("v.safetensors"));
  EXPECT_EQ(f.at("t").shape(), (Shape{3, 2}));
  EXPECT_EQ(tandem::testing::values(f.at("t")), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(tandem::testing::values(f.at("col")), (std::vector<double>{1, 4}));
  EXPECT_EQ(tandem::testing::values(f.at("bcast")), (std::vector<double>{5, 5, 5}));
  // The bytes themselves are row-major: "t" is last in name order, its 24 bytes end the file.
  const std::string bytes = tandem::testing::read_bytes(dir.file("v.safetensors"));
  const std::vector<float> want = {0, 3, 1, 4, 2, 5};
  EXPECT_EQ(bytes.substr(bytes.size() - 24),
            std::string(reinterpret_cast<const char*>(want.data()), 24));
}

TEST(Safetensors, ReproducesTheUpstreamForcedAlignmentFileByteForByte) {
  ScratchDir dir;
  const std::string path = dir.file("attn.safetensors");
  save_safetensors(path, {{"attn0", arange(0, 6, 1, {.dtype = kFloat32}).reshape({1, 1, 2, 3})}});
  const std::string header = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 65u);
  const std::string want =
      tandem::testing::u64_le(72) + header + std::string(7, ' ') + tandem::testing::f32_bytes(6);
  EXPECT_EQ(tandem::testing::read_bytes(path), want);
  EXPECT_EQ(want.size(), 104u);
  EXPECT_EQ(sha256_of(path), "6a4fa8e1b5ca729d7d6151d6ae63f41aa35ad4fbceb03d19f9a6b6a333aa3776");
}

TEST(Safetensors, ReproducesTheLinearHeaderWithMetadata) {
  ScratchDir dir;
  const std::string path = dir.file("linear.safetensors");
  // State-dict order (weight first); the file orders by name, as the reference writer does.
  save_safetensors(path, {{"weight", randn({3, 2})}, {"bias", randn({3})}}, {{"format", "pt"}});
  const std::string bytes = tandem::testing::read_bytes(path);
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"bias":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
      R"("weight":{"dtype":"F32","shape":[3,2],"data_offsets":[12,36]}})";
  ASSERT_EQ(header.size(), 151u);
  EXPECT_EQ(bytes.substr(0, 8), tandem::testing::u64_le(152));
  EXPECT_EQ(bytes.substr(8, 152), header + " ");
  EXPECT_EQ(bytes.size(), 8u + 152 + 36);
}

TEST(Safetensors, LaysOutTensorsByDTypeAlignmentThenName) {
  ScratchDir dir;
  const std::string path = dir.file("order.safetensors");
  save_safetensors(path, {{"a_bool", from_vector<bool>({true, false, true}, {3}, Device())},
                          {"b_f32", zeros({2})},
                          {"c_f64", zeros({1}, {.dtype = kFloat64})},
                          {"d_i64", zeros({1}, {.dtype = kInt64})},
                          {"e_f32", zeros({1})},
                          {"a_i64", zeros({2}, {.dtype = kInt64})}});
  // The reference sorts by its Dtype enum, descending: I64 after F64 in the enum, so I64 first.
  const std::string header = R"({"a_i64":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
                             R"("d_i64":{"dtype":"I64","shape":[1],"data_offsets":[16,24]},)"
                             R"("c_f64":{"dtype":"F64","shape":[1],"data_offsets":[24,32]},)"
                             R"("b_f32":{"dtype":"F32","shape":[2],"data_offsets":[32,40]},)"
                             R"("e_f32":{"dtype":"F32","shape":[1],"data_offsets":[40,44]},)"
                             R"("a_bool":{"dtype":"BOOL","shape":[3],"data_offsets":[44,47]}})";
  const std::string bytes = tandem::testing::read_bytes(path);
  EXPECT_EQ(bytes.substr(8, header.size()), header);
  std::vector<std::string> names;
  for (const auto& [name, t] : load_safetensors(path).tensors) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"a_i64", "d_i64", "c_f64", "b_f32", "e_f32", "a_bool"}));
}

TEST(Safetensors, MetadataRoundTrips) {
  ScratchDir dir;
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"param_groups", R"([{"lr": 0.001, "betas": [0.9, 0.999]}])"},
      {"note", "quotes \" backslash \\ newline \n tab \t unicode \xc3\xa9\xe2\x82\xac"},
      {"empty", ""}};
  save_safetensors(dir.file("m.safetensors"), {{"x", ones({2})}}, metadata);
  EXPECT_EQ(load_safetensors(dir.file("m.safetensors")).metadata, metadata);
}

TEST(Safetensors, EmptyCheckpointsMatchTheReference) {
  ScratchDir dir;
  // Upstream test_empty: no tensors is "{}" plus 6 spaces; with metadata, N = 40.
  save_safetensors(dir.file("e.safetensors"), {});
  EXPECT_EQ(tandem::testing::read_bytes(dir.file("e.safetensors")),
            tandem::testing::u64_le(8) + "{}      ");
  save_safetensors(dir.file("m.safetensors"), {}, {{"framework", "pt"}});
  EXPECT_EQ(tandem::testing::read_bytes(dir.file("m.safetensors")),
            tandem::testing::u64_le(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
  EXPECT_TRUE(load_safetensors(dir.file("e.safetensors")).tensors.empty());
  EXPECT_EQ(load_safetensors(dir.file("m.safetensors")).metadata.at("framework"), "pt");
}

TEST(Safetensors, LoadsOntoTheRequestedDevice) {
  ScratchDir dir;
  save_safetensors(dir.file("d.safetensors"), {{"x", tensor({1, 2, 3})}});
  const SafetensorsFile f = load_safetensors(dir.file("d.safetensors"), Device("cpu:1"));
  EXPECT_EQ(f.at("x").device(), Device("cpu:1"));
  EXPECT_EQ(tandem::testing::values(f.at("x")), (std::vector<double>{1, 2, 3}));
}

TEST(Safetensors, SavesTensorsFromAnyDevice) {
  ScratchDir dir;
  const Tensor x = tensor({{1, 2}, {3, 4}}, {.device = Device("cpu:2")}).t();
  save_safetensors(dir.file("d.safetensors"), {{"x", x}});
  EXPECT_EQ(tandem::testing::values(load_safetensors(dir.file("d.safetensors")).at("x")),
            (std::vector<double>{1, 3, 2, 4}));
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  save_safetensors(dir.file("c.safetensors"), {{"x", x.to(Device("cuda:0"))}});
  const SafetensorsFile f = load_safetensors(dir.file("c.safetensors"), Device("cuda:0"));
  EXPECT_EQ(f.at("x").device(), Device("cuda:0"));
  EXPECT_EQ(tandem::testing::values(f.at("x")), (std::vector<double>{1, 3, 2, 4}));
}

TEST(Safetensors, AtNamesTheFileAndTheMissingTensor) {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"fc.weight", zeros({2, 2})}});
  const SafetensorsFile f = load_safetensors(path);
  EXPECT_TRUE(f.contains("fc.weight"));
  EXPECT_FALSE(f.contains("fc.bias"));
  const std::string msg = error_message<DataError>([&] { f.at("fc.bias"); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("\"fc.bias\""));
  EXPECT_THAT(msg, HasSubstr("\"fc.weight\""));  // what is there, to spot a typo
}

TEST(Safetensors, SaveRejectsBadNamesAndWritesNothing) {
  ScratchDir dir;
  const std::string path = dir.file("bad.safetensors");
  std::string msg = error_message<ValueError>([&] {
    save_safetensors(path, {{"w", zeros({1})}, {"b", zeros({1})}, {"w", ones({1})}});
  });
  EXPECT_THAT(msg, HasSubstr("duplicate tensor name \"w\""));
  EXPECT_THAT(msg, HasSubstr(path));
  msg = error_message<ValueError>([&] { save_safetensors(path, {{"__metadata__", zeros({1})}}); });
  EXPECT_THAT(msg, HasSubstr("reserved"));
  msg = error_message<ValueError>([&] { save_safetensors(path, {{"g", Tensor()}}); });
  EXPECT_THAT(msg, HasSubstr("\"g\" is undefined"));
  msg = error_message<ValueError>([&] { save_safetensors(path, {{"bad\xff", zeros({1})}}); });
  EXPECT_THAT(msg, HasSubstr("not valid UTF-8"));
  EXPECT_TRUE(dir.entries().empty());  // no target, no temporary file
}
