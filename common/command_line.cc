#include "common/command_line.h"

#include <string>

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace stoker::common {

void SetUsage(absl::string_view usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  const auto ours = [](absl::string_view path) {
    return !absl::StartsWith(path, "absl/") &&
           !absl::StrContains(path, "/absl/");
  };
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace stoker::common
