// autograd/autocast.cpp — the per-thread autocast state, the region's cast cache and the three
// op lists' casting rules.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <map>
#include <mutex>
#include <tuple>

namespace tandem {

// The casts of parameters made in one autocast region. Shared by the threads the region's work
// runs on, hence the lock. An entry keeps its source alive, so a pointer is never reused while
// it is a key, and remembers the source's version: a parameter changed in place (an optimizer
// step inside the region) is cast again.
class AutocastCache {
 public:
  Tensor cast(const Tensor& source, DType dtype) {
    const Key key{source.impl_ptr().get(), dtype, GradMode::is_enabled()};
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.version == source.version()) return it->second.cast;
    Entry e{source, source.version(), source.to(dtype)};
    entries_.insert_or_assign(key, e);
    ++casts_;
    return e.cast;
  }
  size_t casts() {
    std::lock_guard<std::mutex> lock(mutex_);
    return casts_;
  }

 private:
  // A cast made without grad mode has no history, so it only serves no-grad uses.
  using Key = std::tuple<const void*, DType, bool>;
  struct Entry {
    Tensor source;
    uint64_t version;
    Tensor cast;
  };
  std::mutex mutex_;
  std::map<Key, Entry> entries_;
  size_t casts_ = 0;
};

namespace {

thread_local AutocastState t_state;

bool any_enabled(const AutocastState& s) { return s.enabled[0] || s.enabled[1]; }

// A tensor autocast may cast: floating, not float64, on a device type autocast is on for.
bool eligible(const Tensor& t) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != DType::f64 &&
         t_state.enabled[size_t(t.device().type())];
}

Tensor cast(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  // Parameters (leaves that want gradients) are cast once per region.
  if (t_state.cache && t.requires_grad() && t.is_leaf()) return t_state.cache->cast(t, dtype);
  return t.to(dtype);
}

template <typename Range>
std::optional<std::vector<Tensor>> promote_range(const Range& inputs) {
  if (!any_enabled(t_state)) return std::nullopt;
  // The widest floating dtype among the eligible inputs (float32 over the 16-bit types; bfloat16
  // and float16 together go to float32, as neither holds the other).
  std::optional<DType> widest;
  bool mixed = false;
  for (const Tensor& t : inputs) {
    if (!eligible(t)) continue;
    if (widest && *widest != t.dtype()) {
      mixed = true;
      widest = DType::f32;
    } else if (!widest) {
      widest = t.dtype();
    }
  }
  if (!mixed) return std::nullopt;
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) out.push_back(eligible(t) ? cast(t, *widest) : t);
  return out;
}

}  // namespace

AutocastState AutocastState::current() { return t_state; }
void AutocastState::set_current(AutocastState state) { t_state = std::move(state); }

AutocastGuard::AutocastGuard(DeviceType device_type, DType dtype, bool enabled)
    : previous_(t_state) {
  TD_CHECK_DTYPE(dtype == DType::bf16 || dtype == DType::f16,
                 "AutocastGuard: expected bfloat16 or float16, but got ", dtype);
  t_state.enabled[size_t(device_type)] = enabled;
  t_state.dtype[size_t(device_type)] = dtype;
  if (!any_enabled(t_state)) {
    t_state.cache.reset();
  } else if (!t_state.cache) {  // the outermost region: a fresh cache
    t_state.cache = std::make_shared<AutocastCache>();
  }
}

AutocastGuard::~AutocastGuard() { t_state = std::move(previous_); }

namespace autocast {

bool is_enabled(DeviceType t) { return t_state.enabled[size_t(t)]; }
DType dtype(DeviceType t) { return t_state.dtype[size_t(t)]; }
size_t cached_casts() { return t_state.cache ? t_state.cache->casts() : 0; }

std::optional<std::vector<Tensor>> lower_precision(std::initializer_list<Tensor> inputs) {
  if (!any_enabled(t_state)) return std::nullopt;
  bool any = false;
  for (const Tensor& t : inputs)
    any |= eligible(t) && t.dtype() != t_state.dtype[size_t(t.device().type())];
  if (!any) return std::nullopt;
  std::vector<Tensor> out;
  for (const Tensor& t : inputs)
    out.push_back(eligible(t) ? cast(t, t_state.dtype[size_t(t.device().type())]) : t);
  return out;
}

std::optional<std::vector<Tensor>> float32(std::initializer_list<Tensor> inputs) {
  if (!any_enabled(t_state)) return std::nullopt;
  bool any = false;
  for (const Tensor& t : inputs) any |= eligible(t) && t.dtype() != DType::f32;
  if (!any) return std::nullopt;
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) out.push_back(eligible(t) ? cast(t, DType::f32) : t);
  return out;
}

std::optional<std::vector<Tensor>> promote(std::initializer_list<Tensor> inputs) {
  return promote_range(inputs);
}
std::optional<std::vector<Tensor>> promote(const std::vector<Tensor>& inputs) {
  return promote_range(inputs);
}

}  // namespace autocast
}  // namespace tandem
