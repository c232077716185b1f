// parallel/comm/broadcast_object.cpp — the length first, so every rank can size its buffer, then
// the bytes, one per int64 (collectives carry no byte type; these strings are short).
#include <tandem/parallel/comm/broadcast_object.h>

namespace tandem::parallel {

std::string broadcast_string(Communicator& group, const std::string& text, int root) {
  const bool sender = group.rank() == root;
  Tensor length = full({1}, sender ? double(text.size()) : 0.0, {.dtype = kInt64});
  group.broadcast(length, root)->wait();
  const int64_t n = length.to_vector<int64_t>()[0];
  std::vector<int64_t> bytes(size_t(n), 0);
  if (sender)
    for (size_t i = 0; i < text.size(); ++i) bytes[i] = static_cast<unsigned char>(text[i]);
  Tensor data = from_vector(bytes, {n});
  group.broadcast(data, root)->wait();
  std::string out;
  for (int64_t b : data.to_vector<int64_t>()) out += char(b);
  return out;
}

std::vector<std::string> all_gather_strings(Communicator& group, const std::string& text) {
  std::vector<std::string> out;
  for (int r = 0; r < group.size(); ++r)
    out.push_back(broadcast_string(group, group.rank() == r ? text : "", r));
  return out;
}

}  // namespace tandem::parallel
