// core/env.h — reading environment variables (RANK, WORLD_SIZE, TANDEM_NUM_THREADS, ...): one
// place that parses them and names the variable when its value is not what it should be.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::detail {

/// The variable's value; empty when unset.
std::string env_str(const char* name);
/// An integer variable, or `fallback` when unset or empty; ValueError naming it when its value
/// is not an integer or does not fit in 32 bits (so callers may narrow it to int).
int64_t env_int(const char* name, int64_t fallback);
/// env_int's parsing of a non-empty value `text` of variable `name` (fuzzed on its own).
int64_t parse_env_int(const char* name, const std::string& text);

}  // namespace tandem::detail
