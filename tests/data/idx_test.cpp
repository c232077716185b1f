// IDX reading and writing: round trips through plain and gzipped files, the exact header bytes,
// and every kind of damage (bad magic, short header, short data, extra data, broken gzip, missing
// file), each a DataError that names the file.
#include <tandem/data/file_io.h>
#include <tandem/data/idx.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <filesystem>
#include <functional>

#include "support/expect.h"
#include "temp_dir.h"

using namespace tandem;
using namespace tandem::data;
using tandem::testing::error_message;
using tandem::testing::read_bytes;
using tandem::testing::TempDir;
using tandem::testing::write_bytes;
using ::testing::HasSubstr;

namespace {

// `count` images of 28x28 whose pixel j of image i is (i * 31 + j) mod 256.
IdxImages pattern_images(int64_t count) {
  IdxImages im{.count = count, .rows = 28, .cols = 28, .pixels = {}};
  for (int64_t i = 0; i < count; ++i)
    for (int64_t j = 0; j < 784; ++j) im.pixels.push_back(uint8_t((i * 31 + j) % 256));
  return im;
}

// A plain images file with the first `keep` bytes of a valid 3-image file.
std::string cut_images_file(const TempDir& dir, size_t keep) {
  const std::string path = dir.file("cut-images-idx3-ubyte");
  write_idx_images(path, pattern_images(3));
  write_bytes(path, read_bytes(path).substr(0, keep));
  return path;
}

// A header promising a million 28x28 images (784 MB), and `tail` after it.
std::string million_images_header(const std::string& tail) {
  return std::string("\x00\x00\x08\x03\x00\x0f\x42\x40\x00\x00\x00\x1c\x00\x00\x00\x1c", 16) + tail;
}

// How much the peak resident memory grows, in KiB, while `fn` runs (in a child process, whose
// peak starts at its size when forked, so what the tests before it used does not count).
long peak_growth_kib(const std::function<void()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    rusage before{}, after{};
    ::getrusage(RUSAGE_SELF, &before);
    try {
      fn();
    } catch (...) {
    }
    ::getrusage(RUSAGE_SELF, &after);
    const long kib = after.ru_maxrss - before.ru_maxrss;
    ::_exit(::write(fds[1], &kib, sizeof kib) == sizeof kib ? 0 : 1);
  }
  ::close(fds[1]);
  long kib = -1;
  if (::read(fds[0], &kib, sizeof kib) != sizeof kib) kib = -1;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return kib;
}

}  // namespace

TEST(Idx, ImagesAndLabelsRoundTripPlainAndGzipped) {
  const TempDir dir;
  const IdxImages images = pattern_images(5);
  const std::vector<int64_t> labels = {0, 9, 3, 255, 7};
  for (const std::string suffix : {"", ".gz"}) {
    const std::string ip = dir.file("images" + suffix), lp = dir.file("labels" + suffix);
    write_idx_images(ip, images);
    write_idx_labels(lp, labels);
    const IdxImages back = read_idx_images(ip);
    EXPECT_EQ(back.count, 5);
    EXPECT_EQ(back.rows, 28);
    EXPECT_EQ(back.cols, 28);
    EXPECT_EQ(back.pixels, images.pixels);
    EXPECT_EQ(read_idx_labels(lp), labels);
  }
  // The .gz file really is gzip (magic 1f 8b) and smaller; the plain one is 16 + 5·784 bytes.
  const std::string gz = read_bytes(dir.file("images.gz"));
  EXPECT_EQ(gz.substr(0, 2), "\x1f\x8b");
  EXPECT_LT(gz.size(), 16u + 5 * 784);
  EXPECT_EQ(read_bytes(dir.file("images")).size(), 16u + 5 * 784);
  EXPECT_EQ(read_bytes(dir.file("labels")).size(), 8u + 5);
}

