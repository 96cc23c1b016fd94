// Image-folder datasets (DatasetSpec::format "folder", torchvision's ImageFolder layout): the
// listing of a folder of class folders, which keys the dataset caches, and the probe of the
// first image for a sample shape. The decoder itself is LoadImageFolder (data.h).
// Pure functions over the file system; safe from several threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "data.h"
#include "model.h"
#include "trainer/trainer.h"

namespace sweep::trainer {

// 1. Classes are the folder's subfolders (links to folders count), sorted by name (bytes, so
//    UTF-8 names sort by code point, as Python's sorted()); a name starting with '.' is hidden.
// 2. A class's samples are every file under its folder, at any depth, hidden ones left out,
//    sorted by their path under the class folder. Files at the top level are not samples.
// 3. The label of a sample is its class's place in that order.
struct FolderListing {
  std::string root;                  // canonical
  std::vector<std::string> classes;  // sorted
  std::vector<std::string> files;    // full paths, classes in order, then files in order
  std::vector<int32_t> labels;       // [files]
  std::vector<int> empty_classes;    // classes whose folders hold no file
  // A digest of every file's path, size and mtime: the dataset's version for the caches.
  std::string version;
};

// Errors: the folder is missing or not a folder, cannot be read, or holds no class folders.
Result<FolderListing> ListImageFolder(const std::string& dir);

// The decoded set of a listing (LoadImageFolder without the listing step). A set whose pixels
// would take over half of the machine's memory comes streamed instead (StreamImageFolder).
Result<DatasetPtr> DecodeImageFolder(const FolderListing& listing, const DatasetSpec& spec);

// The set of a listing streamed from its files (Dataset::stream): every gather decodes the rows
// it asks for, on spec.decode_threads threads (0: one per core), the calling one among them.
// Only the first readable image is decoded here, for the samples' shape. Bad files are met as
// they are gathered: on_bad_file = "error" fails the stream naming the file; "skip" counts it
// and decodes the next good file of its class in its place.
Result<DatasetPtr> StreamImageFolder(const FolderListing& listing, const DatasetSpec& spec);

// The samples a folder holds: its class folders' files, listed as ListImageFolder lists them
// (not opened).
Result<int64_t> CountFolderSamples(const std::string& dir);

// The shape samples of the training folder will have ({C, H, W}): the first decodable image's
// channels, and image_size or that image's size. Decodes one image (a few when the first ones
// are bad). NotFound when no image is found among the first files.
Result<TensorShape> ProbeFolderShape(const DatasetSpec& spec);

}  // namespace sweep::trainer
