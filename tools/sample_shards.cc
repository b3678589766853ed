#include "tools/sample_shards.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stoker::tools {
namespace {

constexpr size_t kBlock = 512;
// 2023-11-14T22:13:20Z; fixed so that archives are reproducible.
constexpr uint64_t kMtime = 1700000000;
constexpr uint64_t kMaxOctal11 = (uint64_t{1} << 33) - 1;

absl::Status ErrnoStatus(int err, absl::string_view what,
                         const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " '", path, "'"));
}

void PutOctal(char* field, int len, uint64_t value) {
  // len-1 zero-padded digits and a NUL.
  std::snprintf(field, len, "%0*llo", len - 1,
                static_cast<unsigned long long>(value));
}

void PutString(char* field, size_t len, absl::string_view value) {
  if (value.empty()) return;  // data() may be null
  std::memcpy(field, value.data(), std::min(len, value.size()));
}

// splitmix64: a tiny, well-mixed generator whose output is identical on every
// platform (std:: distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [lo, hi]; the modulo bias is irrelevant here.
  int Int(int lo, int hi) {
    return lo + static_cast<int>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t state_;
};

uint64_t Mix(uint64_t a, uint64_t b) {
  return Rng(a ^ (b * 0xd1342543de82ef95ULL + 0x2545f4914f6cdd1dULL)).Next();
}

// Independent streams per sample: one for the spec, one for the pixels.
uint64_t SampleSeed(const SampleShardsOptions& options, int shard, int sample,
                    uint64_t stream) {
  return Mix(Mix(Mix(options.seed, static_cast<uint64_t>(shard)),
                 static_cast<uint64_t>(sample)),
             stream);
}

cv::Scalar HueColor(double hue, double saturation, double value) {
  // HSV -> BGR, hue in [0, 1).
  const double h = std::fmod(hue, 1.0) * 6.0;
  const int sector = static_cast<int>(h) % 6;
  const double f = h - std::floor(h);
  const double p = value * (1 - saturation);
  const double q = value * (1 - saturation * f);
  const double t = value * (1 - saturation * (1 - f));
  double r = 0, g = 0, b = 0;
  switch (sector) {
    case 0:
      r = value, g = t, b = p;
      break;
    case 1:
      r = q, g = value, b = p;
      break;
    case 2:
      r = p, g = value, b = t;
      break;
    case 3:
      r = p, g = q, b = value;
      break;
    case 4:
      r = t, g = p, b = value;
      break;
    default:
      r = value, g = p, b = q;
      break;
  }
  return cv::Scalar(b * 255, g * 255, r * 255);
}

cv::Scalar RandomColor(Rng& rng) {
  return cv::Scalar(rng.Int(0, 255), rng.Int(0, 255), rng.Int(0, 255));
}

