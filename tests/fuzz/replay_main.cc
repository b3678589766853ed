// A main() for fuzz targets outside libFuzzer: runs LLVMFuzzerTestOneInput
// once over every regular file under the directories (or the files) named on
// the command line, in sorted order. The *_corpus_test targets link it so that
// each checked-in seed corpus (and every crash reproducer added to it) is a
// regression test of the ordinary build, with no fuzzing engine or sanitizer.
//
// Exit status: 0 if every input ran; 1 if an argument is missing or there was
// no input at all (an empty corpus would make the test pass vacuously). A
// failed property check aborts inside the target.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

bool CollectInputs(const std::string& arg, std::vector<fs::path>* inputs) {
  std::error_code ec;
  if (fs::is_regular_file(arg, ec)) {
    inputs->push_back(arg);
    return true;
  }
  if (!fs::is_directory(arg, ec)) {
    std::fprintf(stderr, "replay: '%s' is neither a file nor a directory\n",
                 arg.c_str());
    return false;
  }
  for (const fs::directory_entry& entry :
       fs::recursive_directory_iterator(arg, ec)) {
    if (entry.is_regular_file()) inputs->push_back(entry.path());
  }
  if (ec) {
    std::fprintf(stderr, "replay: cannot list '%s': %s\n", arg.c_str(),
                 ec.message().c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (!CollectInputs(argv[i], &inputs)) return 1;
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs; give corpus directories\n");
    return 1;
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "replay: cannot read '%s'\n", path.c_str());
      return 1;
    }
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(),
                 bytes.size());
    // A copy of exactly `size` bytes, so that ASan (when present) catches
    // reads past the end as libFuzzer would.
    std::vector<uint8_t> copy(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(copy.data(), copy.size());
  }
  std::fprintf(stderr, "replay: %zu inputs passed\n", inputs.size());
  return 0;
}
