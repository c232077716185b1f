// core/generator.cpp — the per-device default generators.
#include <tandem/core/check.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/generator.h>

namespace tandem {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lk(mu_);
  state_ = {seed, 0};
}

GeneratorState Generator::get_state() const {
  std::lock_guard lk(mu_);
  return state_;
}

void Generator::set_state(const GeneratorState& state) {
  std::lock_guard lk(mu_);
  state_ = state;
}

GeneratorState Generator::reserve(uint64_t counters) {
  std::lock_guard lk(mu_);
  GeneratorState s = state_;
  state_.offset += counters;
  return s;
}

namespace {
thread_local ReplayGenerators* t_replay = nullptr;
thread_local GeneratorUseRecorder* t_recorder = nullptr;

Generator& shared_generator(Device device) {
  static Generator cpu[Device::kMaxCpuDevices];
  static Generator cuda[Device::kMaxCudaDevices];
  static Generator meta[Device::kMaxCpuDevices];  // draws nothing, but its offsets advance
  const int i = device.index();
  TD_INTERNAL_ASSERT(
      i >= 0 && i < (device.is_cuda() ? Device::kMaxCudaDevices : Device::kMaxCpuDevices),
      "device ", device);
  return device.is_cpu() ? cpu[i] : device.is_meta() ? meta[i] : cuda[i];
}
}  // namespace

GeneratorUseRecorder::GeneratorUseRecorder() : previous_(t_recorder) { t_recorder = this; }
GeneratorUseRecorder::~GeneratorUseRecorder() { t_recorder = previous_; }

void GeneratorUseRecorder::note(Device device, const Generator& g) {
  for (GeneratorUseRecorder* r = this; r != nullptr; r = r->previous_) {
    bool seen = false;
    for (const auto& [d, state] : r->used_) seen |= d == device;
    if (!seen) r->used_.emplace_back(device, g.get_state());
  }
}

void GeneratorUseRecorder::note_own(const Generator& own, const Generator& drawn) {
  for (GeneratorUseRecorder* r = this; r != nullptr; r = r->previous_) {
    bool seen = false;
    for (const auto& [g, state] : r->used_own_) seen |= g == &own;
    if (!seen) r->used_own_.emplace_back(&own, drawn.get_state());
  }
}

ReplayGenerators::ReplayGenerators(const std::vector<std::pair<Device, GeneratorState>>& states,
                                   const std::vector<OwnGeneratorState>& own, bool noted)
    : noted_(noted), previous_(t_replay) {
  for (const auto& [device, state] : states) {
    auto g = std::make_unique<Generator>();
    g->set_state(state);
    generators_.emplace_back(device, std::move(g));
  }
  for (const auto& [original, state] : own) {
    auto g = std::make_unique<Generator>();
    g->set_state(state);
    own_.emplace_back(original, std::move(g));
  }
  t_replay = this;
}

ReplayGenerators::~ReplayGenerators() { t_replay = previous_; }

Generator* ReplayGenerators::find(Device device, bool* noted) {
  for (ReplayGenerators* r = t_replay; r != nullptr; r = r->previous_)
    for (auto& [d, g] : r->generators_)
      if (d == device) {
        if (noted) *noted = r->noted_;
        return g.get();
      }
  return nullptr;
}

Generator* ReplayGenerators::find(const Generator* own) {
  for (ReplayGenerators* r = t_replay; r != nullptr; r = r->previous_)
    for (auto& [original, g] : r->own_)
      if (original == own) return g.get();
  return nullptr;
}

Generator& own_generator(Generator& g) {
  Generator* replay = t_replay != nullptr ? ReplayGenerators::find(&g) : nullptr;
  Generator& drawn = replay != nullptr ? *replay : g;
  if (t_recorder != nullptr) t_recorder->note_own(g, drawn);
  return drawn;
}

Generator& default_generator(Device device) {
  bool noted = true;  // a scope standing in for a generator of one's own is not the device's
  Generator* g = t_replay != nullptr ? ReplayGenerators::find(device, &noted) : nullptr;
  if (g == nullptr) g = &shared_generator(device);
  if (t_recorder != nullptr && noted) t_recorder->note(device, *g);
  return *g;
}

GeneratorState reserve_random(Device device, uint64_t counters) {
  TD_CHECK_AS(CudaError, !(device.is_cuda() && cuda::is_capturing(device.index())),
              "a random draw on ", device,
              " (dropout, rand, randn, multinomial, an initialiser) is being captured into a CUDA "
              "graph, where every replay would repeat the same numbers; graph-safe random "
              "offsets are not supported\n  hint: capture steps without dropout (p = 0), or run "
              "this one without a graph");
  return default_generator(device).reserve(counters);
}

void manual_seed(uint64_t seed) {
  for (int i = 0; i < Device::kMaxCpuDevices; ++i)
    default_generator(Device::cpu(i)).manual_seed(seed);
  for (int i = 0; i < Device::kMaxCudaDevices; ++i)
    default_generator(Device::cuda(i)).manual_seed(seed);
}

}  // namespace tandem
