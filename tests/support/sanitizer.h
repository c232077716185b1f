// tests/support/sanitizer.h — whether this test program was built under a sanitizer
// (scripts/sanitize.sh), for the few tests that must behave differently there: a sweep that runs
// a covering subset of its cases (the full sweep runs in the plain build, where a case costs a
// tenth of the time), a thread the sanitizer's runtime adds, a library (Open MPI) not run under
// one. GCC says so with __SANITIZE_*__, clang with __has_feature.
#pragma once

namespace tandem::testing {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#else
inline constexpr bool kThreadSanitizer = false;
#endif

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

inline constexpr bool kSanitized = kThreadSanitizer || kAddressSanitizer;

/// Whether case `i` of a sweep runs: all of them in a plain build, every `stride`-th under a
/// sanitizer (what the sanitizer looks for, a bad access or a race, is in the code every case
/// runs; the combinations' numbers are checked by the plain build).
inline bool runs_case(size_t i, size_t stride) { return !kSanitized || i % stride == 0; }

}  // namespace tandem::testing
