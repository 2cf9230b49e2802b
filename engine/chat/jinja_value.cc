#include "engine/chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace ptxserve::jinja {
namespace {

void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void AppendJson(const Value& v, const JsonStyle& style, int depth, std::string* out) {
  using K = Value::Kind;
  const int indent = style.indent;
  const std::string pad = indent < 0 ? "" : "\n" + std::string((depth + 1) * indent, ' ');
  const std::string close_pad = indent < 0 ? "" : "\n" + std::string(depth * indent, ' ');
  const char* item_sep = style.item_sep ? style.item_sep : indent < 0 ? ", " : ",";
  const char* key_sep = style.key_sep ? style.key_sep : ": ";
  switch (v.kind) {
    case K::kUndefined:
    case K::kNone:
      *out += "null";
      return;
    case K::kBool:
      *out += v.b ? "true" : "false";
      return;
    case K::kInt:
      *out += std::to_string(v.i);
      return;
    case K::kFloat:
      if (std::isnan(v.f)) {
        *out += "NaN";
      } else if (std::isinf(v.f)) {
        *out += v.f > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FloatRepr(v.f);
      }
      return;
    case K::kString:
      AppendJsonString(v.s, out);
      return;
    case K::kList:
      if (v.list->empty()) {
        *out += "[]";
        return;
      }
      out->push_back('[');
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) *out += item_sep;
        *out += pad;
        AppendJson((*v.list)[i], style, depth + 1, out);
      }
      *out += close_pad;
      out->push_back(']');
      return;
    case K::kDict: {
      if (v.dict->empty()) {
        *out += "{}";
        return;
      }
      Dict items = *v.dict;
      if (style.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += item_sep;
        *out += pad;
        AppendJsonString(items[i].first, out);
        *out += key_sep;
        AppendJson(items[i].second, style, depth + 1, out);
      }
      *out += close_pad;
      out->push_back('}');
      return;
    }
    case K::kFunction:
      throw TemplateError("Object of type function is not JSON serializable");
  }
}

std::string ReprString(const std::string& s) {
  // Python picks single quotes unless the text has one and no double quote.
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == q) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

}  // namespace

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Int(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(FromJson(e));
      return MakeList(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.emplace_back(k, FromJson(e));
      return MakeDict(std::move(d));
    }
    default:
      return Value();
  }
}

bool Value::Truthy() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b;
    case Kind::kInt:
      return i != 0;
    case Kind::kFloat:
      return f != 0;
    case Kind::kString:
      return !s.empty();
    case Kind::kList:
      return !list->empty();
    case Kind::kDict:
      return is_namespace || !dict->empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

Value Value::Get(const std::string& key) const {
  if (kind != Kind::kDict) return Value();
  for (const auto& [k, v] : *dict) {
    if (k == key) return v;
  }
  return Value();
}

const char* Value::TypeName() const {
  switch (kind) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return is_namespace ? "Namespace" : "dict";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

bool Equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind == K::kFloat || b.kind == K::kFloat) return a.number() == b.number();
    return (a.kind == K::kBool ? a.b : a.i) == (b.kind == K::kBool ? b.b : b.i);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.s == b.s;
    case K::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i) {
        if (!Equals((*a.list)[i], (*b.list)[i])) return false;
      }
      return true;
    case K::kDict:
      if (a.dict == b.dict) return true;
      if (a.is_namespace || b.is_namespace || a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value other = b.Get(k);
        if (!other.defined() || !Equals(v, other)) return false;
      }
      return true;
    default:
      return a.fn == b.fn;
  }
}

bool Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.number() < b.number();
  if (a.kind == Value::Kind::kString && b.kind == Value::Kind::kString) return a.s < b.s;
  if (a.kind == Value::Kind::kList && b.kind == Value::Kind::kList) {
    return std::lexicographical_compare(a.list->begin(), a.list->end(), b.list->begin(),
                                        b.list->end(), Less);
  }
  throw TemplateError(absl::StrCat("'<' not supported between instances of '", a.TypeName(),
                                   "' and '", b.TypeName(), "'"));
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The shortest round-tripping digits, laid out as Python's repr does: positional for
  // exponents in [-4, 16), scientific (at least two exponent digits) otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mantissa[0] == '-';
  if (neg) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += ebuf;
  }
  return neg ? "-" + out : out;
}

std::string ToStr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.s;
    default:
      return Repr(v);
  }
}

std::string Repr(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::kUndefined:
      return "";
    case K::kNone:
      return "None";
    case K::kBool:
      return v.b ? "True" : "False";
    case K::kInt:
      return std::to_string(v.i);
    case K::kFloat:
      return FloatRepr(v.f);
    case K::kString:
      return ReprString(v.s);
    case K::kList: {
      std::string out = "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += ", ";
        out += Repr((*v.list)[i]);
      }
      return out + "]";
    }
    case K::kDict: {
      if (v.is_namespace) return "<Namespace>";
      std::string out = "{";
      for (size_t i = 0; i < v.dict->size(); ++i) {
        if (i) out += ", ";
        out += ReprString((*v.dict)[i].first) + ": " + Repr((*v.dict)[i].second);
      }
      return out + "}";
    }
    case K::kFunction:
      return "<function>";
  }
  return "";
}

std::string ToJson(const Value& v, const JsonStyle& style) {
  std::string out;
  AppendJson(v, style, 0, &out);
  return out;
}

}  // namespace ptxserve::jinja
