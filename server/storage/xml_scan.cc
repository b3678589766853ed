#include "server/storage/xml_scan.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace stoker::storage {

std::vector<absl::string_view> XmlElements(absl::string_view xml,
                                           absl::string_view tag) {
  std::vector<absl::string_view> out;
  const std::string open = absl::StrCat("<", tag, ">");
  const std::string close = absl::StrCat("</", tag, ">");
  size_t pos = 0;
  while (true) {
    const size_t start = xml.find(open, pos);
    if (start == absl::string_view::npos) break;
    const size_t body = start + open.size();
    const size_t end = xml.find(close, body);
    if (end == absl::string_view::npos) break;
    out.push_back(xml.substr(body, end - body));
    pos = end + close.size();
  }
  return out;
}

std::string XmlText(absl::string_view xml, absl::string_view tag) {
  const std::vector<absl::string_view> found = XmlElements(xml, tag);
  return found.empty() ? std::string() : XmlUnescape(found.front());
}

std::string XmlUnescape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '&') {
      out.push_back(text[i++]);
      continue;
    }
    const size_t semi = text.find(';', i);
    if (semi == absl::string_view::npos || semi - i > 10) {
      out.push_back(text[i++]);
      continue;
    }
    const absl::string_view name = text.substr(i + 1, semi - i - 1);
    std::string replacement;
    if (name == "amp") {
      replacement = "&";
    } else if (name == "lt") {
      replacement = "<";
    } else if (name == "gt") {
      replacement = ">";
    } else if (name == "quot") {
      replacement = "\"";
    } else if (name == "apos") {
      replacement = "'";
    } else if (name.size() > 1 && name[0] == '#') {
      uint32_t code = 0;
      const bool hex = name[1] == 'x' || name[1] == 'X';
      const bool parsed =
          hex ? absl::SimpleHexAtoi(name.substr(2), &code)
              : absl::SimpleAtoi(name.substr(1), &code);
      if (parsed && code > 0 && code < 0x80) {
        replacement = std::string(1, static_cast<char>(code));
      }
    }
    if (replacement.empty()) {
      out.push_back(text[i++]);
      continue;
    }
    out += replacement;
    i = semi + 1;
  }
  return out;
}

}  // namespace stoker::storage
