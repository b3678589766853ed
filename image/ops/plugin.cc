#include "image/ops/plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/random.h"
#include "image/ops/custom_op.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"
#include "image/ops/plugin_api.h"
#include "image/ops/registry.h"
#include "image/plan.h"

namespace stoker::image {
namespace {

// What the host keeps of one plugin op: its own copies of the names (the
// registry's OpDef views them) and the plugin's entry points.
struct PluginOpInfo {
  std::string name;
  std::vector<std::string> params;
  std::string usage;
  // "NAME (PATH)", for messages.
  std::string plugin;
  int (*create)(const StokerArg*, int, void**, char*, size_t) = nullptr;
  void (*destroy)(void*) = nullptr;
  int (*apply)(const void*, const StokerRng*, const StokerImage*,
               const StokerImage*, char*, size_t) = nullptr;
};

// The plugin's message from an error buffer, which it may have left
// unterminated.
std::string ErrorText(const char* buffer, size_t size,
                      absl::string_view fallback) {
  const size_t n = strnlen(buffer, size);
  return n == 0 ? std::string(fallback) : std::string(buffer, n);
}

uint64_t RngNextU64(void* self) {
  return static_cast<common::CounterRng*>(self)->NextU64();
}

double RngUniform(void* self) {
  return static_cast<common::CounterRng*>(self)->NextDouble();
}

// One created op's state. Shared by the Op and every plan made from it, so
// the state outlives any plan still running; freed with the last of them.
class PluginKernel : public CustomKernel {
 public:
  PluginKernel(std::shared_ptr<const PluginOpInfo> info, void* state)
      : info_(std::move(info)), state_(state) {}
  ~PluginKernel() override {
    if (info_->destroy != nullptr) info_->destroy(state_);
  }

  const std::string& name() const override { return info_->name; }

  absl::Status Apply(common::CounterRng& rng, const ImageView& image,
                     const MaskView* mask) const override {
    const StokerRng c_rng{&rng, &RngNextU64, &RngUniform};
    const StokerImage c_image{image.data, image.width, image.height, 3,
                              image.stride};
    StokerImage c_mask{};
    if (mask != nullptr) {
      c_mask = {mask->data, mask->width, mask->height, mask->channels,
                mask->stride};
    }
    char error[STOKER_PLUGIN_ERROR_SIZE] = {};
    if (info_->apply(state_, &c_rng, &c_image,
                     mask != nullptr ? &c_mask : nullptr, error,
                     sizeof(error)) == 0) {
      return absl::OkStatus();
    }
    return absl::DataLossError(
        absl::StrCat("plugin op ", info_->name, ": ",
                     ErrorText(error, sizeof(error), "failed (no message)")));
  }

 private:
  const std::shared_ptr<const PluginOpInfo> info_;
  void* const state_;
};

absl::StatusOr<std::unique_ptr<const Op>> CreatePluginOp(
    const std::shared_ptr<const PluginOpInfo>& info, const OpArgs& args) {
  // Bind (transform.cc) let through only names from params, so this reads
  // every argument given.
  std::vector<std::pair<std::string, ArgValue>> given =
      GivenArgs(info->params, args);
  std::vector<StokerArg> c_args;
  for (const auto& [name, value] : given) {
    StokerArg a{};
    a.name = name.c_str();
    a.numbers = value.numbers.empty() ? nullptr : value.numbers.data();
    a.n_numbers = static_cast<int>(value.numbers.size());
    a.tuple = value.tuple ? 1 : 0;
    a.word = value.is_word() ? value.word.c_str() : nullptr;
    c_args.push_back(a);
  }
  char error[STOKER_PLUGIN_ERROR_SIZE] = {};
  void* state = nullptr;
  if (info->create(c_args.data(), static_cast<int>(c_args.size()), &state,
                   error, sizeof(error)) != 0) {
    return absl::InvalidArgumentError(
        ErrorText(error, sizeof(error),
                  absl::StrCat("plugin ", info->plugin,
                               " refused the arguments (without a reason)")));
  }
  auto kernel = std::make_shared<const PluginKernel>(info, state);
  return std::make_unique<const CustomOp>(std::move(kernel), std::move(given));
}

// Checks one entry of the plugin's op table and copies what the host keeps.
absl::StatusOr<std::shared_ptr<const PluginOpInfo>> ReadOp(
    const StokerOp& op, int index, const std::string& plugin) {
  if (op.name == nullptr || op.name[0] == '\0') {
    return absl::InvalidArgumentError(
        absl::StrCat("op ", index, " of its table has no name"));
  }
  auto info = std::make_shared<PluginOpInfo>();
  info->name = op.name;
  info->plugin = plugin;
  if (op.create == nullptr || op.apply == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("op '", info->name, "' has no create or no apply"));
  }
  if (op.n_params < 0 || (op.n_params > 0 && op.params == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("op '", info->name, "' has a malformed params list"));
  }
  for (int i = 0; i < op.n_params; ++i) {
    if (op.params[i] == nullptr || op.params[i][0] == '\0') {
      return absl::InvalidArgumentError(absl::StrCat(
          "op '", info->name, "' has an empty name for param ", i));
    }
    for (const std::string& seen : info->params) {
      if (seen == op.params[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "op '", info->name, "' lists param '", seen, "' twice"));
      }
    }
    info->params.emplace_back(op.params[i]);
  }
  info->usage = op.usage != nullptr
                    ? std::string(op.usage)
                    : absl::StrCat(info->name, "(",
                                   absl::StrJoin(info->params, ", "), ")");
  info->create = op.create;
  info->destroy = op.destroy;
  info->apply = op.apply;
  return info;
}

