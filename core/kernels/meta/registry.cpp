// core/kernels/meta/registry.cpp — the meta device's kernel table: every kernel does nothing.
// An op on meta tensors still checks its operands, works out its outputs' shapes and dtypes and
// allocates them (which meta counts and does not perform: core/allocator.cpp), so what a forward
// and backward would hold is known without computing or storing a value. With a recorder attached
// to the device (meta_calls.h), each kernel also says what it would have run, and can hand over
// the call to run for real elsewhere: how long a step would take comes from the same walk.
// Compiled with -Werror=missing-field-initializers: a kernel added to kernels.h but not here fails
// the build.
#include <tandem/core/kernels/call_label.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/kernels/meta_calls.h>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

namespace tandem {
namespace {

using meta_calls::placeholder;
using meta_calls::spec_of;
using meta_calls::TensorSpec;

#define TD_NAME(entry) constexpr char entry[] = #entry;
namespace names {
TD_KERNEL_ENTRIES(TD_NAME)
}
#undef TD_NAME

// An argument kept for a replay: values as they are, tensors as specs (no meta storage kept
// alive) that become placeholders on the replay's device.
template <typename T>
struct Held {
  T value;
  explicit Held(const T& v) : value(v) {}
  void make(Device) {}
  T& get() { return value; }
};
template <>
struct Held<Tensor> {
  TensorSpec spec;
  Tensor t;
  explicit Held(const Tensor& a) : spec(spec_of(a)) {}
  void make(Device where) { t = placeholder(spec, where); }
  Tensor& get() { return t; }
};
template <>
struct Held<std::span<const Tensor>> {
  std::vector<TensorSpec> specs;
  std::vector<Tensor> ts;
  explicit Held(std::span<const Tensor> a) {
    for (const Tensor& t : a) specs.push_back(spec_of(t));
  }
  void make(Device where) {
    ts.clear();
    for (const TensorSpec& s : specs) ts.push_back(placeholder(s, where));
  }
  std::span<const Tensor> get() { return ts; }
};
template <>
struct Held<std::span<const AdamSlot>> {
  std::vector<TensorSpec> specs;  // five per slot: param, grad, exp_avg, exp_avg_sq, step
  std::vector<Tensor> ts;
  std::vector<AdamSlot> slots;
  explicit Held(std::span<const AdamSlot> a) {
    for (const AdamSlot& s : a)
      for (const Tensor* t :
           std::initializer_list<const Tensor*>{s.param, s.grad, s.exp_avg, s.exp_avg_sq, s.step})
        specs.push_back(t ? spec_of(*t) : TensorSpec{});
  }
  void make(Device where) {
    ts.clear();
    for (const TensorSpec& s : specs) ts.push_back(placeholder(s, where));
    slots.clear();
    for (size_t i = 0; i < ts.size(); i += 5)
      slots.push_back(
          {&ts[i], &ts[i + 1], &ts[i + 2], &ts[i + 3], ts[i + 4].defined() ? &ts[i + 4] : nullptr});
  }
  std::span<const AdamSlot> get() { return slots; }
};

template <typename F>
struct Recorded;
template <typename... A>
struct Recorded<void (*)(A...)> {
  template <auto Member, const char* Name>
  static void call(A... a) {
    if (meta_calls::detail::g_attached.load(std::memory_order_relaxed) == 0) return;
    // Which meta device the call is on first, without the shapes' text: only a call on a device
    // with a recorder pays for its signature (other ranks and steps run in the same rehearsal).
    kernel_calls::Label l;
    (kernel_calls::see(l, a), ...);
    const Tensor* on = nullptr;  // the call's meta tensor (a copy from the host has one too)
    for (const Tensor* t : l.tensors)
      if (on == nullptr && t != nullptr && t->device().is_meta()) on = t;
    if (on == nullptr) return;
    meta_calls::Recorder* recorder = meta_calls::detail::recorder(on->device().index());
    if (recorder == nullptr) return;
    l = kernel_calls::Label{};
    l.text = Name;
    l.with_shapes = true;
    (kernel_calls::see(l, a), ...);
    kernel_calls::add_dtypes(l, Name);
    const meta_calls::Call c{l.text, l.text + l.shapes, l.bytes, kernel_calls::gemm_flops(l, Name)};
    recorder->record(c, [&]() -> meta_calls::Replay {
      using Args = std::tuple<Held<std::remove_cvref_t<A>>...>;
      auto held = std::make_shared<Args>(Held<std::remove_cvref_t<A>>(a)...);
      return [held](Device where) -> meta_calls::Prepared {
        auto mine = std::make_shared<Args>(*held);  // its own tensors: replays may run at once
        std::apply([&](auto&... h) { (h.make(where), ...); }, *mine);
        const Kernels& k = kernels(where);
        return [mine, &k] { std::apply([&](auto&... h) { (k.*Member)(h.get()...); }, *mine); };
      };
    });
  }
};

}  // namespace

#define TD_RECORDED(entry) \
  .entry = &Recorded<decltype(Kernels::entry)>::call<&Kernels::entry, names::entry>,
extern const Kernels meta_kernels;
const Kernels meta_kernels = {TD_KERNEL_ENTRIES(TD_RECORDED)};
#undef TD_RECORDED

}  // namespace tandem