cv::Mat Render(const SampleShardsOptions& options, const SampleSpec& spec,
               Rng& rng) {
  const int w = spec.width, h = spec.height;
  cv::Mat image(h, w, CV_8UC3);

  // Background: a linear gradient from a label-dependent hue to a colour at
  // least 80 levels away in every channel, plus a low-frequency ripple.
  const cv::Scalar c0 =
      HueColor((spec.label + rng.Uniform(0, 0.3)) / options.num_classes,
               rng.Uniform(0.4, 0.9), rng.Uniform(0.5, 0.95));
  cv::Scalar c1;
  for (int c = 0; c < 3; ++c) {
    c1[c] = std::fmod(c0[c] + 80 + rng.Int(0, 95), 256.0);
  }
  const double angle = rng.Uniform(0, 2 * M_PI);
  const double dx = std::cos(angle), dy = std::sin(angle);
  const double lo = std::min(0.0, dx * w) + std::min(0.0, dy * h);
  const double hi = std::max(0.0, dx * w) + std::max(0.0, dy * h);
  const double fx = rng.Uniform(0.5, 3) * 2 * M_PI / w;
  const double fy = rng.Uniform(0.5, 3) * 2 * M_PI / h;
  const double phase = rng.Uniform(0, 2 * M_PI);
  const double ripple = rng.Uniform(5, 25);
  for (int y = 0; y < h; ++y) {
    auto* row = image.ptr<uint8_t>(y);
    for (int x = 0; x < w; ++x) {
      const double t = (dx * x + dy * y - lo) / (hi - lo);
      const double wave = ripple * std::sin(fx * x + fy * y + phase);
      for (int c = 0; c < 3; ++c) {
        row[3 * x + c] =
            cv::saturate_cast<uint8_t>(c0[c] + (c1[c] - c0[c]) * t + wave);
      }
    }
  }

  // Objects.
  const int min_dim = std::min(w, h);
  const int shapes = rng.Int(3, 9);
  for (int i = 0; i < shapes; ++i) {
    const cv::Point center(rng.Int(0, w - 1), rng.Int(0, h - 1));
    const int thickness = rng.Uniform() < 0.7 ? cv::FILLED : rng.Int(1, 6);
    const cv::Scalar color = RandomColor(rng);
    const int kind = rng.Int(0, 9);
    if (kind < 5) {
      const cv::Size axes(
          std::max(2, static_cast<int>(min_dim * rng.Uniform(0.04, 0.35))),
          std::max(2, static_cast<int>(min_dim * rng.Uniform(0.04, 0.35))));
      cv::ellipse(image, center, axes, rng.Uniform(0, 180), 0, 360, color,
                  thickness, cv::LINE_AA);
    } else if (kind < 8) {
      const cv::Point corner(center.x + rng.Int(-min_dim / 3, min_dim / 3),
                             center.y + rng.Int(-min_dim / 3, min_dim / 3));
      cv::rectangle(image, center, corner, color, thickness, cv::LINE_AA);
    } else {
      const cv::Point end(rng.Int(0, w - 1), rng.Int(0, h - 1));
      cv::line(image, center, end, color, rng.Int(1, 8), cv::LINE_AA);
    }
  }

  cv::GaussianBlur(image, image, cv::Size(0, 0), rng.Uniform(0.6, 1.6));

  // Sensor-like noise in [-6, 6], eight draws per 64-bit output.
  for (int y = 0; y < h; ++y) {
    auto* row = image.ptr<uint8_t>(y);
    uint64_t bits = 0;
    int left = 0;
    for (int i = 0; i < 3 * w; ++i) {
      if (left == 0) {
        bits = rng.Next();
        left = 8;
      }
      const int noise = static_cast<int>(bits & 0xff) % 13 - 6;
      bits >>= 8;
      --left;
      row[i] = cv::saturate_cast<uint8_t>(row[i] + noise);
    }
  }
  return image;
}

}  // namespace

absl::StatusOr<TarWriter> TarWriter::Create(const std::string& path) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "cannot create", path);
  return TarWriter(path, fd);
}

TarWriter::TarWriter(TarWriter&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      bytes_written_(other.bytes_written_) {}

TarWriter& TarWriter::operator=(TarWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    bytes_written_ = other.bytes_written_;
  }
  return *this;
}

TarWriter::~TarWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status TarWriter::Write(const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot write", path_);
    }
    data += n;
    size -= static_cast<size_t>(n);
    bytes_written_ += n;
  }
  return absl::OkStatus();
}

absl::Status TarWriter::Add(absl::string_view name, absl::string_view data) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("tar '", path_, "': Add after Finish"));
  }
  if (name.empty() || name.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tar '", path_, "': member name must be non-empty, without NUL"));
  }
  if (data.size() > kMaxOctal11) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tar '", path_, "': member '", name, "' is 8 GiB or larger"));
  }
  bool fits = name.size() <= 100;
  if (!fits) {
    // A ustar name splits at a '/' into prefix (<= 155) and name (<= 100).
    for (size_t slash = name.find('/'); slash != absl::string_view::npos;
         slash = name.find('/', slash + 1)) {
      if (slash <= 155 && name.size() - slash - 1 <= 100 &&
          slash + 1 < name.size()) {
        fits = true;
        break;
      }
    }
  }
  if (!fits) {
    // Pax record "<len> path=<name>\n", where <len> counts its own digits.
    const std::string body = absl::StrCat(" path=", name, "\n");
    size_t len = body.size() + 1;
    while (std::to_string(len).size() + body.size() != len) {
      len = std::to_string(len).size() + body.size();
    }
    absl::Status status =
        AddMember("PaxHeaders/long_name", 'x', absl::StrCat(len, body));
    if (!status.ok()) return status;
  }
  return AddMember(name, '0', data);
}

