// tests/fuzz/fuzz_options.cpp — libFuzzer target: the hand-written parsers of strings a user
// types. `tandem train`/`launch` parse their flags with CLI11; what Tandem parses itself is a
// device ("cpu:1", "cuda:0", given to --device and Tensor::to), a rendezvous address
// (tcp://host:port) and the integer environment variables (RANK, MASTER_PORT, ...). Each must
// return a value or throw tandem::Error, and what it returns must be in range.
#include <tandem/core/device.h>
#include <tandem/core/env.h>
#include <tandem/core/error.h>
#include <tandem/parallel/process_group.h>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string s(reinterpret_cast<const char*>(data), size);
  try {
    const tandem::Device d(s);
    if (d.index() < 0) std::abort();
    if (tandem::Device(d.str()) != d) std::abort();  // printing and parsing agree
  } catch (const tandem::Error&) {
  }
  try {
    const auto [host, port] = tandem::parallel::detail::parse_host_port(s, "fuzz");
    if (port <= 0 || port >= 65536 || host.empty()) std::abort();
  } catch (const tandem::Error&) {
  }
  // Not through setenv: glibc keeps every value ever set (the long run ran out of memory).
  try {
    const int64_t v = tandem::detail::parse_env_int("TANDEM_FUZZ_INT", s);
    if (v < INT32_MIN || v > INT32_MAX) std::abort();
  } catch (const tandem::Error&) {
  }
  return 0;
}
