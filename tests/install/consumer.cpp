// A program built against an installed Tandem: one forward and backward through public headers.
#include <tandem/tandem.h>
#include <iostream>

int main() {
  using namespace tandem;
  Tensor w = ones({2, 2}).requires_grad_();
  Tensor loss = (tensor({{1, 2}, {3, 4}}).matmul(w)).sum();
  loss.backward();
  std::cout << "loss " << loss.item() << " grad " << w.grad() << "\n";
  return loss.item() == 20.0 && w.grad().sum().item() == 20.0 ? 0 : 1;
}
