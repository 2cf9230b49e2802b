// BPE merging follows the Hugging Face `tokenizers` algorithm exactly (so ids match the
// reference): a min-heap of candidate merges keyed (rank, position) over a doubly linked
// list of symbols, with stale heap entries skipped when popped. That is O(n log n) per
// word, which matters because SentencePiece-style tokenizers have no pre-tokenizer and
// so treat a whole prompt as one word.
#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/log.h"

namespace ptxserve::tok {
namespace {

// Ids past this are taken as a malformed file rather than a reason to allocate gigabytes.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool alive;
};

// (rank, position) packed into one integer so the heap compares with one instruction:
// lowest rank first, then leftmost.
struct Candidate {
  uint64_t key;
  int32_t new_id;
};

struct LaterCandidate {
  bool operator()(const Candidate& a, const Candidate& b) const { return a.key > b.key; }
};

// Splits one merges entry ("a b" or ["a", "b"]) into its two tokens.
absl::Status SplitMerge(const Json& entry, std::string_view origin, const std::string& field,
                        std::string* a, std::string* b) {
  if (entry.is_string()) {
    const auto& s = entry.get_ref<const std::string&>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return FieldError(origin, field,
                        absl::StrCat("\"", s, "\" is not two tokens separated by one space"));
    }
    *a = s.substr(0, space);
    *b = s.substr(space + 1);
    return absl::OkStatus();
  }
  if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
    *a = entry[0].get<std::string>();
    *b = entry[1].get<std::string>();
    return absl::OkStatus();
  }
  return FieldError(origin, field, "expected \"a b\" or [\"a\", \"b\"]");
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::FromJson(const Json& model, std::string_view origin) {
  if (!model.is_object()) return FieldError(origin, "model", "missing or not an object");
  auto type = OptString(model, "type", origin, "model");
  if (!type.ok()) return type.status();
  if (type->has_value() && **type != "BPE") {
    return FieldUnimplemented(origin, "model.type",
                              absl::StrCat("\"", **type, "\" is not supported (only BPE)"));
  }
  BpeModel m;
  const Json* vocab = Member(model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return FieldError(origin, "model.vocab", "missing or not an object of token -> id");
  }
  m.vocab_.reserve(vocab->size());
  for (const auto& [token, id_json] : vocab->items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > kMaxTokenId) {
      return FieldError(origin, absl::StrCat("model.vocab[\"", token, "\"]"),
                        absl::StrCat("id must be an integer in [0, ", kMaxTokenId, "]"));
    }
    const auto id = static_cast<int32_t>(id_json.get<int64_t>());
    m.vocab_.emplace(token, id);
    if (static_cast<size_t>(id) >= m.id_to_token_.size()) m.id_to_token_.resize(id + 1);
    if (m.id_to_token_[id].empty()) m.id_to_token_[id] = token;
  }

  for (const char* unsupported : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto v = OptString(model, unsupported, origin, "model");
    if (!v.ok()) return v.status();
    if (v->has_value() && !(*v)->empty()) {
      return FieldUnimplemented(origin, absl::StrCat("model.", unsupported), "is not supported");
    }
  }
  if (const Json* dropout = Member(model, "dropout");
      dropout != nullptr && (!dropout->is_number() || dropout->get<double>() > 0.0)) {
    return FieldUnimplemented(origin, "model.dropout", "BPE dropout is not supported");
  }
  auto flag = [&](const char* key, bool* out) -> absl::Status {
    auto v = OptBool(model, key, origin, "model");
    if (!v.ok()) return v.status();
    *out = v->value_or(false);
    return absl::OkStatus();
  };
  if (auto s = flag("byte_fallback", &m.byte_fallback_); !s.ok()) return s;
  if (auto s = flag("fuse_unk", &m.fuse_unk_); !s.ok()) return s;
  if (auto s = flag("ignore_merges", &m.ignore_merges_); !s.ok()) return s;

  auto unk = OptString(model, "unk_token", origin, "model");
  if (!unk.ok()) return unk.status();
  if (unk->has_value()) {
    m.unk_id_ = m.TokenToId(**unk);
    if (m.unk_id_ < 0) {
      PTX_LOG(WARNING) << origin << ": model.unk_token \"" << **unk
                       << "\" is not in model.vocab; characters without a token are errors";
    }
  }

  m.all_bytes_ = true;
  for (int b = 0; b < 256; ++b) {
    m.byte_ids_[b] = m.TokenToId(absl::StrFormat("<0x%02X>", b));
    if (m.byte_ids_[b] < 0) m.all_bytes_ = false;
  }

  const Json* merges = Member(model, "merges");
  if (merges == nullptr || !merges->is_array()) {
    return FieldError(origin, "model.merges", "missing or not an array");
  }
  m.merges_.reserve(merges->size());
  std::string a, b;
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string field = absl::StrCat("model.merges[", i, "]");
    if (auto s = SplitMerge((*merges)[i], origin, field, &a, &b); !s.ok()) return s;
    const int32_t ia = m.TokenToId(a);
    const int32_t ib = m.TokenToId(b);
    const int32_t ic = m.TokenToId(a + b);
    for (const auto& [tok, id] : {std::pair{&a, ia}, {&b, ib}}) {
      if (id < 0) {
        return FieldError(origin, field,
                          absl::StrCat("token \"", *tok, "\" is not in model.vocab"));
      }
    }
    if (ic < 0) {
      return FieldError(origin, field,
                        absl::StrCat("merged token \"", a, b, "\" is not in model.vocab"));
    }
    // A repeated pair keeps its last rank, as the reference implementation does.
    m.merges_.insert_or_assign(PairKey(ia, ib), Merge{static_cast<int32_t>(i), ic});
  }
  return m;
}

