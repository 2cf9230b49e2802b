#include "engine/model/weight_files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/model/json_util.h"
#include "engine/util/log.h"
#include "engine/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace ptxserve {
namespace {

using nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Shard names come from a downloaded file: keep them inside the model directory.
bool SafeShardName(std::string_view name) {
  if (name.empty() || name.front() == '/') return false;
  for (absl::string_view part : absl::StrSplit(absl::string_view(name.data(), name.size()), '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::UnavailableError(msg);
  }
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::UnavailableError(absl::StrCat(path, ": read error"));
  return text;
}

absl::StatusOr<WeightFiles> WeightFiles::Open(const std::string& dir) {
  WeightFiles w;
  const std::string single = absl::StrCat(dir, "/", kSingleFile);
  const std::string index_path = absl::StrCat(dir, "/", kIndexFile);
  if (FileExists(single) || !FileExists(index_path)) {
    if (!FileExists(single)) {
      return absl::NotFoundError(
          absl::StrCat(dir, ": neither ", kSingleFile, " nor ", kIndexFile, " exists"));
    }
    w.source_ = single;
    PTX_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single));
    PTX_LOG(INFO) << "mapped " << single << " (" << (file->file_size() >> 20) << " MiB, "
                  << file->entries().size() << " tensors)";
    w.files_.push_back(std::move(file));
    return w;
  }

  w.source_ = index_path;
  PTX_ASSIGN_OR_RETURN(std::string text, ReadTextFile(index_path));
  PTX_ASSIGN_OR_RETURN(const json index, ParseJsonObject(text, index_path));
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": field 'weight_map' missing or not an object"));
  }
  // Shard name -> its mapping; each shard is mapped once however many tensors it holds.
  std::map<std::string, const SafetensorsFile*, std::less<>> shards;
  for (const auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string() || !SafeShardName(shard.get_ref<const std::string&>())) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map entry for tensor '",
                                                     tensor, "' names no valid shard file (",
                                                     DescribeJson(shard), ")"));
    }
    const std::string& name = shard.get_ref<const std::string&>();
    auto it = shards.find(name);
    if (it == shards.end()) {
      const std::string path = absl::StrCat(dir, "/", name);
      auto file = SafetensorsFile::Open(path);
      if (!file.ok()) {
        return absl::Status(file.status().code(),
                            absl::StrCat(index_path, ": weight_map maps tensor '", tensor,
                                         "' to shard '", name, "': ", file.status().message()));
      }
      PTX_LOG(INFO) << "mapped shard " << shards.size() + 1 << " " << path << " ("
                    << ((*file)->file_size() >> 20) << " MiB, " << (*file)->entries().size()
                    << " tensors)";
      it = shards.emplace(name, file->get()).first;
      w.files_.push_back(*std::move(file));
    }
    if (it->second->Find(tensor) == nullptr) {
      return absl::NotFoundError(absl::StrCat(index_path, ": weight_map maps tensor '", tensor,
                                              "' to shard '", name, "', but ", it->second->path(),
                                              " has no tensor '", tensor, "'"));
    }
    w.weight_map_.emplace(tensor, it->second);
  }
  if (w.files_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map is empty"));
  }
  return w;
}

std::pair<const SafetensorsFile*, std::string> WeightFiles::Locate(std::string_view name) const {
  if (weight_map_.empty()) {
    if (files_.front()->Find(name) != nullptr) return {files_.front().get(), std::string(name)};
  } else if (auto it = weight_map_.find(name); it != weight_map_.end()) {
    return {it->second, std::string(name)};
  }
  for (const auto& f : files_) {
    auto alias = f->metadata().find(name);
    if (alias != f->metadata().end() && f->Find(alias->second) != nullptr) {
      return {f.get(), alias->second};
    }
  }
  return {nullptr, ""};
}

bool WeightFiles::Contains(std::string_view name) const { return Locate(name).first != nullptr; }

const std::string& WeightFiles::PathOf(std::string_view name) const {
  const SafetensorsFile* file = Locate(name).first;
  return file == nullptr ? source_ : file->path();
}

absl::StatusOr<Tensor> WeightFiles::Get(std::string_view name) const {
  auto [file, stored] = Locate(name);
  if (file == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("tensor '", std::string(name), "' not found in ", source_));
  }
  return file->GetTensor(stored);
}

absl::StatusOr<WeightFiles::Stored> WeightFiles::GetStored(std::string_view name) const {
  auto [file, stored] = Locate(name);
  if (file == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("tensor '", std::string(name), "' not found in ", source_));
  }
  const SafetensorsEntry* e = file->Find(stored);
  return Stored{e, file->DataOf(*e)};
}

}  // namespace ptxserve
