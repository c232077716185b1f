// Loading corrupt, truncated and hostile safetensors files: each must throw DataError naming the
// file (and the tensor, where one is at fault) and saying what is wrong; and files from other
// writers that are valid but ordered or padded differently must load.
#include <tandem/core/serialize/safetensors.h>
#include <filesystem>

#include "core/safetensors_util.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using tandem::testing::f32_bytes;
using tandem::testing::make_file;
using tandem::testing::ScratchDir;
using ::testing::HasSubstr;

namespace {

// Writes `bytes` to a file in `dir`, loads it, and returns the DataError message (which must name
// the file).
std::string load_error(const ScratchDir& dir, const std::string& bytes) {
  const std::string path = dir.file("model.safetensors");
  tandem::testing::write_bytes(path, bytes);
  const std::string msg = error_message<DataError>([&] { load_safetensors(path); });
  EXPECT_THAT(msg, HasSubstr("load_safetensors: " + path + ": "));
  return msg;
}

// A header with one entry "w" (F32) and the given fields, and `data` as the buffer.
std::string one_tensor(const std::string& fields, const std::string& data) {
  return make_file(R"({"w":{)" + fields + "}}", data);
}

}  // namespace

TEST(SafetensorsCorrupt, HeaderSizeBeyondTheLimitOrTheFile) {
  ScratchDir dir;
  EXPECT_THAT(load_error(dir, make_file("{}", "", 200'000'000)), HasSubstr("exceeds the limit"));
  EXPECT_THAT(load_error(dir, make_file("{}      ", "", 1000)), HasSubstr("truncated"));
  EXPECT_THAT(load_error(dir, "\x08\x00\x00"), HasSubstr("truncated"));  // not even 8 bytes
  EXPECT_THAT(load_error(dir, ""), HasSubstr("truncated"));
  // A JSON file given by mistake: its first 8 bytes read as a huge size.
  EXPECT_THAT(load_error(dir, R"({"a": 1, "b": 2})"), HasSubstr("exceeds the limit"));
}

