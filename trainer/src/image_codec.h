// PNG and JPEG images in memory: decoding (libpng, libjpeg-turbo) to 8-bit grayscale or RGB,
// an antialiased bilinear resize, and encoders that tests and benchmarks use to make real
// files. Pure functions, safe from several threads (each call has its own codec state).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace sweep::trainer {

// An 8-bit image, rows top to bottom, channels last (HWC): 1 channel (gray) or 3 (RGB).
struct Image {
  int height = 0;
  int width = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;  // height * width * channels
};

enum class ImageFormat { kUnknown, kPng, kJpeg };

// What the first bytes say the file is.
ImageFormat SniffImage(std::span<const uint8_t> bytes);

// Decodes a PNG or JPEG. Alpha is dropped, palettes and gray below 8 bits are expanded, 16-bit
// samples are scaled to 8 bits; no gamma or color management is applied (as PIL). With
// height and width > 0 the image is resized to exactly that size; a JPEG at least twice that
// size in both sides is first decoded at 1/2, 1/4 or 1/8 scale by its own inverse DCT.
// A corrupt or truncated file is an error (libjpeg's "corrupt data" warnings included); the
// message does not name the file (the caller knows it).
Status DecodeImage(std::span<const uint8_t> bytes, int height, int width, Image* out);

// Resizes src [sh, sw, c] into dst [dh, dw, c]: bilinear, with the filter widened by the scale
// when shrinking so that every source pixel counts (PIL's and torchvision's antialias).
void ResizeBilinear(const uint8_t* src, int sh, int sw, int c, uint8_t* dst, int dh, int dw);

// Encoders, for tests and benchmarks that need real files.
Result<std::vector<uint8_t>> EncodePng(const Image& image);
Result<std::vector<uint8_t>> EncodeJpeg(const Image& image, int quality);

}  // namespace sweep::trainer
