// PNG and JPEG decoding and encoding (image_codec.h). libpng and libjpeg report errors by
// longjmp: each call into them sits in a small function that does its own setjmp and holds no
// C++ object with a destructor, and the codec state lives in a guard in its caller.
#include "image_codec.h"

// clang-format off
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace sweep::trainer {
namespace {

// A decoded image larger than this is refused (a decompression bomb, or not a training image).
constexpr int kMaxSide = 1 << 15;
constexpr int64_t kMaxPixels = int64_t{1} << 28;

// ---- PNG ----

struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  char message[200] = {};
  ~PngState() {
    if (png != nullptr) png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
  }
};

void PngError(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(s->message, sizeof s->message, "%s", msg);
  png_longjmp(png, 1);
}

// Warnings are about ancillary chunks (a bad text or color profile chunk): the pixels are fine.
void PngWarning(png_structp, png_const_charp) {}

void PngRead(png_structp png, png_bytep out, size_t n) {
  auto* s = static_cast<PngState*>(png_get_io_ptr(png));
  if (s->size - s->pos < n) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, s->data + s->pos, n);
  s->pos += n;
}

// Reads the header and sets the transforms to 8-bit gray or RGB. False on an error.
bool PngHeader(PngState* s, int* height, int* width, int* channels) {
  if (setjmp(png_jmpbuf(s->png))) return false;
  png_set_read_fn(s->png, s, PngRead);
  png_set_user_limits(s->png, kMaxSide, kMaxSide);
  png_read_info(s->png, s->info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0;
  png_get_IHDR(s->png, s->info, &w, &h, &depth, &color, nullptr, nullptr, nullptr);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(s->png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(s->png);
  if (depth == 16) png_set_scale_16(s->png);
  if ((color & PNG_COLOR_MASK_ALPHA) != 0) png_set_strip_alpha(s->png);
  png_set_interlace_handling(s->png);
  png_read_update_info(s->png, s->info);
  *height = static_cast<int>(h);
  *width = static_cast<int>(w);
  *channels = png_get_channels(s->png, s->info);
  return true;
}

bool PngPixels(PngState* s, png_bytepp rows) {
  if (setjmp(png_jmpbuf(s->png))) return false;
  png_read_image(s->png, rows);
  png_read_end(s->png, nullptr);
  return true;
}

// Sizes *out for an image of h x w x c once the header is read, or refuses one over our limits
// (libpng checks the sides itself, libjpeg does not).
Status SizeImage(const char* format, int h, int w, int c, Image* out) {
  if (h > kMaxSide || w > kMaxSide || int64_t{h} * w > kMaxPixels) {
    return Status::Corruption(std::string(format) + " of " + std::to_string(w) + "x" +
                              std::to_string(h) + " is too large (sides up to " +
                              std::to_string(kMaxSide) + ", " + std::to_string(kMaxPixels >> 20) +
                              " Mpixels in all)");
  }
  out->height = h;
  out->width = w;
  out->channels = c;
  out->pixels.resize(static_cast<size_t>(h) * w * c);
  return Status::Ok();
}

Status DecodePng(std::span<const uint8_t> bytes, Image* out) {
  // Sides past our limit are libpng's "Invalid IHDR data": read them first, to say the size.
  if (bytes.size() >= 24 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0) {
    auto be32 = [&](size_t at) {
      return uint32_t{bytes[at]} << 24 | uint32_t{bytes[at + 1]} << 16 |
             uint32_t{bytes[at + 2]} << 8 | uint32_t{bytes[at + 3]};
    };
    const uint32_t w = be32(16), h = be32(20);
    if (w > static_cast<uint32_t>(kMaxSide) || h > static_cast<uint32_t>(kMaxSide)) {
      return Status::Corruption("PNG of " + std::to_string(w) + "x" + std::to_string(h) +
                                " is too large (sides up to " + std::to_string(kMaxSide) + ")");
    }
  }
  PngState s;
  s.data = bytes.data();
  s.size = bytes.size();
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, PngError, PngWarning);
  if (s.png != nullptr) s.info = png_create_info_struct(s.png);
  if (s.info == nullptr) return Status::IoError("out of memory for libpng");
  int h = 0, w = 0, c = 0;
  if (!PngHeader(&s, &h, &w, &c)) return Status::Corruption(std::string("bad PNG: ") + s.message);
  if (c != 1 && c != 3) {
    return Status::Corruption("PNG of " + std::to_string(c) + " channels after conversion");
  }
  SWEEP_RETURN_IF_ERROR(SizeImage("PNG", h, w, c, out));
  std::vector<png_bytep> rows(static_cast<size_t>(h));
  for (int y = 0; y < h; ++y) rows[static_cast<size_t>(y)] = &out->pixels[size_t{1} * y * w * c];
  if (!PngPixels(&s, rows.data())) return Status::Corruption(std::string("bad PNG: ") + s.message);
  return Status::Ok();
}

// ---- JPEG ----

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void JpegExit(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// libjpeg only warns about corrupt data (a truncated file decodes with its end gray): such a
// file is refused, as PIL refuses a truncated one. An unknown JFIF revision is harmless.
void JpegMessage(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code != JWRN_JFIF_MAJOR) JpegExit(cinfo);
}

struct JpegDecoder {
  jpeg_decompress_struct cinfo;
  JpegError err;
  bool made = false;
  ~JpegDecoder() {
    if (made) jpeg_destroy_decompress(&cinfo);
  }
};

// Reads the header and picks the output: gray or RGB, at the smallest DCT scale (1, 1/2, 1/4,
// 1/8) that is still at least height x width (0: full size). False on an error.
bool JpegHeader(JpegDecoder* d, std::span<const uint8_t> bytes, int height, int width, int* h,
                int* w, int* c) {
  d->cinfo.err = jpeg_std_error(&d->err.mgr);
  d->err.mgr.error_exit = JpegExit;
  d->err.mgr.emit_message = JpegMessage;
  d->err.message[0] = '\0';
  if (setjmp(d->err.jump)) return false;
  jpeg_create_decompress(&d->cinfo);
  d->made = true;
  jpeg_mem_src(&d->cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&d->cinfo, TRUE);
  const J_COLOR_SPACE in = d->cinfo.jpeg_color_space;
  if (in == JCS_CMYK || in == JCS_YCCK) {
    std::snprintf(d->err.message, sizeof d->err.message, "CMYK JPEGs are not supported");
    return false;
  }
  d->cinfo.out_color_space = in == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB;
  if (height > 0 && width > 0) {
    const auto iw = static_cast<int64_t>(d->cinfo.image_width);
    const auto ih = static_cast<int64_t>(d->cinfo.image_height);
    // Only these scales: libjpeg-turbo has SIMD code for them, and 7/8 (256 to 224) decodes
    // slower than the whole image and a resize.
    for (int denom : {8, 4, 2}) {
      if ((iw + denom - 1) / denom >= width && (ih + denom - 1) / denom >= height) {
        d->cinfo.scale_num = 1;
        d->cinfo.scale_denom = static_cast<unsigned>(denom);
        break;
      }
    }
  }
  jpeg_calc_output_dimensions(&d->cinfo);
  *h = static_cast<int>(d->cinfo.output_height);
  *w = static_cast<int>(d->cinfo.output_width);
  *c = d->cinfo.out_color_components;
  return true;
}

bool JpegPixels(JpegDecoder* d, uint8_t* pixels) {
  if (setjmp(d->err.jump)) return false;
  jpeg_start_decompress(&d->cinfo);
  const size_t stride = size_t{d->cinfo.output_width} * d->cinfo.output_components;
  while (d->cinfo.output_scanline < d->cinfo.output_height) {
    JSAMPROW rows[4];
    const JDIMENSION n = std::min<JDIMENSION>(4, d->cinfo.output_height - d->cinfo.output_scanline);
    for (JDIMENSION i = 0; i < n; ++i) rows[i] = pixels + (d->cinfo.output_scanline + i) * stride;
    jpeg_read_scanlines(&d->cinfo, rows, n);
  }
  jpeg_finish_decompress(&d->cinfo);
  return true;
}

Status DecodeJpeg(std::span<const uint8_t> bytes, int height, int width, Image* out) {
  JpegDecoder d;
  int h = 0, w = 0, c = 0;
  if (!JpegHeader(&d, bytes, height, width, &h, &w, &c)) {
    return Status::Corruption(std::string("bad JPEG: ") + d.err.message);
  }
  SWEEP_RETURN_IF_ERROR(SizeImage("JPEG", h, w, c, out));
  if (!JpegPixels(&d, out->pixels.data())) {
    return Status::Corruption(std::string("bad JPEG: ") + d.err.message);
  }
  return Status::Ok();
}

// ---- resize ----

// One output coordinate's source range and weights, for a separable filter.
struct Taps {
  std::vector<int> first;      // [out]
  std::vector<int> count;      // [out]
  std::vector<float> weights;  // [out * max_taps]
  int max_taps = 0;
};

// PIL's bilinear (triangle) filter, widened by the scale when shrinking.
Taps MakeTaps(int in, int out) {
  Taps t;
  const double scale = static_cast<double>(in) / out;
  const double support = std::max(scale, 1.0);
  t.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<size_t>(out));
  t.count.resize(static_cast<size_t>(out));
  t.weights.assign(static_cast<size_t>(out) * t.max_taps, 0.0f);
  for (int i = 0; i < out; ++i) {
    const double center = (i + 0.5) * scale;
    const int lo = std::max(0, static_cast<int>(std::floor(center - support + 0.5)));
    const int hi = std::min(in, static_cast<int>(std::floor(center + support + 0.5)));
    double sum = 0;
    float* w = &t.weights[static_cast<size_t>(i) * t.max_taps];
    const int n = std::min(hi - lo, t.max_taps);
    for (int k = 0; k < n; ++k) {
      const double d = std::abs((lo + k + 0.5 - center) / support);
      w[k] = static_cast<float>(std::max(0.0, 1.0 - d));
      sum += w[k];
    }
    for (int k = 0; k < n; ++k) w[k] = sum > 0 ? static_cast<float>(w[k] / sum) : 0.0f;
    t.first[static_cast<size_t>(i)] = lo;
    t.count[static_cast<size_t>(i)] = n;
  }
  // Every output then takes the same number of taps (the extra weights are 0): a loop whose
  // count changes from one pixel to the next costs a mispredicted branch per pixel.
  const int widest = *std::max_element(t.count.begin(), t.count.end());
  for (int i = 0; i < out; ++i) {
    std::copy_n(&t.weights[static_cast<size_t>(i) * t.max_taps], widest,
                &t.weights[static_cast<size_t>(i) * widest]);
  }
  t.max_taps = widest;
  t.weights.resize(static_cast<size_t>(out) * widest);
  return t;
}

