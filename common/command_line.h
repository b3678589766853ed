#ifndef STOKER_COMMON_COMMAND_LINE_H_
#define STOKER_COMMON_COMMAND_LINE_H_

// The --help of Stoker's binaries. Only main.cc files (and benchmark
// binaries) call this, before absl::ParseCommandLine.

#include "absl/strings/string_view.h"

namespace stoker::common {

// Sets `usage` as the --help header and makes --help (and --helpshort) list
// every flag defined in this workspace's sources. absl's default lists only
// flags from files named after the program, which Stoker's main.cc files
// are not, so --help printed "No flags matched". absl's own flags
// (--flagfile, --fromenv, ...) stay under --helpfull.
void SetUsage(absl::string_view usage);

}  // namespace stoker::common

#endif  // STOKER_COMMON_COMMAND_LINE_H_
