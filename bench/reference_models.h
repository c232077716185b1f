// bench/reference_models.h — the reference models of the benchmarks (issue 3's recipes), defined
// once for every bench that trains them: the CNN (conv 1→32 3×3, ReLU, max-pool 2, conv 32→64
// 3×3, ReLU, max-pool 2, fc 1600→128, ReLU, fc 128→10) and the MLP 784-512-256-10; and Wide, the
// distributed benches' model with a lot to communicate: 4 × Linear(2048, 2048), 64 MiB.
#pragma once

#include <tandem/tandem.h>

namespace bench {

struct ReferenceCnn : tandem::nn::Module {
  tandem::nn::Conv2d conv1{1, 32, 3}, conv2{32, 64, 3};
  tandem::nn::Linear fc1{1600, 128}, fc2{128, 10};
  void visit(tandem::nn::Visitor& v) override {
    v("conv1", conv1);
    v("conv2", conv2);
    v("fc1", fc1);
    v("fc2", fc2);
  }
  tandem::Tensor forward(const tandem::Tensor& x) {
    // ReLU then max-pool as one op (relu_max_pool2d); LibTorch's eager model runs them apart.
    tandem::Tensor h = tandem::relu_max_pool2d(conv1(x), {});
    h = tandem::relu_max_pool2d(conv2(h), {});
    return fc2(tandem::relu(fc1(h.flatten(1))));
  }
};

struct ReferenceMlp : tandem::nn::Module {
  tandem::nn::Linear fc1{784, 512}, fc2{512, 256}, fc3{256, 10};
  void visit(tandem::nn::Visitor& v) override {
    v("fc1", fc1);
    v("fc2", fc2);
    v("fc3", fc3);
  }
  tandem::Tensor forward(const tandem::Tensor& x) {
    return fc3(tandem::relu(fc2(tandem::relu(fc1(x.flatten(1))))));
  }
};

struct Wide : tandem::nn::Module {  // 4 × (2048·2048 + 2048) floats = 64.03 MiB
  tandem::nn::Linear l1{2048, 2048}, l2{2048, 2048}, l3{2048, 2048}, l4{2048, 2048};
  void visit(tandem::nn::Visitor& v) override {
    v("l1", l1);
    v("l2", l2);
    v("l3", l3);
    v("l4", l4);
  }
  tandem::Tensor forward(const tandem::Tensor& x) {
    using tandem::relu;
    return l4(relu(l3(relu(l2(relu(l1(x)))))));
  }
};

}  // namespace bench