// Four floats in one SSE register (GCC and Clang's vector extension): an RGB pixel plus a
// lane of the next, so the horizontal pass of RGB images runs three channels at once.
typedef float F4 __attribute__((vector_size(16)));

F4 Load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The horizontal pass of one source row: `in` [sw, c] filtered into out [dw, c]. `line` is
// scratch; `out` has one float of room past its end (RGB stores write a fourth lane).
void ResizeRow(const uint8_t* in, int sw, int c, const Taps& t, int dw, std::vector<float>* line,
               float* out) {
  // Zeros past the row: the taps of weight 0 at its end, and the fourth lane of the last pixel.
  const size_t row = static_cast<size_t>(sw) * c;
  line->resize(row + static_cast<size_t>(t.max_taps) * c + 1);
  std::fill(line->begin() + static_cast<std::ptrdiff_t>(row), line->end(), 0.0f);
  float* l = line->data();
  for (size_t i = 0; i < row; ++i) l[i] = in[i];
  const int n = t.max_taps;
  for (int x = 0; x < dw; ++x) {
    const float* p = l + static_cast<size_t>(t.first[static_cast<size_t>(x)]) * c;
    const float* w = &t.weights[static_cast<size_t>(x) * n];
    if (c == 3) {
      // Unrolled for the usual tap counts, so that pixels overlap in the pipeline.
      F4 sum = {0, 0, 0, 0};
      switch (n) {
        case 2:
          sum = w[0] * Load4(p) + w[1] * Load4(p + 3);
          break;
        case 3:
          sum = w[0] * Load4(p) + w[1] * Load4(p + 3) + w[2] * Load4(p + 6);
          break;
        case 4:
          sum =
              (w[0] * Load4(p) + w[1] * Load4(p + 3)) + (w[2] * Load4(p + 6) + w[3] * Load4(p + 9));
          break;
        default:
          for (int k = 0; k < n; ++k) sum += w[k] * Load4(p + 3 * k);
      }
      std::memcpy(out + 3 * x, &sum, sizeof sum);
    } else {
      for (int ch = 0; ch < c; ++ch) {
        float sum = 0;
        for (int k = 0; k < n; ++k) sum += w[k] * p[k * c + ch];
        out[x * c + ch] = sum;
      }
    }
  }
}