TEST(Idx, HeadersAreBigEndianWithTheStandardMagics) {
  const TempDir dir;
  write_idx_images(dir.file("i"), pattern_images(8000));
  EXPECT_EQ(read_bytes(dir.file("i")).substr(0, 16),
            std::string("\x00\x00\x08\x03\x00\x00\x1f\x40\x00\x00\x00\x1c\x00\x00\x00\x1c", 16));
  write_idx_labels(dir.file("l"), {1, 2, 3});
  EXPECT_EQ(read_bytes(dir.file("l")),
            std::string("\x00\x00\x08\x01\x00\x00\x00\x03\x01\x02\x03", 11));
}

TEST(Idx, WritingLeavesNoTemporaryFilesBehind) {
  const TempDir dir;
  write_idx_images(dir.file("a.gz"), pattern_images(2));
  write_idx_images(dir.file("a.gz"), pattern_images(1));  // replaces the file
  write_idx_labels(dir.file("b"), {4});
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.str()))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a.gz", "b"}));
  EXPECT_EQ(read_idx_images(dir.file("a.gz")).count, 1);
}

TEST(Idx, BadMagicNamesTheFileAndBothMagics) {
  const TempDir dir;
  const std::string path = dir.file("train-images-idx3-ubyte");
  write_bytes(path, std::string(16 + 784, '\0'));
  std::string msg = error_message<DataError>([&] { read_idx_images(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("bad magic 0x00000000 (expected 0x00000803)"));
  // A labels file where images are expected, and the other way round.
  write_idx_labels(path, {1, 2});
  msg = error_message<DataError>([&] { read_idx_images(path); });
  EXPECT_THAT(msg, HasSubstr("bad magic 0x00000801 (expected 0x00000803)"));
  write_idx_images(path, pattern_images(1));
  msg = error_message<DataError>([&] { read_idx_labels(path); });
  EXPECT_THAT(msg, HasSubstr("bad magic 0x00000803 (expected 0x00000801)"));
  EXPECT_THAT(msg, HasSubstr(path));
}

TEST(Idx, TruncatedHeaderIsADataError) {
  const TempDir dir;
  for (size_t keep : {0u, 3u, 7u, 15u}) {
    const std::string path = cut_images_file(dir, keep);
    const std::string msg = error_message<DataError>([&] { read_idx_images(path); });
    EXPECT_THAT(msg, HasSubstr(path));
    EXPECT_THAT(msg, HasSubstr(str("truncated header: expected 16 bytes, found ", keep)));
  }
}

TEST(Idx, TruncatedDataSaysHowMuchWasExpectedAndFound) {
  const TempDir dir;
  const std::string path = cut_images_file(dir, 16 + 1000);
  std::string msg = error_message<DataError>([&] { read_idx_images(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("truncated: expected 2352 bytes of pixel data"));
  EXPECT_THAT(msg, HasSubstr("found 1000"));

  const std::string labels = dir.file("labels");
  write_idx_labels(labels, {1, 2, 3, 4});
  write_bytes(labels, read_bytes(labels).substr(0, 10));
  msg = error_message<DataError>([&] { read_idx_labels(labels); });
  EXPECT_THAT(msg, HasSubstr(labels));
  EXPECT_THAT(msg, HasSubstr("expected 4 bytes of label data"));
  EXPECT_THAT(msg, HasSubstr("found 2"));
}

TEST(Idx, ExtraBytesAfterTheDataAreADataError) {
  const TempDir dir;
  const std::string path = dir.file("labels");
  write_idx_labels(path, {1, 2});
  write_bytes(path, read_bytes(path) + "junk");
  const std::string msg = error_message<DataError>([&] { read_idx_labels(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("size mismatch"));
}

TEST(Idx, TruncatedOrCorruptGzipIsADataError) {
  const TempDir dir;
  const std::string path = dir.file("images.gz");
  write_idx_images(path, pattern_images(50));
  const std::string whole = read_bytes(path);
  write_bytes(path, whole.substr(0, whole.size() / 2));
  std::string msg = error_message<DataError>([&] { read_idx_images(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("truncated"));

  std::string garbled = whole;
  for (size_t i = 20; i < 60; ++i) garbled[i] = char(garbled[i] ^ 0x5a);
  write_bytes(path, garbled);
  msg = error_message<DataError>([&] { read_idx_images(path); });
  EXPECT_THAT(msg, HasSubstr(path));
}

TEST(Idx, AMissingFileIsADataErrorNamingIt) {
  const TempDir dir;
  const std::string path = dir.file("nothing-here");
  const std::string msg = error_message<DataError>([&] { read_idx_labels(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("no such file"));
}

TEST(Idx, AHeaderClaimingAbsurdSizesFailsWithoutAllocatingThem) {
  const TempDir dir;
  const std::string path = dir.file("huge");
  // count = rows = cols = 0xffffffff: about 2^96 bytes.
  write_bytes(path, std::string("\x00\x00\x08\x03", 4) + std::string(12, '\xff'));
  EXPECT_THAT(error_message<DataError>([&] { read_idx_images(path); }),
              HasSubstr("corrupt header"));
  // count = 60000, 28x28, but no pixels: plausible sizes, truncated data.
  write_bytes(path,
              std::string("\x00\x00\x08\x03\x00\x00\xea\x60\x00\x00\x00\x1c\x00\x00\x00\x1c", 16));
  EXPECT_THAT(error_message<DataError>([&] { read_idx_images(path); }),
              HasSubstr("expected 47040000 bytes of pixel data (60000 images of 28x28)"));
}

// Issue 55: a 20-byte file whose header promises a million images is refused from its size,
// before a buffer for the images exists, and the error names both sizes.
TEST(Idx, AFileShorterThanItsHeaderPromisesIsRefusedBeforeAllocating) {
  const TempDir dir;
  const std::string path = dir.file("train-images-idx3-ubyte");
  write_bytes(path, million_images_header("abcd"));
  const std::string msg = error_message<DataError>([&] { read_idx_images(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("truncated: expected 784000000 bytes of pixel data"));
  EXPECT_THAT(msg, HasSubstr("the file is 20 bytes; its header promises 16 + 784000000"));
  const long kib = peak_growth_kib([&] { read_idx_images(path); });
  ASSERT_GE(kib, 0) << "the child process did not report";
  EXPECT_LT(kib, 8 * 1024) << "reading a 20-byte file raised the peak memory by " << kib << " KiB";

  write_bytes(path, million_images_header(std::string(84, 'x')));
  EXPECT_THAT(error_message<DataError>([&] { read_idx_images(path); }),
              HasSubstr("found 84 (the file is 100 bytes"));
}

// A gzipped file's decompressed size is only known by reading it: the buffer grows with the data
// (1 MiB at first), not with the header's promise, and the error names both sizes.
TEST(Idx, AShortGzippedFileIsReadInChunksNotIntoThePromisedSize) {
  const TempDir dir;
  const std::string path = dir.file("train-images-idx3-ubyte.gz");
  const std::string bytes = million_images_header("abcd");
  const std::string_view parts[] = {bytes};
  tandem::data::detail::write_file_atomically(path, parts, /*gzip=*/true);
  const std::string msg = error_message<DataError>([&] { read_idx_images(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("found 4 (the decompressed data is 20 bytes; its header promises "
                             "16 + 784000000 = 784000016)"));
  const long kib = peak_growth_kib([&] { read_idx_images(path); });
  ASSERT_GE(kib, 0) << "the child process did not report";
  EXPECT_LT(kib, 8 * 1024) << "reading 20 bytes of gzip data raised the peak memory by " << kib
                           << " KiB";
}

TEST(Idx, WritersRejectInconsistentArguments) {
  const TempDir dir;
  IdxImages bad = pattern_images(2);
  bad.pixels.pop_back();
  EXPECT_THAT(error_message<ValueError>([&] { write_idx_images(dir.file("x"), bad); }),
              HasSubstr("need 1568 pixels"));
  EXPECT_THAT(error_message<ValueError>([&] {
                write_idx_labels(dir.file("y"), {3, 256});
              }),
              HasSubstr("label 256 at index 1"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("x")));
}