absl::Status TarWriter::AddMember(absl::string_view name, char type,
                                  absl::string_view data) {
  char header[kBlock] = {};
  absl::string_view short_name = name, prefix;
  if (name.size() > 100) {
    // Longest prefix that leaves a name of at most 100 bytes; with a pax
    // header in front this is only informative, so fall back to the tail.
    size_t split = absl::string_view::npos;
    for (size_t slash = name.find('/'); slash != absl::string_view::npos;
         slash = name.find('/', slash + 1)) {
      if (slash <= 155 && name.size() - slash - 1 <= 100 &&
          slash + 1 < name.size()) {
        split = slash;
        break;
      }
    }
    if (split != absl::string_view::npos) {
      prefix = name.substr(0, split);
      short_name = name.substr(split + 1);
    } else {
      short_name = name.substr(name.size() - 100);
    }
  }
  PutString(header + 0, 100, short_name);
  PutOctal(header + 100, 8, 0644);
  PutOctal(header + 108, 8, 0);
  PutOctal(header + 116, 8, 0);
  PutOctal(header + 124, 12, data.size());
  PutOctal(header + 136, 12, kMtime);
  header[156] = type;
  std::memcpy(header + 257,
              "ustar\0"
              "00",
              8);
  PutString(header + 345, 155, prefix);
  std::memset(header + 148, ' ', 8);
  unsigned int sum = 0;
  for (size_t i = 0; i < kBlock; ++i)
    sum += static_cast<unsigned char>(header[i]);
  std::snprintf(header + 148, 8, "%06o", sum);  // Six digits, NUL, then ' '.
  header[155] = ' ';

  absl::Status status = Write(header, kBlock);
  if (status.ok()) status = Write(data.data(), data.size());
  const size_t pad = (kBlock - data.size() % kBlock) % kBlock;
  static constexpr char kZeros[kBlock] = {};
  if (status.ok() && pad > 0) status = Write(kZeros, pad);
  return status;
}

absl::Status TarWriter::Finish() {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("tar '", path_, "': Finish called twice"));
  }
  static constexpr char kEnd[2 * kBlock] = {};
  absl::Status status = Write(kEnd, sizeof(kEnd));
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 && status.ok())
    status = ErrnoStatus(errno, "cannot close", path_);
  return status;
}

absl::Status WriteTarFile(const std::string& path,
                          const std::vector<TarMember>& members) {
  absl::StatusOr<TarWriter> writer = TarWriter::Create(path);
  if (!writer.ok()) return writer.status();
  for (const TarMember& member : members) {
    absl::Status status = writer->Add(member.name, member.data);
    if (!status.ok()) return status;
  }
  return writer->Finish();
}

absl::Status TruncateFile(const std::string& path, int64_t new_size) {
  if (::truncate(path.c_str(), static_cast<off_t>(new_size)) != 0) {
    return ErrnoStatus(errno, "cannot truncate", path);
  }
  return absl::OkStatus();
}

absl::Status ValidateSampleShardsOptions(const SampleShardsOptions& options) {
  auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("sample shards: ", why));
  };
  if (options.dir.empty()) return bad("dir (the output directory) is required");
  if (options.prefix.empty() || options.prefix.find('/') != std::string::npos) {
    return bad(absl::StrCat("prefix '", options.prefix,
                            "' must be non-empty without '/'"));
  }
  if (options.num_shards < 1 || options.num_shards > 999999) {
    return bad(
        absl::StrCat("num_shards is ", options.num_shards, "; use 1..999999"));
  }
  if (options.samples_per_shard < 1 || options.samples_per_shard > 99999) {
    return bad(absl::StrCat("samples_per_shard is ", options.samples_per_shard,
                            "; use 1..99999"));
  }
  if (options.min_side < 8 || options.max_side > 8192 ||
      options.min_side > options.max_side) {
    return bad(absl::StrCat("sides are [", options.min_side, ", ",
                            options.max_side,
                            "]; need 8 <= min_side <= max_side <= 8192"));
  }
  if (options.num_classes < 1) {
    return bad(
        absl::StrCat("num_classes is ", options.num_classes, "; use >= 1"));
  }
  if (options.jpeg_quality < 1 || options.jpeg_quality > 100) {
    return bad(
        absl::StrCat("jpeg_quality is ", options.jpeg_quality, "; use 1..100"));
  }
  if (!(options.png_fraction >= 0 && options.png_fraction <= 1)) {
    return bad(
        absl::StrCat("png_fraction is ", options.png_fraction, "; use [0, 1]"));
  }
  return absl::OkStatus();
}