// The vertical pass for one output row of kN taps (0: n, known at run time), rounded to bytes.
template <int kN>
void ResizeColumn(const float* const* in, const float* w, int n, size_t count,
                  uint8_t* __restrict out) {
  const int taps = kN > 0 ? kN : n;
  for (size_t i = 0; i < count; ++i) {
    float sum = 0.5f;
    for (int k = 0; k < taps; ++k) sum += w[k] * in[k][i];
    out[i] = static_cast<uint8_t>(std::clamp(sum, 0.0f, 255.0f));
  }
}

// ---- encoders ----

struct PngWriter {
  std::vector<uint8_t>* out;
  char message[200];
};

void PngWriteError(png_structp png, png_const_charp msg) {
  auto* w = static_cast<PngWriter*>(png_get_error_ptr(png));
  std::snprintf(w->message, sizeof w->message, "%s", msg);
  png_longjmp(png, 1);
}

void PngWrite(png_structp png, png_bytep data, size_t n) {
  auto* w = static_cast<PngWriter*>(png_get_io_ptr(png));
  w->out->insert(w->out->end(), data, data + n);
}

void PngFlush(png_structp) {}

bool PngEncode(png_structp png, png_infop info, PngWriter* writer, const Image& image,
               png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, writer, PngWrite, PngFlush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(image.width),
               static_cast<png_uint_32>(image.height), 8,
               image.channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  return true;
}

