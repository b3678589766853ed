#ifndef STOKER_COMMON_UTF8_H_
#define STOKER_COMMON_UTF8_H_

// UTF-8 validation for names read from disks and lists (file names need not
// be UTF-8; what Stoker reports and serves as text must be).

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace stoker::common {

// True if `s` is well-formed UTF-8: no overlong forms, no surrogates, no
// code point past U+10FFFF, nothing cut short.
inline bool IsUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int more;
    uint32_t code;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      more = 1;
      code = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      more = 2;
      code = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      more = 3;
      code = c & 0x07;
    } else {
      return false;
    }
    if (i + static_cast<size_t>(more) >= s.size()) return false;  // cut short
    for (int k = 1; k <= more; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      code = (code << 6) | (d & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMin[more] || code > 0x10ffff ||
        (code >= 0xd800 && code <= 0xdfff)) {
      return false;
    }
    i += more + 1;
  }
  return true;
}

}  // namespace stoker::common

#endif  // STOKER_COMMON_UTF8_H_
