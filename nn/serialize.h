// nn/serialize.h — the files of a training checkpoint. A checkpoint directory holds
// model.safetensors (parameters and buffers with PyTorch's names and layouts, metadata {"format":
// "pt"}, loadable by torch / safetensors / transformers) and optimizer.safetensors
// (state.<i>.<name> tensors, the param groups as JSON, and the caller's metadata: epoch, step, RNG
// state, config). Both files are written atomically, so a crash mid-save leaves the previous
// checkpoint intact.
#pragma once

#include <tandem/core/generator.h>
#include <tandem/nn/module.h>
#include <tandem/nn/optim/optimizer.h>
#include <functional>
#include <map>
#include <string>

namespace tandem::nn {

using Metadata = std::map<std::string, std::string>;

/// Writes the model's state dict to `path` (safetensors, {"format": "pt"} plus `metadata`).
void save_model(const std::string& path, Module& model, const Metadata& metadata = {});
/// The same for a state dict held apart from its model (one gathered from sharded ranks).
void save_model(const std::string& path, const StateDict& state, const Metadata& metadata = {});
/// Loads `path` into the model (onto each parameter's device); returns the file's metadata.
/// Problems (missing/unexpected keys, shapes) are listed by name with the file's path.
Metadata load_model(const std::string& path, Module& model, bool strict = true);

/// Writes the optimizer's state to `path`; `metadata` is stored beside the param groups.
void save_optimizer(const std::string& path, const optim::Optimizer& optimizer,
                    const Metadata& metadata = {});
/// The same for an optimizer state held apart from its optimizer.
void save_optimizer(const std::string& path, const optim::OptimizerState& state,
                    const Metadata& metadata = {});
/// Restores the optimizer from `path`; returns the metadata saved with it.
Metadata load_optimizer(const std::string& path, optim::Optimizer& optimizer);
/// The optimizer state in `path` and its metadata, for `restore` (which may throw ValueError or
/// nlohmann's errors: reported as load_optimizer reports them, naming the file).
Metadata load_optimizer(const std::string& path,
                        const std::function<void(const optim::OptimizerState&)>& restore);

/// A generator state as metadata text ("seed:offset") and back; DataError on malformed text.
std::string to_string(const GeneratorState& state);
GeneratorState generator_state_from_string(const std::string& text, const std::string& path);

}  // namespace tandem::nn
