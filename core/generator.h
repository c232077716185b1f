// core/generator.h — one seedable random generator per device. It is counter-based (Philox4x32-10,
// as cuRAND and PyTorch's CUDA generator use): the state is just (seed, offset), so it is cheap to
// save and restore (gradient checkpointing and resumed training need that), and element i of a
// random tensor depends only on (seed, offset, i), so CPU threads and CUDA kernels can fill a
// tensor in parallel and get the same numbers.
#pragma once

#include <tandem/core/device.h>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace tandem {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // Philox counters consumed so far
  friend bool operator==(const GeneratorState&, const GeneratorState&) = default;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : state_{seed, 0} {}
  void manual_seed(uint64_t seed);
  GeneratorState get_state() const;
  void set_state(const GeneratorState& state);
  /// Reserves `counters` Philox counters and returns the state to generate them from. Random
  /// kernels use counter (offset + i) for element i, so a tensor of n elements reserves n.
  GeneratorState reserve(uint64_t counters);

 private:
  mutable std::mutex mu_;  // DataLoader workers and replicas draw concurrently
  GeneratorState state_;
};

/// The default generator of `device` (each cpu:N and cuda:N has its own), or this thread's
/// replay of it inside a ReplayGenerators scope.
Generator& default_generator(Device device);

/// default_generator(device).reserve(counters), for a random kernel about to run on `device`:
/// the draw every random op makes. CudaError while a CUDA graph captures `device`, whose replays
/// would repeat the same numbers (graph-safe random offsets are not supported).
GeneratorState reserve_random(Device device, uint64_t counters);

/// A generator of one's own (not a device's default) and a state of it: what a recorder notes
/// of a tensor-parallel rank's stream, and a replay starts its private copy from.
using OwnGeneratorState = std::pair<const Generator*, GeneratorState>;

/// While alive, this thread's random draws on each listed device come from a private generator
/// that starts at the given state, and so do its draws from each listed generator of its own
/// (own_generator() below). Activation checkpointing replays a forward's random numbers (dropout
/// masks) this way without touching the shared generators: other threads, and devices not listed,
/// draw as before. Scopes nest; the innermost that lists a device wins. A scope made with
/// `noted` false stands in for a generator of one's own (a rank's stream drawn through the
/// device's ops): a recorder does not note its draws as the device's, since they are not.
class ReplayGenerators {
 public:
  explicit ReplayGenerators(const std::vector<std::pair<Device, GeneratorState>>& states,
                            const std::vector<OwnGeneratorState>& own = {}, bool noted = true);
  ~ReplayGenerators();
  ReplayGenerators(const ReplayGenerators&) = delete;
  ReplayGenerators& operator=(const ReplayGenerators&) = delete;

  /// This thread's replayed generator of `device`, or null; `noted`, when given, says whether
  /// its scope's draws are the device's (see above).
  static Generator* find(Device device, bool* noted = nullptr);
  /// This thread's replay of generator `g` of one's own, or null.
  static Generator* find(const Generator* g);

 private:
  std::vector<std::pair<Device, std::unique_ptr<Generator>>> generators_;
  std::vector<std::pair<const Generator*, std::unique_ptr<Generator>>> own_;
  bool noted_;
  ReplayGenerators* previous_;
};

/// While alive, notes each device whose default generator this thread asks for, with the
/// generator's state at that first request, i.e. before the draw it was asked for: the
/// generators a function uses, and where they stood when it started (what ReplayGenerators needs
/// to draw the same numbers again). Scopes nest; each notes what happens inside it.
class GeneratorUseRecorder {
 public:
  GeneratorUseRecorder();
  ~GeneratorUseRecorder();
  GeneratorUseRecorder(const GeneratorUseRecorder&) = delete;
  GeneratorUseRecorder& operator=(const GeneratorUseRecorder&) = delete;

  const std::vector<std::pair<Device, GeneratorState>>& used() const { return used_; }
  /// The generators of one's own it drew from (own_generator), each at its first use.
  const std::vector<OwnGeneratorState>& used_own() const { return used_own_; }

 private:
  friend Generator& default_generator(Device device);
  friend Generator& own_generator(Generator& g);
  void note(Device device, const Generator& g);
  void note_own(const Generator& own, const Generator& drawn);
  std::vector<std::pair<Device, GeneratorState>> used_;
  std::vector<OwnGeneratorState> used_own_;
  GeneratorUseRecorder* previous_;
};

/// The generator to draw from in `g`'s stead, for a generator of one's own (not a device's
/// default: a tensor-parallel rank's stream): `g` itself, or this thread's private copy of it
/// while a ReplayGenerators scope replays it (an activation-checkpoint recompute). An enclosing
/// GeneratorUseRecorder notes g's state at its first use, as default_generator notes a device's.
Generator& own_generator(Generator& g);
/// Seeds every device's default generator with `seed`, as torch.manual_seed does. Because the
/// generator is counter-based, rand on cuda:0 then gives the same numbers as rand on cpu.
void manual_seed(uint64_t seed);

/// Philox4x32-10 of (counter, key): four independent 32-bit random words. Host and device code.
struct Philox4 {
  uint32_t v[4];
};
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline Philox4
    philox(uint64_t counter, uint64_t key) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {  // Random123's philox4x32 round, 10 times
    if (round > 0) {
      k0 += 0x9E3779B9u;  // the Weyl key schedule
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
  }
  return {{c0, c1, c2, c3}};
}

/// 24 random bits of `r` -> [0, 1) for float; 53 bits (words `word` and `word + 1`) for double:
/// what rand() draws from counter offset + i for element i, on the CPU and on CUDA alike.
template <typename T>
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline T
    philox_unit(const Philox4& r, int word) {
  if constexpr (sizeof(T) == 4) {
    return float(r.v[word] >> 8) * 0x1.0p-24f;
  } else {
    const uint64_t bits = (uint64_t(r.v[word]) << 32) | r.v[word + 1];
    return double(bits >> 11) * 0x1.0p-53;
  }
}

}  // namespace tandem
