#ifndef STOKER_SERVER_STORAGE_XML_SCAN_H_
#define STOKER_SERVER_STORAGE_XML_SCAN_H_

// Just enough XML for S3 answers (ListObjectsV2 results and error bodies):
// the text of simple elements, found by tag name. Not a general parser: no
// attributes on the elements looked for, no CDATA, no nesting of an element
// inside one of the same name.

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace stoker::storage {

// The raw contents of every <tag>...</tag> in `xml`, in order (entities not
// decoded; the contents may hold other elements).
std::vector<absl::string_view> XmlElements(absl::string_view xml,
                                           absl::string_view tag);

// The decoded text of the first <tag>...</tag> in `xml`, or "" if none.
std::string XmlText(absl::string_view xml, absl::string_view tag);

// Decodes &amp; &lt; &gt; &quot; &apos; and numeric references (&#NN;,
// &#xNN;, ASCII only); other text is kept as is.
std::string XmlUnescape(absl::string_view text);

}  // namespace stoker::storage

#endif  // STOKER_SERVER_STORAGE_XML_SCAN_H_
