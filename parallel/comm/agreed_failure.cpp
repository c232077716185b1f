// parallel/comm/agreed_failure.cpp — one flag per rank, summed.
#include <tandem/parallel/comm/agreed_failure.h>

namespace tandem::parallel {

std::vector<int> failed_ranks(Communicator& group, Device device, const std::string& error) {
  Tensor failed = zeros({group.size()}, {.device = device});
  if (!error.empty()) failed.narrow(0, group.rank(), 1).fill_(1);
  group.all_reduce(failed)->wait();
  const std::vector<float> who = failed.to(Device::cpu()).to_vector<float>();
  std::vector<int> out;
  for (size_t r = 0; r < who.size(); ++r)
    if (who[r] > 0) out.push_back(int(r));
  return out;
}

}  // namespace tandem::parallel