TEST(SafetensorsCorrupt, HeaderThatIsNotJsonOrNotAnObject) {
  ScratchDir dir;
  EXPECT_THAT(load_error(dir, make_file(R"({"w":{"dtype":"F32",)", "")),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(load_error(dir, make_file(R"(["w"])", "")), HasSubstr("does not start with '{'"));
  EXPECT_THAT(load_error(dir, make_file("        ", "")), HasSubstr("does not start with '{'"));
  EXPECT_THAT(load_error(dir, make_file(std::string(8, '\0'), "")),
              HasSubstr("does not start with '{'"));
  EXPECT_THAT(load_error(dir, make_file("{}  junk", "")), HasSubstr("not valid JSON"));
  EXPECT_THAT(load_error(dir, make_file("{\"w\xff\":1}", "")), HasSubstr("not valid JSON"));
}

TEST(SafetensorsCorrupt, EntryWithMissingOrMistypedFields) {
  ScratchDir dir;
  const std::string dtype = R"("dtype":"F32")", shape = R"("shape":[2])",
                    offsets = R"("data_offsets":[0,8])";
  EXPECT_THAT(load_error(dir, one_tensor(shape + "," + offsets, f32_bytes(2))),
              HasSubstr("tensor \"w\": missing field \"dtype\""));
  EXPECT_THAT(load_error(dir, one_tensor(dtype + "," + offsets, f32_bytes(2))),
              HasSubstr("tensor \"w\": missing field \"shape\""));
  EXPECT_THAT(load_error(dir, one_tensor(dtype + "," + shape, f32_bytes(2))),
              HasSubstr("tensor \"w\": missing field \"data_offsets\""));
  EXPECT_THAT(load_error(dir, make_file(R"({"w":[1,2]})", "")),
              HasSubstr("tensor \"w\": entry is a array, not an object"));
  EXPECT_THAT(load_error(dir, one_tensor(R"("dtype":32,)" + shape + "," + offsets, f32_bytes(2))),
              HasSubstr("dtype is a number"));
  EXPECT_THAT(load_error(dir, one_tensor(dtype + R"(,"shape":[-2],)" + offsets, f32_bytes(2))),
              HasSubstr("shape holds -2, not a non-negative integer"));
  EXPECT_THAT(load_error(dir, one_tensor(dtype + R"(,"shape":[2.0],)" + offsets, f32_bytes(2))),
              HasSubstr("not a non-negative integer"));
  EXPECT_THAT(load_error(dir, one_tensor(dtype + R"(,"shape":2,)" + offsets, f32_bytes(2))),
              HasSubstr("shape is a number, not a list"));
  EXPECT_THAT(load_error(dir, one_tensor(dtype + "," + shape + R"(,"data_offsets":[0])", "")),
              HasSubstr("data_offsets is [0], not [BEGIN, END]"));
  EXPECT_THAT(load_error(dir, one_tensor(dtype + "," + shape + R"(,"data_offsets":[8,0])", "")),
              HasSubstr("end before they begin"));
}

TEST(SafetensorsCorrupt, UnknownAndUnsupportedDTypes) {
  ScratchDir dir;
  const std::string rest = R"(,"shape":[2],"data_offsets":[0,4])";
  EXPECT_THAT(load_error(dir, one_tensor(R"("dtype":"F33")" + rest, "abcd")),
              HasSubstr("tensor \"w\": unknown dtype \"F33\""));
  EXPECT_THAT(load_error(dir, one_tensor(R"("dtype":"I32")" + rest, "abcd")),
              HasSubstr("tensor \"w\": dtype I32 is not supported by Tandem (F32, F64, I64, "
                        "BOOL, BF16, F16)"));
  EXPECT_THAT(load_error(dir, one_tensor(R"("dtype":"F8_E4M3")" + rest, "abcd")),
              HasSubstr("dtype F8_E4M3 is not supported"));
}

TEST(SafetensorsCorrupt, SizeThatDoesNotMatchTheShape) {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  const std::string msg = load_error(
      dir, make_file(R"({"fc.weight":{"dtype":"F32","shape":[3,2],"data_offsets":[0,20]}})",
                     std::string(20, '\0')));
  EXPECT_EQ(msg, "load_safetensors: " + path +
                     ": tensor \"fc.weight\": data_offsets [0, 20] hold 20 bytes but shape [3, 2] "
                     "float32 needs 24");
  EXPECT_THAT(load_error(dir, one_tensor(R"("dtype":"F32","shape":[4294967296,4294967296,16],)"
                                         R"("data_offsets":[0,4])",
                                         "abcd")),
              HasSubstr("has too many elements"));
}

TEST(SafetensorsCorrupt, OffsetsThatLeaveHolesOrOverlap) {
  ScratchDir dir;
  const auto two = [](const std::string& a, const std::string& b) {
    return R"({"a":{"dtype":"F32","shape":[2],"data_offsets":)" + a +
           R"(},"b":{"dtype":"F32","shape":[2],"data_offsets":)" + b + "}}";
  };
  EXPECT_THAT(load_error(dir, make_file(two("[0,8]", "[12,20]"), f32_bytes(5))),
              HasSubstr("tensor \"b\": data_offsets [12, 20] leave bytes [8, 12) of the data "
                        "buffer unused after tensor \"a\""));
  EXPECT_THAT(load_error(dir, make_file(two("[4,12]", "[12,20]"), f32_bytes(5))),
              HasSubstr("tensor \"a\": data_offsets [4, 12] leave bytes [0, 4)"));
  EXPECT_THAT(load_error(dir, make_file(two("[0,8]", "[4,12]"), f32_bytes(3))),
              HasSubstr("tensor \"b\": data_offsets [4, 12] overlap tensor \"a\" [0, 8]"));
  EXPECT_THAT(load_error(dir, make_file(two("[0,8]", "[0,8]"), f32_bytes(2))),
              HasSubstr("overlap tensor"));
}

TEST(SafetensorsCorrupt, TruncatedFilesAndTrailingGarbage) {
  ScratchDir dir;
  const std::string good = dir.file("good.safetensors");
  save_safetensors(good, {{"w", randn({64, 64})}, {"b", randn({64})}}, {{"format", "pt"}});
  const std::string bytes = tandem::testing::read_bytes(good);
  // Cut in half (inside the data), inside the header, and one byte short.
  for (size_t keep : {bytes.size() / 2, size_t(40), bytes.size() - 1}) {
    SCOPED_TRACE(keep);
    EXPECT_THAT(load_error(dir, bytes.substr(0, keep)), HasSubstr("truncated"));
  }
  EXPECT_THAT(load_error(dir, bytes + "garbage"),
              HasSubstr("7 bytes of trailing data after the last tensor"));
}

TEST(SafetensorsCorrupt, DuplicateKeys) {
  ScratchDir dir;
  const std::string entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  EXPECT_THAT(load_error(dir, make_file(R"({"w":)" + entry + R"(,"w":)" + entry + "}", "abcd")),
              HasSubstr("duplicate key \"w\" in the header"));
  EXPECT_THAT(
      load_error(dir, one_tensor(R"("dtype":"F32","dtype":"I64","shape":[1],"data_offsets":[0,4])",
                                 "abcd")),
      HasSubstr("duplicate key \"dtype\" in the entry of \"w\""));
  EXPECT_THAT(load_error(dir, make_file(R"({"__metadata__":{"a":"1"},"__metadata__":{}})", "")),
              HasSubstr("duplicate key \"__metadata__\""));
  EXPECT_THAT(load_error(dir, make_file(R"({"__metadata__":{"a":"1","a":"2"}})", "")),
              HasSubstr("duplicate key \"a\" in the entry of \"__metadata__\""));
}

TEST(SafetensorsCorrupt, MetadataThatIsNotAStringMap) {
  ScratchDir dir;
  EXPECT_THAT(load_error(dir, make_file(R"({"__metadata__":{"epoch":3}})", "")),
              HasSubstr("__metadata__ value of \"epoch\" is a number (3)"));
  EXPECT_THAT(load_error(dir, make_file(R"({"__metadata__":{"cfg":{"lr":0.1}}})", "")),
              HasSubstr("value of \"cfg\" is a object"));
  EXPECT_THAT(load_error(dir, make_file(R"({"__metadata__":"pt"})", "")),
              HasSubstr("__metadata__ is a string; it must be a map of strings to strings"));
}

TEST(SafetensorsCorrupt, BoolBytesOtherThanZeroOrOne) {
  ScratchDir dir;
  EXPECT_THAT(
      load_error(dir, make_file(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                                std::string("\x01\x00\x02", 3))),
      HasSubstr("tensor \"m\": BOOL element 2 has byte value 2"));
}

TEST(SafetensorsCorrupt, MissingFileIsAnErrorNamingIt) {
  ScratchDir dir;
  const std::string path = dir.file("nope.safetensors");
  const std::string msg = error_message<Error>([&] { load_safetensors(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("No such file or directory"));
  EXPECT_THAT(error_message<Error>([&] { load_safetensors(dir.path().string()); }),
              HasSubstr("not a regular file"));
}

TEST(SafetensorsCorrupt, AcceptsValidFilesFromOtherWriters) {
  ScratchDir dir;
  const std::string path = dir.file("other.safetensors");
  // Leading whitespace, tensors listed out of offset order, metadata last with an unknown key,
  // an unknown field in an entry, empty tensors sharing an offset, and trailing spaces.
  const std::string header =
      "\n {\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16],\"extra\":1},"
      "\"e1\":{\"data_offsets\":[8,8],\"shape\":[0,3],\"dtype\":\"F64\"},"
      "\"e2\":{\"dtype\":\"I64\",\"shape\":[4,0],\"data_offsets\":[8,8]},"
      "\"a\":{\"shape\":[2],\"dtype\":\"F32\",\"data_offsets\":[0,8]},"
      "\"__metadata__\":{\"format\":\"pt\",\"whatever\":\"x\"}}   ";
  tandem::testing::write_bytes(path, make_file(header, f32_bytes(4)));
  const SafetensorsFile f = load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.tensors.front().first, "a");
  EXPECT_EQ(f.tensors.back().first, "b");
  EXPECT_EQ(tandem::testing::values(f.at("a")), (std::vector<double>{0, 1}));
  EXPECT_EQ(tandem::testing::values(f.at("b")), (std::vector<double>{2, 3}));
  EXPECT_EQ(f.at("e1").shape(), (Shape{0, 3}));
  EXPECT_EQ(f.at("e2").dtype(), kInt64);
  EXPECT_EQ(f.metadata.at("whatever"), "x");
  // No __metadata__ at all, and `null` (which serde reads as none), are both fine.
  tandem::testing::write_bytes(path, make_file(R"({"__metadata__":null})", ""));
  EXPECT_TRUE(load_safetensors(path).metadata.empty());
}
