// core/kernels/call_label.h — what a kernel call is, read from its arguments: a label ("gemm
// float32", "binary add bfloat16"), the bytes its tensor arguments span and a matrix product's
// flops, and, when asked, its shapes and flags. The profiler (profile.cpp) sums calls by label;
// the meta device's table (meta/registry.cpp) tells a recorder each call by its signature (label
// and shapes), which tandem plan times on a real device.
#pragma once

#include <tandem/core/kernels/kernels.h>
#include <string>
#include <type_traits>

// Every entry of struct Kernels, in order (the tables built entry by entry use it); the
// static_assert below fails when one is added there and not here.
// clang-format off
#define TD_KERNEL_ENTRIES(X) \
  X(copy) X(fill) X(arange) X(uniform) X(normal) X(unary) X(binary) X(compare) X(where) \
  X(relu_backward) X(sigmoid_backward) X(tanh_backward) X(gelu_backward) \
  X(gelu_tanh_backward) X(add_scaled) X(addcmul) X(addcdiv) X(reduce_rows) X(reduce_cols) X(square_sums) \
  X(gemm) X(softmax_forward) X(softmax_backward) X(log_softmax_forward) \
  X(log_softmax_backward) X(conv2d_forward) X(conv2d_backward) X(max_pool2d_forward) \
  X(relu_max_pool2d_forward) X(max_pool2d_backward) X(avg_pool2d_forward) \
  X(avg_pool2d_backward) X(cross_entropy_forward) X(cross_entropy_backward) \
  X(nll_loss_forward) X(nll_loss_backward) X(batch_norm_forward) X(batch_norm_backward) \
  X(layer_norm_forward) X(layer_norm_backward) X(embedding_forward) X(embedding_backward) \
  X(attention_forward) X(attention_backward) X(gather) X(scatter_add) X(topk) \
  X(multinomial) X(sgd_step) X(adam_step) X(adam_step_many) X(adam_step_many_unless) \
  X(unscale_grad) X(amp_update_scale)
// clang-format on

#define TD_KERNEL_COUNT_ONE(entry) +1
static_assert(sizeof(tandem::Kernels) ==
                  (0 TD_KERNEL_ENTRIES(TD_KERNEL_COUNT_ONE)) * sizeof(void (*)()),
              "an entry of struct Kernels is missing from TD_KERNEL_ENTRIES");
#undef TD_KERNEL_COUNT_ONE

namespace tandem::kernel_calls {

/// The bytes of memory a tensor argument spans: a broadcast (stride-0) view counts the memory
/// behind it, not its logical size.
double span_bytes(const Tensor& t);

/// "[64,128]", and "[64,128]/[1,64]" (its strides) when it is not contiguous.
std::string shape_text(const Tensor& t);

struct Label {
  std::string text;                                        // "gemm", then " add", " float32"
  const Tensor* tensors[3] = {nullptr, nullptr, nullptr};  // the first three defined
  double bytes = 0;                                        // every tensor argument's span
  int bools = 0;
  bool first_bool = false;   // gemm's trans_a
  bool with_shapes = false;  // also write `shapes` (the signature's second half)
  std::string shapes;        // every tensor's shape_text and every flag, in order
};

/// Reads one argument into the label.
template <typename T>
void see(Label& l, const T& a) {
  using U = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<U, UnaryOp> || std::is_same_v<U, BinaryOp> ||
                std::is_same_v<U, CompareOp> || std::is_same_v<U, ReduceOp>) {
    l.text += ' ';
    l.text += name(a);
  } else if constexpr (std::is_same_v<U, bool>) {
    if (l.bools++ == 0) l.first_bool = a;
    if (l.with_shapes) l.shapes += a ? " T" : " F";
  } else if constexpr (std::is_same_v<U, Tensor>) {
    if (!a.defined()) return;
    for (const Tensor*& slot : l.tensors)
      if (slot == nullptr) {
        slot = &a;
        break;
      }
    l.bytes += span_bytes(a);
    if (l.with_shapes) l.shapes += ' ' + shape_text(a);
  } else if constexpr (std::is_same_v<U, std::span<const Tensor>>) {
    if (!a.empty() && l.tensors[0] == nullptr) l.tensors[0] = &a.front();
    for (const Tensor& t : a) {
      l.bytes += span_bytes(t);
      if (l.with_shapes) l.shapes += ' ' + shape_text(t);
    }
  } else if constexpr (std::is_same_v<U, std::span<const AdamSlot>>) {
    if (!a.empty() && l.tensors[0] == nullptr) l.tensors[0] = a.front().param;
    for (const AdamSlot& s : a) {
      l.bytes += span_bytes(*s.param) + span_bytes(*s.grad) + span_bytes(*s.exp_avg) +
                 span_bytes(*s.exp_avg_sq);
      if (l.with_shapes) l.shapes += ' ' + shape_text(*s.param);
    }
  } else if constexpr (std::is_same_v<U, int64_t>) {
    if (l.with_shapes) l.shapes += ' ' + std::to_string(a);  // topk's k, a padding index
  } else if constexpr (std::is_same_v<U, Conv2dParams>) {
    if (l.with_shapes)
      l.shapes += " stride " + std::to_string(a.stride_h) + "," + std::to_string(a.stride_w) +
                  " pad " + std::to_string(a.pad_h) + "," + std::to_string(a.pad_w) + " dilation " +
                  std::to_string(a.dilation_h) + "," + std::to_string(a.dilation_w) + " groups " +
                  std::to_string(a.groups);
  } else if constexpr (std::is_same_v<U, Pool2dParams>) {
    if (l.with_shapes)
      l.shapes += " window " + std::to_string(a.kernel_h) + "," + std::to_string(a.kernel_w) +
                  " stride " + std::to_string(a.stride_h) + "," + std::to_string(a.stride_w) +
                  " pad " + std::to_string(a.pad_h) + "," + std::to_string(a.pad_w);
  } else if constexpr (std::is_same_v<U, AttentionParams>) {
    if (l.with_shapes)
      l.shapes += std::string(a.causal ? " causal" : "") + (a.dropout_p > 0 ? " dropout" : "") +
                  (a.flash ? " flash" : "");
  }
}

/// A matrix product's multiply-adds ×2: c [.., M, N] from a [.., M, K] (or [.., K, M]
/// transposed); 0 for the other entries.
double gemm_flops(const Label& l, const char* name_of_entry);

/// Ends the label with the first floating-point tensor's dtype (embedding_backward's first is
/// its int64 ids); a copy's with its source's, then its destination's if they differ.
void add_dtypes(Label& l, const char* name_of_entry);

}  // namespace tandem::kernel_calls
