// tools/train/setup_report.cpp — what a run says of its layout: its first line's parallelism and
// the memory it predicts beside what its device holds.
#include <tandem/core/memory_stats.h>
#include <tandem/parallel/ddp/state_bytes.h>
#include <cmath>

#include "setup.h"

namespace tandem::tools {

std::string describe_parallelism(Setup& s, const TrainOptions& o,
                                 const parallel::Communicator* group) {
  std::string line;
  // --cp: how the heads attend across the context ranks; the data ranks then include them.
  const std::string context = s.cp ? str(", context parallel (", o.cp_algorithm, ", zig-zag)") : "";
  const char* over = s.cp ? " over dp x cp" : " over dp";
  if (s.stages) {
    std::string held;
    for (int64_t stage : s.stages->held_stages()) held += str(held.empty() ? "" : ", ", stage);
    line =
        str(", pipeline", s.mesh->size("tp") > 1 ? " x tensor" : "", s.cp ? " x context" : "",
            " parallel: ", s.mesh->str(), " (", group->backend(), ", ", o.pipeline_schedule, ", ",
            o.chunks, " chunks; this rank stage", held.find(',') == std::string::npos ? " " : "s ",
            held, " of ", s.stages->order().stages(), ", ", s.model->size(), " modules",
            s.sequence_parallel ? ", sequence parallel" : "", context,
            s.fsdp ? str(", fully sharded", over) : "",
            s.ddp && o.zero ? str(", ZeRO stage ", o.zero, over) : "", ")");
  } else if (s.tp) {
    line = str(s.mesh->size("tp") > 1 ? ", tensor" : "",
               s.mesh->size("tp") > 1 && s.cp ? " x context"
               : s.cp                         ? ", context"
                                              : "",
               " parallel: ", s.mesh->str(), " (", group->backend(),
               s.sequence_parallel ? ", sequence parallel" : "", context,
               s.fsdp ? str(", fully sharded", over) : "",
               s.ddp && o.zero ? str(", ZeRO stage ", o.zero, over) : "", ")");
  } else if (s.fsdp) {
    line = str(", fully sharded over ", group->size(), " ranks (", group->backend(),
               ", ZeRO stage 3: ", s.fsdp->units().size(), " units)");
  }
  if (s.ddp && !s.tp)
    line = str(", DDP over ", group->size(), " ranks (", group->backend(),
               o.ddp_hook.empty() ? "" : ", " + o.ddp_hook,
               o.zero ? str(", ZeRO stage ", o.zero) : "", ")");
  if (s.dp) line = str(", DataParallel over ", o.data_parallel);
  if (s.pipe) {
    std::string sizes;
    for (parallel::Stage& stage : s.pipe->stages())
      sizes += (sizes.empty() ? "" : " + ") + std::to_string(stage.modules.size());
    line = str(", pipeline over ", o.pipeline, " (", o.pipeline_schedule, ", ", o.chunks,
               " chunks; stages of ", sizes, " modules)");
  }
  if (s.amp != kFloat32)
    line += str(", autocast ", o.amp, s.amp == kFloat16 ? " with a gradient scaler" : "");
  return line;
}

std::string memory_line(const Setup& s, const TrainOptions& o, int world) {
  double psi = 0, element = 4;
  for (const Tensor& p : s.model->parameters()) {
    psi += double(p.numel());
    element = double(element_size(p.dtype()));
  }
  if (s.fsdp) psi = double(s.fsdp->whole_parameter_count());  // the fields hold shards
  // Adam and AdamW keep two moments per parameter; SGD a momentum buffer if it has momentum.
  const int state = o.model == "gpt" || o.optimizer != "sgd" ? 2 : o.momentum > 0 ? 1 : 0;
  // Called after the first step, when the reducer knows whether it reduced in place.
  const bool bucket_copy = !(s.ddp && s.ddp->reducer().reduces_in_place());
  // Under --pp the micro-batches' whole gradients wait in .grad for the one reduction after
  // them (no_sync), so ZeRO-2 holds ZeRO-1's gradients.
  const int stage = s.stages && o.zero == 2 ? 1 : o.zero;
  const parallel::StateBytes b =
      parallel::state_bytes(stage, psi, element, state, world, bucket_copy);
  const auto mb = [](double bytes) { return str(std::round(bytes / 1e5) / 10); };
  return str(mb(b.total()), " MB predicted (parameters ", mb(b.parameters), " + gradients ",
             mb(b.gradients), " + optimizer ", mb(b.optimizer), "), ",
             mb(double(memory_stats(s.device).allocated_bytes)), " MB held");
}

}  // namespace tandem::tools