std::string DlError() {
  const char* text = dlerror();
  return text != nullptr ? text : "unknown dlopen error";
}

}  // namespace

absl::StatusOr<LoadedPlugin> LoadPlugin(const std::string& path) {
  const auto error = [&path](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load plugin '", path, "': ", what));
  };
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(
        "cannot load plugin '", path,
        "': ", path.empty() ? "empty path" : std::strerror(errno)));
  }
  // dlopen would search the library path for a name without a slash.
  const std::string open_path =
      path.find('/') == std::string::npos ? absl::StrCat("./", path) : path;
  // RTLD_NOW: an unresolved symbol is a start-up error, not a crash
  // mid-epoch. RTLD_LOCAL: plugins do not see each other's symbols.
  void* handle = dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return error(DlError());
  dlerror();
  void* entry = dlsym(handle, STOKER_PLUGIN_ENTRY_POINT);
  if (entry == nullptr) {
    return error(absl::StrCat("not a Stoker plugin: it exports no ",
                              STOKER_PLUGIN_ENTRY_POINT, " (", DlError(), ")"));
  }
  // The library stays loaded even after an error below: unloading code
  // that has run (stoker_plugin_init) is not safe in general, and a failed
  // load ends the server's start-up anyway.
  using InitFn = const StokerPlugin* (*)(int);
  const StokerPlugin* table =
      reinterpret_cast<InitFn>(entry)(STOKER_PLUGIN_ABI_VERSION);
  if (table == nullptr) {
    return error(absl::StrCat(STOKER_PLUGIN_ENTRY_POINT, " returned NULL"));
  }
  // Only abi_version is read before it matches: the rest of the table may
  // be laid out differently in another version.
  if (table->abi_version != STOKER_PLUGIN_ABI_VERSION) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plugin '", path, "' was built for Stoker plugin ABI ",
        table->abi_version, ", this server speaks ", STOKER_PLUGIN_ABI_VERSION,
        "; rebuild it against this server's image/ops/plugin_api.h"));
  }
  LoadedPlugin loaded;
  loaded.path = path;
  loaded.name = table->name != nullptr ? table->name : "";
  if (loaded.name.empty()) return error("its table has no name");
  if (table->n_ops < 1 || table->ops == nullptr) {
    return error("its table lists no ops");
  }
  const std::string plugin = absl::StrCat(loaded.name, " (", path, ")");
  std::vector<OpDef> defs;
  for (int i = 0; i < table->n_ops; ++i) {
    absl::StatusOr<std::shared_ptr<const PluginOpInfo>> info =
        ReadOp(table->ops[i], i, plugin);
    if (!info.ok()) return error(info.status().message());
    OpDef def;
    def.name = (*info)->name;
    def.params.assign((*info)->params.begin(), (*info)->params.end());
    def.usage = (*info)->usage;
    def.plugin = (*info)->plugin;
    // The function holds the info, so the views above stay valid as long
    // as the registry holds the def (for ever).
    def.create = [info = *info](const OpArgs& args) {
      return CreatePluginOp(info, args);
    };
    defs.push_back(std::move(def));
    loaded.ops.push_back((*info)->name);
  }
  if (absl::Status s = RegisterOps(std::move(defs)); !s.ok()) {
    return error(s.message());
  }
  return loaded;
}

}  // namespace stoker::image
