// tests/bad_input/files_test.cpp — the bad-input table, part 1: files. Truncated, corrupt and
// oversized files of each format (safetensors, IDX raw and gzipped), checkpoints that do not fit
// the model, datasets whose parts disagree, labels out of range, a write that fails half-way, and
// the temporary files a killed save leaves behind.
#include <sys/resource.h>
#include <unistd.h>
#include <algorithm>
#include <csignal>
#include <filesystem>

#include <tandem/core/serialize/atomic_file.h>
#include <tandem/data/file_io.h>

#include "bad_input/bad_input.h"

namespace tandem::bad_input {
namespace {
using testing::read_bytes;
using testing::write_bytes;

std::string good_safetensors(const TempDir& dir) {
  const std::string path = dir.file("model.safetensors");
  manual_seed(0);
  nn::Linear linear(2, 3);
  nn::save_model(path, linear);
  return path;
}

std::string good_idx(const TempDir& dir, bool gz) {
  const std::string path = dir.file(gz ? "images.gz" : "images");
  data::IdxImages images{.count = 4, .rows = 5, .cols = 6, .pixels = std::vector<uint8_t>(120, 9)};
  data::write_idx_images(path, images);
  return path;
}

// A save that fails part-way (the file-size limit stops its writes) in a child process, over a
// good checkpoint: returns the child's error message.
std::string save_with_file_size_limit(const std::string& path, rlim_t limit) {
  const std::string msg_path = path + ".msg";
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
    rlimit r{limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &r);
    nn::Linear big(64, 64);
    std::string msg = "no error";
    try {
      nn::save_model(path, big);
    } catch (const Error& e) {
      msg = e.what();
    }
    r = {RLIM_INFINITY, RLIM_INFINITY};
    ::setrlimit(RLIMIT_FSIZE, &r);
    write_bytes(msg_path, msg);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return read_bytes(msg_path);
}

// The pid of a process that has exited and been reaped, as a save killed part way leaves it.
pid_t exited_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

const Row kFileRows[] = {
    {"SafetensorsTruncated",
     [](const TempDir& d) {
       const std::string p = good_safetensors(d);
       std::filesystem::resize_file(p, std::filesystem::file_size(p) - 5);
       return thrown([&] { load_safetensors(p); });
     },
     "DataError",
     {"{dir}/model.safetensors", "truncated"}},
    {"SafetensorsCorruptHeader",
     [](const TempDir& d) {
       const std::string p = good_safetensors(d);
       std::string bytes = read_bytes(p);
       bytes[9] = '[';  // the header's JSON no longer parses
       write_bytes(p, bytes);
       return thrown([&] { load_safetensors(p); });
     },
     "DataError",
     {"{dir}/model.safetensors", "header"}},
    {"SafetensorsOversizedHeader",
     [](const TempDir& d) {
       const std::string p = good_safetensors(d);
       std::string bytes = read_bytes(p);
       bytes.replace(0, 8, std::string("\x00\x00\x00\x00\x01\x00\x00\x00", 8));  // 4 GiB
       write_bytes(p, bytes);
       return thrown([&] { load_safetensors(p); });
     },
     "DataError",
     {"{dir}/model.safetensors", "4294967296"}},
    {"CheckpointNamesDoNotMatchTheModel",
     [](const TempDir& d) {
       const std::string p = good_safetensors(d);
       nn::Sequential other(nn::Linear(2, 3));
       return thrown([&] { nn::load_model(p, other); });
     },
     "ValueError",
     {"missing", "\"0.weight\"", "unexpected", "\"weight\"", "{dir}/model.safetensors"}},
    {"CheckpointShapesDoNotMatchTheModel",
     [](const TempDir& d) {
       const std::string p = good_safetensors(d);
       nn::Linear wider(2, 4);
       return thrown([&] { nn::load_model(p, wider); });
     },
     "ValueError",
     {"shape mismatch for \"weight\"", "[3, 2]", "[4, 2]", "{dir}/model.safetensors"},
     nullptr},
    {"IdxTruncated",
     [](const TempDir& d) {
       const std::string p = good_idx(d, false);
       std::filesystem::resize_file(p, 100);
       return thrown([&] { data::read_idx_images(p); });
     },
     "DataError",
     {"{dir}/images", "truncated", "expected 120 bytes"}},
    {"IdxGzipCorrupt",
     [](const TempDir& d) {
       const std::string p = good_idx(d, true);
       std::string bytes = read_bytes(p);
       for (size_t i = 12; i < bytes.size() - 8; ++i) bytes[i] = char(bytes[i] ^ 0x5a);
       write_bytes(p, bytes);
       return thrown([&] { data::read_idx_images(p); });
     },
     "DataError",
     {"{dir}/images.gz", "gzip"}},
    {"IdxGzipTruncated",
     [](const TempDir& d) {
       const std::string p = good_idx(d, true);
       std::filesystem::resize_file(p, std::filesystem::file_size(p) / 2);
       return thrown([&] { data::read_idx_images(p); });
     },
     "DataError",
     {"{dir}/images.gz", "truncated"}},
    {"IdxOversizedHeader",
     [](const TempDir& d) {
       const std::string p = d.file("huge.gz");
       // 2^32-1 images of 65535x65535 claimed in a tiny gzipped file.
       const std::string_view header(
           "\x00\x00\x08\x03\xff\xff\xff\xff\x00\x00\xff\xff"
           "\x00\x00\xff\xff",
           16);
       data::detail::write_file_atomically(p, {&header, 1}, /*gzip=*/true);
       return thrown([&] { data::read_idx_images(p); });
     },
     "DataError",
     {"{dir}/huge.gz", "corrupt header"}},
    {"IdxHeaderPromisesMoreThanTheFileHolds",
     [](const TempDir& d) {
       const std::string p = d.file("images");
       // A million 28x28 images promised by a 20-byte file: refused from its size, unallocated.
       write_bytes(p, std::string("\x00\x00\x08\x03\x00\x0f\x42\x40\x00\x00\x00\x1c"
                                  "\x00\x00\x00\x1c",
                                  16) +
                          "abcd");
       return thrown([&] { data::read_idx_images(p); });
     },
     "DataError",
     {"{dir}/images", "truncated", "the file is 20 bytes; its header promises 16 + 784000000"}},
    {"IdxLongerThanItsHeaderSays",
     [](const TempDir& d) {
       const std::string p = good_idx(d, false);
       write_bytes(p, read_bytes(p) + "xx");
       return thrown([&] { data::read_idx_images(p); });
     },
     "DataError",
     {"{dir}/images", "size mismatch"}},
    {"DatasetImageAndLabelCountsDiffer",
     [](const TempDir& d) {
       write_dataset(d.str(), 5, /*labels=*/4);
       return thrown([&] { data::MNIST(d.str(), data::Split::Train); });
     },
     "DataError",
     {"size mismatch", "train-images-idx3-ubyte holds 5 images", "train-labels-idx1-ubyte", "4"}},
    {"DatasetLabelOutOfRange",
     [](const TempDir& d) {
       write_dataset(d.str(), 3);
       data::write_idx_labels(d.file("train-labels-idx1-ubyte"), {1, 12, 3});
       return thrown([&] { data::MNIST(d.str(), data::Split::Train); });
     },
     "DataError",
     {"label 12 at index 1", "train-labels-idx1-ubyte"}},
    {"LossTargetOutOfRange",
     [](const TempDir&) {
       const Tensor logits = zeros({2, 10});
       const Tensor target = tensor({3, 12}, {.dtype = kInt64});
       return thrown([&] { cross_entropy(logits, target); });
     },
     "IndexError",
     {"cross_entropy", "target value 12 at index 1", "[0, 10)"}},
    {"LossOverNoClasses",
     [](const TempDir&) {
       const Tensor logits = zeros({2, 0});
       const Tensor target = tensor({0, 0}, {.dtype = kInt64});
       return thrown([&] { cross_entropy(logits, target); });
     },
     "ShapeError",
     {"cross_entropy", "[2, 0]", "has no classes"}},
    {"WriteFailsHalfWayOverAGoodCheckpoint",
     [](const TempDir& d) {
       const std::string p = good_safetensors(d);
       write_bytes(d.file("before"), read_bytes(p));
       return Outcome{"Error", save_with_file_size_limit(p, 4096)};
     },
     "Error",
     {"{dir}/model.safetensors"},
     [](const TempDir& d) {  // the old file, byte for byte, and no temporary left behind
       EXPECT_EQ(read_bytes(d.file("model.safetensors")), read_bytes(d.file("before")));
       for (const auto& e : std::filesystem::directory_iterator(d.str()))
         EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
     }},
    {"SaveAfterAKilledSave",
     [](const TempDir& d) {
       // What kill -9 during `tandem train --checkpoint` leaves: the pair's temporaries, whole
       // checkpoints that nothing else removes. The next save removes those of dead writers.
       const std::string p = good_safetensors(d), dead = std::to_string(exited_pid());
       for (const std::string& f : {p + ".tmp." + dead, p + ".next.tmp." + dead})
         write_bytes(f, std::string(4096, 'x'));
       write_bytes(p + ".next.tmp." + std::to_string(::getpid()), "a live writer's");
       manual_seed(1);
       nn::Linear linear(2, 3);
       return thrown([&] { nn::save_model(p, linear); });
     },
     "none",
     {},
     [](const TempDir& d) {
       std::vector<std::string> names;
       for (const auto& e : std::filesystem::directory_iterator(d.str()))
         names.push_back(e.path().filename().string());
       std::sort(names.begin(), names.end());
       EXPECT_EQ(names,
                 (std::vector<std::string>{"model.safetensors", "model.safetensors.next.tmp." +
                                                                    std::to_string(::getpid())}));
       EXPECT_TRUE(remove_stale_temporaries(d.file("model.safetensors")).empty());
     }},
};

class Files : public ::testing::TestWithParam<Row> {};
TEST_P(Files, GivesAClearErrorAndLosesNothing) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(BadInput, Files, ::testing::ValuesIn(kFileRows), row_name);

}  // namespace
}  // namespace tandem::bad_input
