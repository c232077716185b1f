// tests/support/sanitizer.h — whether this test program was built under a sanitizer
// (scripts/sanitize.sh), for the few tests that must behave differently there: a sweep that runs
// a covering subset of its cases (the full sweep runs in the plain build, where a case costs a
// tenth of the time), a thread the sanitizer's runtime adds, a library (Open MPI) not run under
// one. GCC says so with __SANITIZE_*__, clang with __has_feature.
#pragma once

#include <cstddef>

// __has_feature where the compiler has it (clang; GCC from 14), else no feature.
#if defined(__has_feature)
#define TANDEM_TEST_HAS_FEATURE(x) __has_feature(x)
#else
#define TANDEM_TEST_HAS_FEATURE(x) 0
#endif

namespace tandem::testing {

inline constexpr bool kThreadSanitizer =
#if defined(__SANITIZE_THREAD__) || TANDEM_TEST_HAS_FEATURE(thread_sanitizer)
    true;
#else
    false;
#endif

inline constexpr bool kAddressSanitizer =
#if defined(__SANITIZE_ADDRESS__) || TANDEM_TEST_HAS_FEATURE(address_sanitizer)
    true;
#else
    false;
#endif

inline constexpr bool kSanitized = kThreadSanitizer || kAddressSanitizer;

/// Whether case `i` of a sweep runs: all of them in a plain build, every `stride`-th under a
/// sanitizer (what the sanitizer looks for, a bad access or a race, is in the code every case
/// runs; the combinations' numbers are checked by the plain build).
inline bool runs_case(size_t i, size_t stride) { return !kSanitized || i % stride == 0; }

}  // namespace tandem::testing
