// nn/serialize.cpp — model and optimizer files on top of core's safetensors reader/writer.
#include <tandem/core/serialize/safetensors.h>
#include <tandem/nn/serialize.h>
#include <charconv>
#include <nlohmann/json.hpp>

namespace tandem::nn {

void save_model(const std::string& path, Module& model, const Metadata& metadata) {
  save_model(path, model.state_dict(), metadata);
}

void save_model(const std::string& path, const StateDict& state, const Metadata& metadata) {
  Metadata meta = metadata;
  meta["format"] = "pt";  // transformers and safetensors' torch loader expect it
  save_safetensors(path, state, meta);
}

Metadata load_model(const std::string& path, Module& model, bool strict) {
  const SafetensorsFile file = load_safetensors(path);
  model.load_state_dict(file.tensors, strict, path);
  return file.metadata;
}

void save_optimizer(const std::string& path, const optim::Optimizer& optimizer,
                    const Metadata& metadata) {
  save_optimizer(path, optimizer.state_dict(), metadata);
}

void save_optimizer(const std::string& path, const optim::OptimizerState& state,
                    const Metadata& metadata) {
  Metadata meta = metadata;
  meta["param_groups"] = state.param_groups_json;
  save_safetensors(path, state.tensors, meta);
}

Metadata load_optimizer(const std::string& path, optim::Optimizer& optimizer) {
  return load_optimizer(path,
                        [&](const optim::OptimizerState& s) { optimizer.load_state_dict(s); });
}

Metadata load_optimizer(const std::string& path,
                        const std::function<void(const optim::OptimizerState&)>& restore) {
  const SafetensorsFile file = load_safetensors(path);
  const auto groups = file.metadata.find("param_groups");
  TD_CHECK_AS(DataError, groups != file.metadata.end(), "load_optimizer: ", path,
              ": no \"param_groups\" in the metadata; is this an optimizer checkpoint?");
  try {
    restore({file.tensors, groups->second});
  } catch (const ValueError& e) {
    ::tandem::detail::fail<ValueError>(e.what(), " (checkpoint ", path, ")");
  } catch (const nlohmann::json::exception& e) {  // a field this optimizer needs is missing
    ::tandem::detail::fail<DataError>("load_optimizer: ", path,
                                      ": its param groups do not fit this ", "optimizer (",
                                      e.what(), "); was it saved by another optimizer?");
  }
  return file.metadata;
}

std::string to_string(const GeneratorState& state) {
  return std::to_string(state.seed) + ":" + std::to_string(state.offset);
}

GeneratorState generator_state_from_string(const std::string& text, const std::string& path) {
  GeneratorState s;
  const size_t colon = text.find(':');
  const char* end = text.data() + text.size();
  const bool ok =
      colon != std::string::npos &&
      std::from_chars(text.data(), text.data() + colon, s.seed).ptr == text.data() + colon &&
      std::from_chars(text.data() + colon + 1, end, s.offset).ptr == end;
  TD_CHECK_AS(DataError, ok, path, ": malformed generator state \"", text,
              "\" (expected \"seed:offset\")");
  return s;
}

}  // namespace tandem::nn