SampleSpec DescribeSample(const SampleShardsOptions& options, int shard,
                          int sample) {
  Rng rng(SampleSeed(options, shard, sample, /*stream=*/0));
  SampleSpec spec;
  spec.key = absl::StrFormat("%s%04d_%05d", options.prefix, shard, sample);
  spec.label = static_cast<int32_t>(rng.Next() %
                                    static_cast<uint64_t>(options.num_classes));
  spec.png = rng.Uniform() < options.png_fraction;
  const double kind = rng.Uniform();
  if (kind < 0.3) {
    spec.width = 500, spec.height = 375;
  } else if (kind < 0.4) {
    spec.width = 375, spec.height = 500;
  } else {
    static constexpr double kAspects[] = {4.0 / 3, 3.0 / 2, 16.0 / 9, 1.0,
                                          5.0 / 4, 3.0 / 4, 2.0 / 3};
    const double aspect = kAspects[rng.Int(0, 6)];
    const int long_side = rng.Int(options.min_side, options.max_side);
    const int short_side =
        static_cast<int>(std::lround(long_side / std::max(aspect, 1 / aspect)));
    spec.width = aspect >= 1 ? long_side : short_side;
    spec.height = aspect >= 1 ? short_side : long_side;
  }
  spec.width = std::clamp(spec.width, options.min_side, options.max_side);
  spec.height = std::clamp(spec.height, options.min_side, options.max_side);
  return spec;
}

absl::StatusOr<std::string> RenderSampleImage(
    const SampleShardsOptions& options, int shard, int sample) {
  const SampleSpec spec = DescribeSample(options, shard, sample);
  Rng rng(SampleSeed(options, shard, sample, /*stream=*/1));
  try {
    const cv::Mat image = Render(options, spec, rng);
    std::vector<uint8_t> encoded;
    const bool ok =
        spec.png
            ? cv::imencode(".png", image, encoded)
            : cv::imencode(".jpg", image, encoded,
                           {cv::IMWRITE_JPEG_QUALITY, options.jpeg_quality});
    if (!ok) {
      return absl::InternalError(
          absl::StrCat("cannot encode sample ", spec.key));
    }
    return std::string(encoded.begin(), encoded.end());
  } catch (const cv::Exception& e) {
    return absl::InternalError(absl::StrCat("OpenCV failed rendering sample ",
                                            spec.key, ": ", e.what()));
  }
}

std::string SampleShardPath(const SampleShardsOptions& options, int shard) {
  return absl::StrFormat("%s/%s-%06d.tar", options.dir, options.prefix, shard);
}

absl::StatusOr<std::vector<std::string>> WriteSampleShards(
    const SampleShardsOptions& options) {
  absl::Status status = ValidateSampleShardsOptions(options);
  if (!status.ok()) return status;
  std::error_code error;
  std::filesystem::create_directories(options.dir, error);
  if (error) {
    return absl::ErrnoToStatus(
        error.value(),
        absl::StrCat("cannot create directory '", options.dir, "'"));
  }
  std::vector<std::string> paths;
  for (int shard = 0; shard < options.num_shards; ++shard) {
    const std::string path = SampleShardPath(options, shard);
    const std::string tmp = path + ".tmp";
    absl::StatusOr<TarWriter> writer = TarWriter::Create(tmp);
    if (!writer.ok()) return writer.status();
    for (int sample = 0; sample < options.samples_per_shard; ++sample) {
      const SampleSpec spec = DescribeSample(options, shard, sample);
      absl::StatusOr<std::string> image =
          RenderSampleImage(options, shard, sample);
      if (!image.ok()) return image.status();
      status = writer->Add(absl::StrCat(spec.key, ".cls"),
                           absl::StrCat(spec.label, "\n"));
      if (status.ok()) {
        status = writer->Add(absl::StrCat(spec.key, spec.png ? ".png" : ".jpg"),
                             *image);
      }
      if (!status.ok()) return status;
    }
    status = writer->Finish();
    if (!status.ok()) return status;
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      return ErrnoStatus(errno, "cannot rename into place", path);
    }
    paths.push_back(path);
  }
  return paths;
}

}  // namespace stoker::tools