struct JpegEncoder {
  jpeg_compress_struct cinfo;
  JpegError err;
  bool made = false;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  ~JpegEncoder() {
    if (made) jpeg_destroy_compress(&cinfo);
    std::free(buffer);
  }
};

bool JpegEncode(JpegEncoder* e, const Image& image, int quality) {
  e->cinfo.err = jpeg_std_error(&e->err.mgr);
  e->err.mgr.error_exit = JpegExit;
  if (setjmp(e->err.jump)) return false;
  jpeg_create_compress(&e->cinfo);
  e->made = true;
  jpeg_mem_dest(&e->cinfo, &e->buffer, &e->size);
  e->cinfo.image_width = static_cast<JDIMENSION>(image.width);
  e->cinfo.image_height = static_cast<JDIMENSION>(image.height);
  e->cinfo.input_components = image.channels;
  e->cinfo.in_color_space = image.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&e->cinfo);
  jpeg_set_quality(&e->cinfo, quality, TRUE);
  jpeg_start_compress(&e->cinfo, TRUE);
  const size_t stride = static_cast<size_t>(image.width) * image.channels;
  while (e->cinfo.next_scanline < e->cinfo.image_height) {
    // libjpeg's API takes non-const rows; it only reads them.
    JSAMPROW row = const_cast<uint8_t*>(image.pixels.data()) + e->cinfo.next_scanline * stride;
    jpeg_write_scanlines(&e->cinfo, &row, 1);
  }
  jpeg_finish_compress(&e->cinfo);
  return true;
}

Status CheckEncodable(const Image& image) {
  if ((image.channels != 1 && image.channels != 3) || image.height < 1 || image.width < 1 ||
      image.pixels.size() != static_cast<size_t>(image.height) * image.width * image.channels) {
    return Status::InvalidArgument("not an 8-bit gray or RGB image");
  }
  return Status::Ok();
}

}  // namespace

ImageFormat SniffImage(std::span<const uint8_t> b) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (b.size() >= 8 && std::memcmp(b.data(), kPng, 8) == 0) return ImageFormat::kPng;
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageFormat::kJpeg;
  return ImageFormat::kUnknown;
}

