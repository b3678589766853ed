// Applies one kernel of image/functional.h to a binary PPM image, for
// tests/image/torchvision_functional_test.py.
//
//   functional_tool [--repeat=N] IN.ppm OUT.ppm KERNEL [ARG...]
//
// KERNEL is torchvision's name (e.g. adjust_brightness) and the ARGs are its
// PixelArgs (image/functional.h), checked with ValidateFunctionalArgs. IN is
// a P6 image with maxval 255; OUT receives the result as P6. With
// --repeat=N (N >= 1) the kernel also runs N more times, each on a fresh
// copy of the input, and the mean time per call goes to stdout as
// "KERNEL ns_per_call=...".

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "image/functional.h"
#include "image/plan.h"

namespace stoker::image {
namespace {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // packed RGB rows

  ImageView View() { return {pixels.data(), width, height, 3 * width}; }
};

// Reads one header token of a PNM file, skipping whitespace and comments.
absl::StatusOr<std::string> NextToken(const std::string& data, size_t& pos) {
  while (pos < data.size()) {
    const char c = data[pos];
    if (c == '#') {
      while (pos < data.size() && data[pos] != '\n') ++pos;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++pos;
    } else {
      break;
    }
  }
  const size_t begin = pos;
  while (pos < data.size() && data[pos] != ' ' && data[pos] != '\t' &&
         data[pos] != '\n' && data[pos] != '\r' && data[pos] != '#') {
    ++pos;
  }
  if (begin == pos) return absl::DataLossError("truncated PPM header");
  return data.substr(begin, pos - begin);
}

absl::StatusOr<Image> ReadPpm(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::string data((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  size_t pos = 0;
  int fields[3];
  absl::StatusOr<std::string> magic = NextToken(data, pos);
  if (!magic.ok() || *magic != "P6") {
    return absl::DataLossError(absl::StrCat(path, ": not a binary PPM (P6)"));
  }
  for (int& field : fields) {
    absl::StatusOr<std::string> token = NextToken(data, pos);
    if (!token.ok()) return token.status();
    if (!absl::SimpleAtoi(*token, &field) || field < 0 || field > 1 << 16) {
      return absl::DataLossError(
          absl::StrCat(path, ": bad PPM header field ", *token));
    }
  }
  if (fields[2] != 255) {
    return absl::DataLossError(absl::StrCat(path, ": maxval must be 255"));
  }
  ++pos;  // the single whitespace byte before the raster
  Image image;
  image.width = fields[0];
  image.height = fields[1];
  const size_t size = static_cast<size_t>(3) * image.width * image.height;
  if (data.size() < pos + size) {
    return absl::DataLossError(absl::StrCat(path, ": truncated raster"));
  }
  image.pixels.assign(data.begin() + pos, data.begin() + pos + size);
  return image;
}

absl::Status WritePpm(const std::string& path, const Image& image) {
  std::ofstream out(path, std::ios::binary);
  out << "P6\n" << image.width << " " << image.height << "\n255\n";
  out.write(reinterpret_cast<const char*>(image.pixels.data()),
            static_cast<std::streamsize>(image.pixels.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  int repeat = 0;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--repeat=")) {
      if (!absl::SimpleAtoi(arg, &repeat) || repeat < 1) {
        return absl::InvalidArgumentError("--repeat wants a positive integer");
      }
    } else {
      positional.emplace_back(arg);
    }
  }
  if (positional.size() < 3) {
    return absl::InvalidArgumentError(
        "usage: functional_tool [--repeat=N] IN.ppm OUT.ppm KERNEL [ARG...]");
  }
  const PixelKernel* kernel = FindFunctionalKernel(positional[2]);
  if (kernel == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown kernel ", positional[2]));
  }
  const int arg_count = static_cast<int>(positional.size()) - 3;
  if (arg_count != kernel->arg_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        kernel->name, " takes ", kernel->arg_count, " args, got ", arg_count));
  }
  PixelArgs args{0, 0, 0, 0};
  for (int i = 0; i < arg_count; ++i) {
    if (!absl::SimpleAtod(positional[3 + i], &args[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a number: ", positional[3 + i]));
    }
  }
  if (absl::Status s = ValidateFunctionalArgs(*kernel, args); !s.ok()) {
    return s;
  }
  absl::StatusOr<Image> input = ReadPpm(positional[0]);
  if (!input.ok()) return input.status();

  Image output = *input;
  kernel->apply(args, output.View());
  if (absl::Status s = WritePpm(positional[1], output); !s.ok()) return s;

  if (repeat > 0) {
    Image scratch = *input;
    int64_t total_ns = 0;
    for (int i = 0; i < repeat; ++i) {
      scratch.pixels = input->pixels;
      const auto start = std::chrono::steady_clock::now();
      kernel->apply(args, scratch.View());
      total_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
    }
    std::cout << kernel->name << " ns_per_call=" << total_ns / repeat << "\n";
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace stoker::image

int main(int argc, char** argv) {
  const absl::Status status = stoker::image::Run(argc, argv);
  if (!status.ok()) {
    std::cerr << "functional_tool: " << status << "\n";
    return 1;
  }
  return 0;
}