absl::Status BpeModel::EncodeWord(std::string_view word, size_t offset,
                                  std::vector<int32_t>* out) const {
  if (word.empty()) return absl::OkStatus();
  if (ignore_merges_) {
    if (const int32_t id = TokenToId(word); id >= 0) {
      out->push_back(id);
      return absl::OkStatus();
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  bool pending_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t len =
        std::min(Utf8CharLength(static_cast<unsigned char>(word[i])), word.size() - i);
    const std::string_view ch = word.substr(i, len);
    if (const int32_t id = TokenToId(ch); id >= 0) {
      if (pending_unk) symbols.push_back(unk_id_);
      pending_unk = false;
      symbols.push_back(id);
    } else if (byte_fallback_ && (all_bytes_ || [&] {
                 for (unsigned char c : ch)
                   if (byte_ids_[c] < 0) return false;
                 return true;
               }())) {
      if (pending_unk) symbols.push_back(unk_id_);
      pending_unk = false;
      for (unsigned char c : ch) symbols.push_back(byte_ids_[c]);
    } else if (unk_id_ >= 0) {
      // fuse_unk folds a run of unknown characters into one unk.
      if (pending_unk && !fuse_unk_) symbols.push_back(unk_id_);
      pending_unk = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "character at byte offset ", offset + i,
          " has no token, and the tokenizer has neither byte-fallback tokens nor an unk token"));
    }
    i += len;
  }
  if (pending_unk) symbols.push_back(unk_id_);
  MergeSymbols(&symbols);
  out->insert(out->end(), symbols.begin(), symbols.end());
  return absl::OkStatus();
}

void BpeModel::MergeSymbols(std::vector<int32_t>* ids) const {
  const auto n = static_cast<int32_t>(ids->size());
  if (n < 2 || merges_.empty()) return;
  std::vector<Symbol> sym(n);
  for (int32_t i = 0; i < n; ++i) sym[i] = Symbol{(*ids)[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  std::vector<Candidate> heap_storage;
  heap_storage.reserve(n);
  std::priority_queue<Candidate, std::vector<Candidate>, LaterCandidate> heap(
      LaterCandidate{}, std::move(heap_storage));
  auto push_pair = [&](int32_t pos) {
    const int32_t next = sym[pos].next;
    if (next < 0) return;
    auto it = merges_.find(PairKey(sym[pos].id, sym[next].id));
    if (it != merges_.end()) {
      heap.push(
          Candidate{(static_cast<uint64_t>(it->second.rank) << 32) | static_cast<uint32_t>(pos),
                    it->second.new_id});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const auto pos = static_cast<int32_t>(top.key & 0xFFFFFFFFu);
    Symbol& left = sym[pos];
    if (!left.alive || left.next < 0) continue;
    // Stale entry: one side was merged away since it was pushed.
    auto it = merges_.find(PairKey(left.id, sym[left.next].id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    Symbol& right = sym[left.next];
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(pos);
  }
  ids->clear();
  for (int32_t i = 0; i >= 0; i = sym[i].next) ids->push_back(sym[i].id);
}

}  // namespace ptxserve::tok
