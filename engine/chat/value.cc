#include "engine/chat/value.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "engine/chat/callable.h"
#include "engine/chat/pystr.h"

namespace ptxserve::chat {

const Value* DictData::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void DictData::Set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::List(std::vector<Value> items, bool is_tuple) {
  Value v(Kind::kList);
  v.list_ = std::make_shared<const ListData>(ListData{std::move(items), is_tuple});
  return v;
}

Value Value::Dict(DictData dict) {
  Value v(Kind::kDict);
  v.dict_ = std::make_shared<DictData>(std::move(dict));
  return v;
}

Value Value::Namespace(DictData attrs) {
  Value v(Kind::kNamespace);
  v.dict_ = std::make_shared<DictData>(std::move(attrs));
  return v;
}

Value Value::Function(std::shared_ptr<const Callable> callable) {
  Value v(Kind::kCallable);
  v.callable_ = std::move(callable);
  return v;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !str_.empty();
    case Kind::kList:
      return !list_->items.empty();
    case Kind::kDict:
      return !dict_->items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

namespace {

std::string DictRepr(const DictData& dict) {
  std::string out = "{";
  for (size_t i = 0; i < dict.items.size(); ++i) {
    if (i) out += ", ";
    out += PyRepr(dict.items[i].first) + ": " + dict.items[i].second.Repr();
  }
  return out + "}";
}

}  // namespace

std::string FormatPyFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then CPython's repr layout: positional for
  // 1e-4 <= |d| < 1e16, else scientific with a two-digit minimum exponent.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t epos = sci.find('e');
  const int exp = std::atoi(sci.c_str() + epos + 1);
  std::string mant = sci.substr(0, epos);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ebuf;
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return str_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(int_);
    case Kind::kFloat:
      return FormatPyFloat(float_);
    case Kind::kString:
      return PyRepr(str_);
    case Kind::kList: {
      std::string out = list_->is_tuple ? "(" : "[";
      for (size_t i = 0; i < list_->items.size(); ++i) {
        if (i) out += ", ";
        out += list_->items[i].Repr();
      }
      if (list_->is_tuple && list_->items.size() == 1) out += ",";
      return out + (list_->is_tuple ? ")" : "]");
    }
    case Kind::kDict:
      return DictRepr(*dict_);
    case Kind::kNamespace:
      return "<Namespace " + DictRepr(*dict_) + ">";
    case Kind::kCallable:
      return "<built-in method " + callable_->name + ">";
  }
  return "";
}

std::string Value::TypeName() const {
  // Python's type() name of each Kind, in enum order.
  static constexpr std::string_view kNames[] = {
      "Undefined", "NoneType", "bool", "int",       "float",
      "str",       "list",     "dict", "Namespace", "builtin_function_or_method"};
  static_assert(std::size(kNames) == static_cast<size_t>(Kind::kCallable) + 1);
  if (kind_ == Kind::kList && list_->is_tuple) return "tuple";
  return std::string(kNames[static_cast<size_t>(kind_)]);
}

bool Equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kList: {
      const auto& x = a.list();
      const auto& y = b.list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!Equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case K::kDict: {
      const auto& x = a.dict();
      const auto& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.Find(k);
        if (other == nullptr || !Equals(v, *other)) return false;
      }
      return true;
    }
    case K::kNamespace:
      return &a.namespace_attrs() == &b.namespace_attrs();
    case K::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

bool Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order = code points
  if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equals(x[i], y[i])) return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined()) throw TemplateError(a.undefined_message());
  if (b.is_undefined()) throw TemplateError(b.undefined_message());
  throw TemplateError("'<' not supported between instances of '" + a.TypeName() + "' and '" +
                      b.TypeName() + "'");
}

}  // namespace ptxserve::chat