Status DecodeImage(std::span<const uint8_t> bytes, int height, int width, Image* out) {
  const bool resize = height > 0 && width > 0;
  // Reused: a fresh buffer of this size per image is an mmap and munmap in glibc, which
  // serialise a pool of decoding threads on the kernel.
  thread_local Image decoded;
  Image* target = resize ? &decoded : out;
  switch (SniffImage(bytes)) {
    case ImageFormat::kPng:
      SWEEP_RETURN_IF_ERROR(DecodePng(bytes, target));
      break;
    case ImageFormat::kJpeg:
      SWEEP_RETURN_IF_ERROR(DecodeJpeg(bytes, height, width, target));
      break;
    case ImageFormat::kUnknown:
      return Status::Corruption(bytes.empty() ? "empty file, not an image"
                                              : "not a PNG or JPEG image");
  }
  if (!resize) return Status::Ok();
  if (decoded.height == height && decoded.width == width) {
    *out = decoded;
    return Status::Ok();
  }
  out->height = height;
  out->width = width;
  out->channels = decoded.channels;
  out->pixels.resize(static_cast<size_t>(height) * width * decoded.channels);
  ResizeBilinear(decoded.pixels.data(), decoded.height, decoded.width, decoded.channels,
                 out->pixels.data(), height, width);
  return Status::Ok();
}

void ResizeBilinear(const uint8_t* src, int sh, int sw, int c, uint8_t* dst, int dh, int dw) {
  if (sh == dh && sw == dw) {
    std::memcpy(dst, src, static_cast<size_t>(sh) * sw * c);
    return;
  }
  const Taps across = MakeTaps(sw, dw), down = MakeTaps(sh, dh);
  // Rows are filtered as the columns' pass first needs them, into a ring of as many rows as a
  // column takes: a few KB that stay in L1, where a whole filtered image would not fit in L2.
  // (An output row's first source row never goes back, so a row is filtered once.)
  thread_local std::vector<float> ring, line;
  thread_local std::vector<const float*> in;
  const size_t row_floats = static_cast<size_t>(dw) * c;
  const size_t stride = row_floats + 4;  // room for the fourth lane of an RGB store
  const int slots = down.max_taps;
  ring.resize(static_cast<size_t>(slots) * stride);
  in.resize(static_cast<size_t>(slots));
  int next = 0;  // the next source row to filter
  for (int y = 0; y < dh; ++y) {
    const int first = down.first[static_cast<size_t>(y)];
    const int n = down.count[static_cast<size_t>(y)];
    const float* w = &down.weights[static_cast<size_t>(y) * down.max_taps];
    next = std::max(next, first);
    for (; next < first + n; ++next) {
      ResizeRow(src + static_cast<size_t>(next) * sw * c, sw, c, across, dw, &line,
                &ring[static_cast<size_t>(next % slots) * stride]);
    }
    for (int k = 0; k < n; ++k) {
      in[static_cast<size_t>(k)] = &ring[static_cast<size_t>((first + k) % slots) * stride];
    }
    uint8_t* out = dst + static_cast<size_t>(y) * row_floats;
    switch (n) {
      case 2:
        ResizeColumn<2>(in.data(), w, n, row_floats, out);
        break;
      case 3:
        ResizeColumn<3>(in.data(), w, n, row_floats, out);
        break;
      case 4:
        ResizeColumn<4>(in.data(), w, n, row_floats, out);
        break;
      default:
        ResizeColumn<0>(in.data(), w, n, row_floats, out);
    }
  }
}

Result<std::vector<uint8_t>> EncodePng(const Image& image) {
  SWEEP_RETURN_IF_ERROR(CheckEncodable(image));
  std::vector<uint8_t> out;
  PngWriter writer{&out, {}};
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, &writer, PngWriteError, PngWarning);
  png_infop info = png != nullptr ? png_create_info_struct(png) : nullptr;
  std::vector<png_bytep> rows(static_cast<size_t>(image.height));
  const size_t stride = static_cast<size_t>(image.width) * image.channels;
  for (int y = 0; y < image.height; ++y) {
    rows[static_cast<size_t>(y)] = const_cast<uint8_t*>(image.pixels.data()) + y * stride;
  }
  const bool ok = info != nullptr && PngEncode(png, info, &writer, image, rows.data());
  png_destroy_write_struct(&png, info != nullptr ? &info : nullptr);
  if (!ok) return Status::IoError(std::string("cannot encode PNG: ") + writer.message);
  return out;
}

Result<std::vector<uint8_t>> EncodeJpeg(const Image& image, int quality) {
  SWEEP_RETURN_IF_ERROR(CheckEncodable(image));
  JpegEncoder e;
  if (!JpegEncode(&e, image, quality)) {
    return Status::IoError(std::string("cannot encode JPEG: ") + e.err.message);
  }
  return std::vector<uint8_t>(e.buffer, e.buffer + e.size);
}

}  // namespace sweep::trainer
