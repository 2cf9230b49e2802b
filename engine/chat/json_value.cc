#include "engine/chat/json_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "engine/chat/pystr.h"

namespace ptxserve::chat {
namespace {

void AppendEscape(unsigned code, std::string* out) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\u%04x", code & 0xffff);
  out->append(buf);
}

// json.encoder's py_encode_basestring(_ascii).
void DumpString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (char32_t c : DecodeUtf8(s)) {
    static constexpr std::string_view kShort = "\"\\\n\r\t\b\f", kLetter = "\"\\nrtbf";
    if (const size_t k = c < 0x80 ? kShort.find(static_cast<char>(c)) : std::string_view::npos;
        k != std::string_view::npos) {
      out->push_back('\\');
      out->push_back(kLetter[k]);
      continue;
    }
    if (c < 0x20) {
      AppendEscape(c, out);
    } else if (ensure_ascii && c >= 0x80) {
      if (c >= 0x10000) {
        const unsigned v = c - 0x10000;
        AppendEscape(0xd800 | (v >> 10), out);
        AppendEscape(0xdc00 | (v & 0x3ff), out);
      } else {
        AppendEscape(c, out);
      }
    } else {
      AppendUtf8(c, out);
    }
  }
  out->push_back('"');
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& options) : options_(options) {
    if (options.separators) {
      item_sep_ = options.separators->first;
      key_sep_ = options.separators->second;
    } else {
      item_sep_ = options.indent ? "," : ", ";
      key_sep_ = ": ";
    }
  }

  void Dump(const Value& v, int level, std::string* out) {
    using K = Value::Kind;
    switch (v.kind()) {
      case K::kNone:
        out->append("null");
        return;
      case K::kBool:
        out->append(v.as_bool() ? "true" : "false");
        return;
      case K::kInt:
        out->append(absl::StrCat(v.as_int()));
        return;
      case K::kFloat: {
        const double d = v.as_double();
        if (std::isnan(d)) {
          out->append("NaN");
        } else if (std::isinf(d)) {
          out->append(d < 0 ? "-Infinity" : "Infinity");
        } else {
          out->append(FormatPyFloat(d));
        }
        return;
      }
      case K::kString:
        DumpString(v.str(), options_.ensure_ascii, out);
        return;
      case K::kList:
        DumpList(v.list().items, level, out);
        return;
      case K::kDict:
        DumpDict(v.dict(), level, out);
        return;
      default:
        throw TemplateError("Object of type " + v.TypeName() + " is not JSON serializable");
    }
  }

 private:
  // Opens a container: returns the separator between its items.
  std::string Open(char bracket, int level, std::string* out) {
    out->push_back(bracket);
    if (!options_.indent) return item_sep_;
    const std::string newline = "\n" + Indent(level + 1);
    out->append(newline);
    return item_sep_ + newline;
  }
  void Close(char bracket, int level, std::string* out) {
    if (options_.indent) out->append("\n" + Indent(level));
    out->push_back(bracket);
  }
  std::string Indent(int level) const {
    std::string s;
    for (int i = 0; i < level; ++i) s += *options_.indent;
    return s;
  }

  void DumpList(const std::vector<Value>& items, int level, std::string* out) {
    if (items.empty()) {
      out->append("[]");
      return;
    }
    const std::string sep = Open('[', level, out);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out->append(sep);
      Dump(items[i], level + 1, out);
    }
    Close(']', level, out);
  }

  void DumpDict(const DictData& dict, int level, std::string* out) {
    if (dict.items.empty()) {
      out->append("{}");
      return;
    }
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& item : dict.items) items.push_back(&item);
    if (options_.sort_keys) {
      std::stable_sort(items.begin(), items.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    const std::string sep = Open('{', level, out);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out->append(sep);
      DumpString(items[i]->first, options_.ensure_ascii, out);
      out->append(key_sep_);
      Dump(items[i]->second, level + 1, out);
    }
    Close('}', level, out);
  }

  const JsonDumpOptions& options_;
  std::string item_sep_;
  std::string key_sep_;
};

}  // namespace

std::string PyJsonDumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  Dumper(options).Dump(value, 0, &out);
  return out;
}

}  // namespace ptxserve::chat
