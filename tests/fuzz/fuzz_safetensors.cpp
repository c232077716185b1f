// tests/fuzz/fuzz_safetensors.cpp — libFuzzer target: any bytes, read as a safetensors file
// (header length, header JSON, dtypes, shapes, offsets, metadata, the data that follows). The
// only acceptable outcomes are a loaded file or a tandem::Error; any other exception, a crash, a
// leak or an allocation beyond libFuzzer's limit is a finding. Seeds: corpus/safetensors/.
#include <tandem/core/error.h>
#include <tandem/core/serialize/safetensors.h>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tandem::fuzz::write_file("input.safetensors", data, size);
  try {
    const tandem::SafetensorsFile file = tandem::load_safetensors(path);
    for (const auto& [name, tensor] : file.tensors) (void)file.at(name).numel();
  } catch (const tandem::Error&) {  // the expected answer to bad bytes
  }
  return 0;
}
