#include "engine/model/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace ptxserve {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Tensors in the order their bytes are laid out. The reference implementation orders by
// dtype alignment, then name; for the single-dtype files we write, that is name order, and
// name order is what keeps the output independent of the caller's vector order. (Mixed
// files, quantized checkpoints, are read through memcpy or aligned copies, so their
// tensors need no alignment.)
std::vector<const TensorToWrite*> LayoutOrder(const std::vector<TensorToWrite>& tensors) {
  std::vector<const TensorToWrite*> order;
  order.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
    return a->name < b->name;
  });
  return order;
}

absl::Status WriteAll(std::FILE* f, const void* data, size_t n, const std::string& path,
                      const std::string& what) {
  if (n == 0) return absl::OkStatus();
  if (std::fwrite(data, 1, n, f) != n) {
    return absl::InternalError(
        absl::StrCat(path, ": writing ", what, " failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t TensorToWrite::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::string> SafetensorsHeader(const std::vector<TensorToWrite>& tensors,
                                              const std::map<std::string, std::string>& metadata) {
  // nlohmann::json objects are std::maps, so dump() emits keys sorted bytewise.
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  const std::vector<const TensorToWrite*> order = LayoutOrder(tensors);
  for (size_t i = 0; i < order.size(); ++i) {
    const TensorToWrite& t = *order[i];
    if (t.name.empty() || t.name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat("tensor name '", t.name, "' is not allowed"));
    }
    if (i > 0 && order[i - 1]->name == t.name) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' appears twice"));
    }
    for (int64_t d : t.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' has a negative dimension ", d));
      }
    }
    if (!t.fill && t.bytes.size() != t.nbytes()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has ", t.bytes.size(),
                                                     " bytes, its shape and dtype need ",
                                                     t.nbytes()));
    }
    const uint64_t end = offset + t.nbytes();
    const std::string_view dtype =
        t.raw_dtype.empty() ? SpellingOf(t.dtype).safetensors : std::string_view(t.raw_dtype);
    header[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  return header.dump();
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> header = SafetensorsHeader(tensors, metadata);
  if (!header.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", header.status().message()));
  }
  // Padding the header keeps the data section 8-byte aligned (the 8-byte length prefix
  // already is), as the reference writer does.
  header->append((8 - header->size() % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
  if (!f) {
    return absl::InternalError(
        absl::StrCat(tmp, ": cannot open for writing: ", std::strerror(errno)));
  }
  auto fail = [&](absl::Status s) {
    f.reset();
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return s;
  };

  uint8_t len[8];
  const uint64_t n = header->size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  if (absl::Status s = WriteAll(f.get(), len, 8, tmp, "the header length"); !s.ok()) {
    return fail(s);
  }
  if (absl::Status s = WriteAll(f.get(), header->data(), header->size(), tmp, "the header");
      !s.ok()) {
    return fail(s);
  }

  std::vector<uint8_t> buffer;
  for (const TensorToWrite* t : LayoutOrder(tensors)) {
    const std::string what = absl::StrCat("tensor '", t->name, "'");
    if (t->fill) {
      // One tensor's buffer at a time: the caller generates it just before it is needed.
      buffer.assign(t->nbytes(), 0);
      if (absl::Status s = t->fill(std::span<uint8_t>(buffer)); !s.ok()) {
        return fail(
            absl::Status(s.code(), absl::StrCat(path, ": filling ", what, ": ", s.message())));
      }
      if (absl::Status s = WriteAll(f.get(), buffer.data(), buffer.size(), tmp, what); !s.ok()) {
        return fail(s);
      }
    } else if (absl::Status s = WriteAll(f.get(), t->bytes.data(), t->bytes.size(), tmp, what);
               !s.ok()) {
      return fail(s);
    }
  }
  buffer = {};
  if (std::fflush(f.get()) != 0 || std::ferror(f.get())) {
    return fail(absl::InternalError(absl::StrCat(tmp, ": flush failed: ", std::strerror(errno))));
  }
  if (std::fclose(f.release()) != 0) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return absl::InternalError(absl::StrCat(tmp, ": close failed: ", std::strerror(errno)));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    return absl::InternalError(absl::StrCat(path, ": rename from ", tmp, " failed: ", why));
  }
  return absl::OkStatus();
}

}  // namespace ptxserve
