// parallel/fsdp/sharded_checkpoint.cpp — fully_shard's checkpoint as the general sharded one.
#include <tandem/parallel/fsdp/sharded_checkpoint.h>

namespace tandem::parallel {

void save_sharded_checkpoint(const std::string& dir, int64_t step, FullyShardedModule& model,
                             const optim::Optimizer* optimizer,
                             const std::map<std::string, std::string>& metadata) {
  save_sharded_checkpoint(dir, step, model.group(), *model.placements(), model.named_buffers(),
                          optimizer, metadata);
}

int64_t load_sharded_checkpoint(const std::string& dir, FullyShardedModule& model,
                                optim::Optimizer* optimizer,
                                std::map<std::string, std::string>* metadata) {
  return load_sharded_checkpoint(dir, *model.placements(), model.named_buffers(), optimizer,
                                 metadata);
}

}  // namespace tandem::parallel
