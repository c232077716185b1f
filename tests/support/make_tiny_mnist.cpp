// tests/support/make_tiny_mnist.cpp — writes a tiny MNIST-format directory (256 train / 64 test
// random images with labels 0–9) for smoke runs of the examples and the trainer.
#include <tandem/tandem.h>
#include <cstdio>
#include <filesystem>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_tiny_mnist DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::filesystem::create_directories(dir);
  uint64_t state = 12345;
  auto next = [&] {  // splitmix64: a fixed stream, independent of Tandem's generators
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (auto [split, n] :
       {std::pair{tandem::data::Split::Train, 256}, std::pair{tandem::data::Split::Test, 64}}) {
    tandem::data::IdxImages images{n, 28, 28, std::vector<uint8_t>(size_t(n) * 784)};
    std::vector<int64_t> labels(static_cast<size_t>(n));
    for (auto& p : images.pixels) p = uint8_t(next() & 0xFF);
    for (auto& l : labels) l = int64_t(next() % 10);
    tandem::data::write_idx_images(dir + "/" + tandem::data::MNIST::images_file(split), images);
    tandem::data::write_idx_labels(dir + "/" + tandem::data::MNIST::labels_file(split), labels);
  }
  std::printf("wrote %s\n", dir.c_str());
  return 0;
}
