// tokenizer_config.json's add_bos_token / add_eos_token override the template, as
// transformers' Llama tokenizers do when they rebuild the post-processor from them.
#include "engine/tokenizer/special_tokens.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/util/log.h"
#include "engine/util/status_macros.h"

namespace ptxserve::tok {
namespace {

struct Template {
  bool present = false;
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

absl::Status ParseProcessor(const Json& pp, std::string_view origin, const std::string& path,
                            const std::function<int32_t(std::string_view)>& token_to_id,
                            Template* t) {
  PTX_ASSIGN_OR_RETURN(auto type, ComponentType(pp, origin, path));
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (type == "Sequence") {
    return ParseSequence(pp, "processors", origin, path,
                         [&](const Json& item, const std::string& item_path) {
                           return ParseProcessor(item, origin, item_path, token_to_id, t);
                         });
  }
  if (type != "TemplateProcessing") {
    return FieldUnimplemented(origin, path + ".type",
                              absl::StrCat("post-processor \"", type, "\" is not supported"));
  }
  const std::string single_path = path + ".single";
  const Json* single = Member(pp, "single");
  if (single == nullptr) return FieldError(origin, single_path, "missing");
  // Items are {"SpecialToken": {"id": name}} / {"Sequence": {"id": "A"}}, or the
  // string form "<s> $A </s>".
  std::vector<std::pair<bool, std::string>> items;  // (is_sequence, special name)
  if (single->is_string()) {
    const std::vector<std::string> pieces =
        absl::StrSplit(single->get_ref<const std::string&>(), ' ', absl::SkipEmpty());
    for (const std::string& piece : pieces) {
      const std::string name = piece.substr(0, piece.rfind(':'));
      const bool is_seq = name.starts_with("$");
      items.emplace_back(is_seq, is_seq ? std::string() : name);
    }
  } else if (single->is_array()) {
    for (size_t i = 0; i < single->size(); ++i) {
      const Json& item = (*single)[i];
      const std::string item_path = absl::StrCat(single_path, "[", i, "]");
      if (Member(item, "Sequence") != nullptr) {
        items.emplace_back(true, "");
      } else if (const Json* st = Member(item, "SpecialToken"); st != nullptr) {
        PTX_ASSIGN_OR_RETURN(auto id, ReqString(*st, "id", origin, item_path + ".SpecialToken"));
        items.emplace_back(false, id);
      } else {
        return FieldError(origin, item_path, "expected SpecialToken or Sequence");
      }
    }
  } else {
    return FieldError(origin, single_path, "expected an array or a string");
  }
  t->present = true;
  bool after_sequence = false;
  for (const auto& [is_seq, name] : items) {
    if (is_seq) {
      after_sequence = true;
      continue;
    }
    std::vector<int32_t> ids;
    const Json* entry = Member(pp, "special_tokens");
    if (entry != nullptr) entry = Member(*entry, name);
    if (const Json* list = entry == nullptr ? nullptr : Member(*entry, "ids");
        list != nullptr && list->is_array()) {
      for (const Json& id : *list) {
        if (!id.is_number_integer()) {
          return FieldError(origin, absl::StrCat(path, ".special_tokens[\"", name, "\"].ids"),
                            "expected integers");
        }
        ids.push_back(id.get<int32_t>());
      }
    } else {
      const int32_t id = token_to_id(name);
      if (id < 0) {
        return FieldError(origin, single_path,
                          absl::StrCat("special token \"", name, "\" is not in the vocabulary"));
      }
      ids.push_back(id);
    }
    auto& dst = after_sequence ? t->suffix : t->prefix;
    dst.insert(dst.end(), ids.begin(), ids.end());
  }
  return absl::OkStatus();
}

// bos_token / eos_token: a string, {"content": string}, or null.
absl::StatusOr<std::optional<std::string>> TokenName(const Json& config, std::string_view key,
                                                     std::string_view origin) {
  const Json* v = Member(config, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return OptString(*v, "content", origin, key);
  return FieldError(origin, key, "expected a string or {\"content\": ...}");
}

}  // namespace

absl::StatusOr<SpecialTokens> ResolveSpecialTokens(
    const Json* post_processor, const Json* config, bool sentencepiece_kind,
    const std::function<int32_t(std::string_view)>& token_to_id, std::string_view tok_origin,
    std::string_view config_origin) {
  Template t;
  if (post_processor != nullptr) {
    if (auto s = ParseProcessor(*post_processor, tok_origin, "post_processor", token_to_id, &t);
        !s.ok()) {
      return s;
    }
  }
  const Json empty = Json::object();
  const Json& cfg = config != nullptr ? *config : empty;
  SpecialTokens out;
  auto resolve = [&](std::string_view key, int32_t* id) -> absl::Status {
    PTX_ASSIGN_OR_RETURN(auto name, TokenName(cfg, key, config_origin));
    if (!name.has_value()) return absl::OkStatus();
    *id = token_to_id(*name);
    if (*id < 0) {
      PTX_LOG(WARNING) << config_origin << ": " << key << " \"" << *name
                       << "\" is not in the vocabulary; ignored";
    }
    return absl::OkStatus();
  };
  PTX_RETURN_IF_ERROR(resolve("bos_token", &out.bos_id));
  PTX_RETURN_IF_ERROR(resolve("eos_token", &out.eos_id));
  if (out.bos_id < 0 && !t.prefix.empty()) out.bos_id = t.prefix.front();

  PTX_ASSIGN_OR_RETURN(auto add_bos, OptBool(cfg, "add_bos_token", config_origin, ""));
  PTX_ASSIGN_OR_RETURN(auto add_eos, OptBool(cfg, "add_eos_token", config_origin, ""));
  // add_<x>_token decides when set (true needs the token); unset, the post-processor's
  // template does, and without one `fallback` adds the token when it exists.
  auto affix = [&](std::optional<bool> add, std::string_view x, int32_t id,
                   const std::vector<int32_t>& from_template, bool fallback,
                   std::vector<int32_t>* ids) -> absl::Status {
    if (!add.has_value()) {
      if (t.present) {
        *ids = from_template;
      } else if (fallback && id >= 0) {
        *ids = {id};
      }
      return absl::OkStatus();
    }
    if (!*add) return absl::OkStatus();
    if (id < 0) {
      return FieldError(config_origin, absl::StrCat(Sv(x), "_token"),
                        absl::StrCat("add_", Sv(x), "_token is true but there is no ",
                                     absl::AsciiStrToUpper(Sv(x)), " token in the vocabulary"));
    }
    *ids = {id};
    return absl::OkStatus();
  };
  PTX_RETURN_IF_ERROR(affix(add_bos, "bos", out.bos_id, t.prefix, sentencepiece_kind, &out.prefix));
  PTX_RETURN_IF_ERROR(affix(add_eos, "eos", out.eos_id, t.suffix, false, &out.suffix));
  return out;
}

}  // namespace ptxserve::tok
