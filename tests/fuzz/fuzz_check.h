#ifndef STOKER_TESTS_FUZZ_FUZZ_CHECK_H_
#define STOKER_TESTS_FUZZ_FUZZ_CHECK_H_

// Property checks inside fuzz targets. A failed check is a finding: it prints
// what was violated and aborts, which libFuzzer (and the corpus replay test)
// report as a crash with a stack trace. Only for contracts that the headers
// under test promise; a bad input alone must never fail a check.

#include <cstdio>
#include <cstdlib>

#include "absl/strings/string_view.h"

namespace stoker::fuzz {

inline void FuzzCheck(bool ok, absl::string_view what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz check failed: %.*s\n",
               static_cast<int>(what.size()), what.data());
  std::abort();
}

}  // namespace stoker::fuzz

#endif  // STOKER_TESTS_FUZZ_FUZZ_CHECK_H_
