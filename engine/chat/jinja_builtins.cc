#include "engine/chat/jinja_builtins.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ptxserve::jinja {
namespace {

using K = Value::Kind;

// Argument `i` (positional) or `name` (keyword), or `fallback`.
Value Arg(const Args& args, const Kwargs& kwargs, size_t i, const char* name,
          Value fallback = Value()) {
  if (i < args.size()) return args[i];
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  return fallback;
}

const std::string& Str(const Value& v, const char* what) {
  if (v.kind != K::kString) {
    throw TemplateError(absl::StrCat(what, " expects a string, got ", v.TypeName()));
  }
  return v.s;
}

// Iterating a value as Python does: a list's items, a dict's keys, a string's
// characters; Undefined is empty.
List Items(const Value& v) {
  switch (v.kind) {
    case K::kList:
      return *v.list;
    case K::kDict: {
      List keys;
      for (const auto& [k, _] : *v.dict) keys.push_back(Value::Str(k));
      return keys;
    }
    case K::kString: {
      List chars;
      for (size_t i = 0; i < v.s.size();) {
        size_t n = 1;
        const unsigned char c = v.s[i];
        if (c >= 0xF0)
          n = 4;
        else if (c >= 0xE0)
          n = 3;
        else if (c >= 0xC0)
          n = 2;
        chars.push_back(Value::Str(v.s.substr(i, n)));
        i += n;
      }
      return chars;
    }
    case K::kUndefined:
      return {};
    default:
      throw TemplateError(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::string set = chars.kind == K::kString ? chars.s : kPySpace;
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && set.find(s[b]) != std::string::npos) ++b;
  }
  if (right) {
    while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
  }
  return s.substr(b, e - b);
}

int Upper(int c) { return std::toupper(c); }
int Lower(int c) { return std::tolower(c); }

std::string MapChars(std::string s, int (*f)(int)) {
  for (char& c : s) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

std::string Title(std::string s) {
  bool start = true;
  for (char& c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
    start = !std::isalpha(u);
  }
  return s;
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out += s.substr(pos, at - pos) + to;
    pos = at + from.size();
  }
  return out + s.substr(pos);
}

int64_t Utf8Length(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

int64_t Length(const Value& v) {
  switch (v.kind) {
    case K::kString:
      return Utf8Length(v.s);
    case K::kList:
      return static_cast<int64_t>(v.list->size());
    case K::kDict:
      return static_cast<int64_t>(v.dict->size());
    case K::kUndefined:
      return 0;
    default:
      throw TemplateError(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

Value StringMethod(const std::string& s, const std::string& name, const Args& a, const Kwargs& kw) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value::Str(Strip(s, Arg(a, kw, 0, "chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "upper") return Value::Str(MapChars(s, Upper));
  if (name == "lower") return Value::Str(MapChars(s, Lower));
  if (name == "title") return Value::Str(Title(s));
  if (name == "capitalize") {
    std::string out = MapChars(s, Lower);
    if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
    return Value::Str(out);
  }
  if (name == "startswith" || name == "endswith") {
    const Value p = Arg(a, kw, 0, "prefix");
    List options = p.kind == K::kList ? *p.list : List{p};
    for (const Value& o : options) {
      const std::string& x = Str(o, name.c_str());
      const bool hit = name == "startswith" ? s.compare(0, x.size(), x) == 0
                                            : s.size() >= x.size() &&
                                                  s.compare(s.size() - x.size(), x.size(), x) == 0;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "replace") {
    const Value count = Arg(a, kw, 2, "count", Value::Int(-1));
    return Value::Str(Replace(s, Str(Arg(a, kw, 0, "old"), "replace"),
                              Str(Arg(a, kw, 1, "new"), "replace"), count.i));
  }
  if (name == "split") {
    const Value sep = Arg(a, kw, 0, "sep", Value::None());
    const int64_t max = Arg(a, kw, 1, "maxsplit", Value::Int(-1)).i;
    List parts;
    if (sep.kind != K::kString) {  // runs of whitespace, no empty parts
      size_t i = 0;
      int64_t n = 0;
      while (true) {
        i = s.find_first_not_of(kPySpace, i);
        if (i == std::string::npos) break;
        if (max >= 0 && n == max) {
          parts.push_back(Value::Str(Strip(s.substr(i), Value(), false, true)));
          break;
        }
        size_t j = s.find_first_of(kPySpace, i);
        parts.push_back(
            Value::Str(s.substr(i, j == std::string::npos ? std::string::npos : j - i)));
        ++n;
        if (j == std::string::npos) break;
        i = j;
      }
    } else {
      if (sep.s.empty()) throw TemplateError("empty separator");
      size_t pos = 0;
      for (int64_t n = 0; max < 0 || n < max; ++n) {
        const size_t at = s.find(sep.s, pos);
        if (at == std::string::npos) break;
        parts.push_back(Value::Str(s.substr(pos, at - pos)));
        pos = at + sep.s.size();
      }
      parts.push_back(Value::Str(s.substr(pos)));
    }
    return Value::MakeList(std::move(parts));
  }
  if (name == "find") {
    const size_t at = s.find(Str(Arg(a, kw, 0, "sub"), "find"));
    return Value::Int(at == std::string::npos ? -1 : static_cast<int64_t>(at));
  }
  if (name == "count") {
    const std::string& sub = Str(Arg(a, kw, 0, "sub"), "count");
    int64_t n = 0;
    for (size_t at = s.find(sub); !sub.empty() && at != std::string::npos;
         at = s.find(sub, at + sub.size()))
      ++n;
    return Value::Int(n);
  }
  if (name == "join") {
    std::vector<std::string> parts;
    for (const Value& v : Items(Arg(a, kw, 0, "iterable"))) parts.push_back(Str(v, "join"));
    return Value::Str(absl::StrJoin(parts, s));
  }
  throw TemplateError(absl::StrCat("'str' object has no attribute '", name, "'"));
}

Value DictMethod(const Value& d, const std::string& name, const Args& a, const Kwargs& kw) {
  if (name == "items") {
    List out;
    for (const auto& [k, v] : *d.dict) out.push_back(Value::MakeList({Value::Str(k), v}));
    return Value::MakeList(std::move(out));
  }
  if (name == "keys") return Value::MakeList(Items(d));
  if (name == "values") {
    List out;
    for (const auto& [_, v] : *d.dict) out.push_back(v);
    return Value::MakeList(std::move(out));
  }
  // get
  const Value v = GetItem(d, Arg(a, kw, 0, "key"));
  return v.defined() ? v : Arg(a, kw, 1, "default", Value::None());
}

bool IsDictMethod(const std::string& name) {
  return name == "items" || name == "keys" || name == "values" || name == "get";
}

const std::set<std::string>& StringMethods() {
  static const std::set<std::string> kNames = {
      "strip",      "lstrip",   "rstrip",  "upper", "lower", "title", "capitalize",
      "startswith", "endswith", "replace", "split", "find",  "count", "join"};
  return kNames;
}

// `select`/`reject` and their `attr` forms: keep the items whose (attribute) passes.
Value Select(const Value& input, const Args& args, bool by_attr, bool keep) {
  List out;
  const std::string attr = by_attr ? Str(args.empty() ? Value() : args[0], "selectattr") : "";
  const size_t test_at = by_attr ? 1 : 0;
  const std::string test = args.size() > test_at ? Str(args[test_at], "select") : "";
  const Args test_args(args.begin() + std::min(args.size(), test_at + 1), args.end());
  for (const Value& item : Items(input)) {
    const Value subject = by_attr ? GetAttribute(item, attr) : item;
    bool found = true;
    const bool pass = test.empty() ? subject.Truthy() : ApplyTest(test, subject, test_args, &found);
    if (!found) throw TemplateError(absl::StrCat("no test named '", test, "'"));
    if (pass == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

std::string Indent(const std::string& s, const Value& width, bool first, bool blank) {
  const std::string pad =
      width.kind == K::kString ? width.s : std::string(width.defined() ? width.i : 4, ' ');
  std::vector<std::string> lines = absl::StrSplit(s, '\n');
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    if ((i > 0 || first) && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  return out;
}

}  // namespace

Value GetAttribute(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case K::kDict: {
      if (IsDictMethod(name) && !obj.is_namespace) {
        return Value::MakeFunction(
            [obj, name](const Args& a, const Kwargs& kw) { return DictMethod(obj, name, a, kw); });
      }
      return obj.Get(name);
    }
    case K::kString:
      if (StringMethods().count(name)) {
        return Value::MakeFunction([s = obj.s, name](const Args& a, const Kwargs& kw) {
          return StringMethod(s, name, a, kw);
        });
      }
      return Value();
    case K::kUndefined:
      throw TemplateError(absl::StrCat("undefined value has no attribute '", name, "'"));
    default:
      return Value();
  }
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.kind == K::kDict) {
    if (key.kind == K::kString) {
      const Value v = obj.Get(key.s);
      if (v.defined() || obj.is_namespace) return v;
      return IsDictMethod(key.s) ? GetAttribute(obj, key.s) : v;
    }
    return Value();
  }
  if ((obj.kind == K::kList || obj.kind == K::kString) &&
      (key.kind == K::kInt || key.kind == K::kBool)) {
    const List items = obj.kind == K::kList ? *obj.list : Items(obj);
    int64_t i = key.kind == K::kBool ? key.b : key.i;
    if (i < 0) i += static_cast<int64_t>(items.size());
    if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value();
    return items[i];
  }
  if (obj.kind == K::kUndefined) throw TemplateError("undefined value is not subscriptable");
  if (obj.kind == K::kString && key.kind == K::kString) return GetAttribute(obj, key.s);
  return Value();
}

Value GetSlice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  const List items = Items(obj);
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t st = step.defined() && step.kind != K::kNone ? step.i : 1;
  if (st == 0) throw TemplateError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (!v.defined() || v.kind == K::kNone) return dflt;
    int64_t x = v.i;
    if (x < 0) x += n;
    return st > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1), e = clamp(stop, st > 0 ? n : -1);
  List out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(items[i]);
  if (obj.kind == K::kString) {
    std::string s;
    for (const Value& c : out) s += c.s;
    return Value::Str(s);
  }
  return Value::MakeList(std::move(out));
}

bool IsKnownFilter(const std::string& name) {
  static const std::set<std::string> kNames = {
      "trim",       "tojson",  "length", "count", "upper",   "lower", "title",
      "capitalize", "default", "d",      "join",  "first",   "last",  "list",
      "string",     "int",     "float",  "items", "replace", "safe",  "selectattr",
      "rejectattr", "select",  "reject", "map",   "indent",  "round", "abs",
      "unique",     "reverse", "sort",   "min",   "max",     "sum",   "wordcount"};
  return kNames.count(name) > 0;
}

bool IsKnownTest(const std::string& name) {
  static const std::set<std::string> kNames = {
      "defined", "undefined",   "none",    "string",   "number",   "integer",  "float",   "boolean",
      "true",    "false",       "mapping", "iterable", "sequence", "callable", "equalto", "eq",
      "==",      "ne",          "!=",      "lt",       "gt",       "le",       "ge",      "odd",
      "even",    "divisibleby", "in",      "sameas",   "lower",    "upper"};
  return kNames.count(name) > 0;
}

bool ApplyTest(const std::string& name, const Value& v, const Args& args, bool* found) {
  *found = true;
  const Value arg = args.empty() ? Value() : args[0];
  if (name == "defined") return v.defined();
  if (name == "undefined") return !v.defined();
  if (name == "none") return v.kind == K::kNone;
  if (name == "string") return v.kind == K::kString;
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == K::kInt;
  if (name == "float") return v.kind == K::kFloat;
  if (name == "boolean") return v.kind == K::kBool;
  if (name == "true") return v.kind == K::kBool && v.b;
  if (name == "false") return v.kind == K::kBool && !v.b;
  if (name == "mapping") return v.kind == K::kDict;
  if (name == "iterable")
    return v.kind == K::kList || v.kind == K::kDict || v.kind == K::kString || !v.defined();
  if (name == "sequence") return v.kind == K::kList || v.kind == K::kDict || v.kind == K::kString;
  if (name == "callable") return v.kind == K::kFunction;
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return Equals(v, arg);
  if (name == "ne" || name == "!=") return !Equals(v, arg);
  if (name == "lt") return Less(v, arg);
  if (name == "gt") return Less(arg, v);
  if (name == "le") return !Less(arg, v);
  if (name == "ge") return !Less(v, arg);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind != K::kInt) throw TemplateError(absl::StrCat("test '", name, "' needs an integer"));
    if (name == "divisibleby") return arg.i != 0 && v.i % arg.i == 0;
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "in") {
    for (const Value& x : Items(arg)) {
      if (Equals(x, v)) return true;
    }
    return arg.kind == K::kString && v.kind == K::kString && arg.s.find(v.s) != std::string::npos;
  }
  if (name == "lower" || name == "upper") {
    const std::string& s = Str(v, name.c_str());
    return s == MapChars(s, name == "lower" ? Lower : Upper);
  }
  *found = false;
  return false;
}

Value ApplyFilter(const std::string& name, const Value& v, const Args& a, const Kwargs& kw,
                  bool* found) {
  *found = true;
  if (name == "safe") return v;
  if (name == "trim") return Value::Str(Strip(Str(v, "trim"), Arg(a, kw, 0, "chars"), true, true));
  if (name == "tojson") {
    // Hugging Face's signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
    // sort_keys=False); ensure_ascii is not supported (the templates leave it off).
    if (Arg(a, kw, 0, "ensure_ascii").Truthy())
      throw TemplateError("tojson: ensure_ascii is not supported");
    JsonStyle style;
    const Value indent = Arg(a, kw, 1, "indent", Value::None());
    if (indent.kind == K::kInt) style.indent = static_cast<int>(indent.i);
    const Value seps = Arg(a, kw, 2, "separators", Value::None());
    if (seps.kind == K::kList && seps.list->size() == 2 && (*seps.list)[0].kind == K::kString &&
        (*seps.list)[1].kind == K::kString) {
      style.item_sep = (*seps.list)[0].s.c_str();
      style.key_sep = (*seps.list)[1].s.c_str();
    }
    style.sort_keys = Arg(a, kw, 3, "sort_keys", Value::Bool(false)).Truthy();
    return Value::Str(ToJson(v, style));
  }
  if (name == "length" || name == "count") return Value::Int(Length(v));
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return StringMethod(ToStr(v), name, {}, {});
  }
  if (name == "default" || name == "d") {
    const bool boolean = Arg(a, kw, 1, "boolean", Value::Bool(false)).Truthy();
    const bool use_default = boolean ? !v.Truthy() : !v.defined();
    return use_default ? Arg(a, kw, 0, "default_value", Value::Str("")) : v;
  }
  if (name == "join") {
    const Value attr = Arg(a, kw, 1, "attribute");
    std::vector<std::string> parts;
    for (const Value& x : Items(v))
      parts.push_back(ToStr(attr.defined() ? GetAttribute(x, ToStr(attr)) : x));
    return Value::Str(absl::StrJoin(parts, ToStr(Arg(a, kw, 0, "d", Value::Str("")))));
  }
  if (name == "first" || name == "last") {
    const List items = Items(v);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::MakeList(Items(v));
  if (name == "string") return Value::Str(ToStr(v));
  if (name == "int") {
    if (v.is_number()) return Value::Int(static_cast<int64_t>(v.number()));
    int64_t x = 0;
    if (v.kind == K::kString && absl::SimpleAtoi(Strip(v.s, Value(), true, true), &x))
      return Value::Int(x);
    return Arg(a, kw, 0, "default", Value::Int(0));
  }
  if (name == "float") {
    if (v.is_number()) return Value::Float(v.number());
    double x = 0;
    if (v.kind == K::kString && absl::SimpleAtod(v.s, &x)) return Value::Float(x);
    return Arg(a, kw, 0, "default", Value::Float(0));
  }
  if (name == "items") {
    if (v.kind != K::kDict) return Value::MakeList({});
    return DictMethod(v, "items", {}, {});
  }
  if (name == "replace") {
    return Value::Str(Replace(ToStr(v), ToStr(Arg(a, kw, 0, "old")), ToStr(Arg(a, kw, 1, "new")),
                              Arg(a, kw, 2, "count", Value::Int(-1)).i));
  }
  if (name == "selectattr" || name == "rejectattr") return Select(v, a, true, name == "selectattr");
  if (name == "select" || name == "reject") return Select(v, a, false, name == "select");
  if (name == "map") {
    const Value attr = Arg({}, kw, 0, "attribute");
    List out;
    for (const Value& x : Items(v)) {
      if (attr.defined()) {
        const Value got = GetAttribute(x, ToStr(attr));
        out.push_back(got.defined() ? got : Arg({}, kw, 0, "default"));
      } else {
        bool ok = true;
        const std::string filter = Str(a.empty() ? Value() : a[0], "map");
        out.push_back(ApplyFilter(filter, x, Args(a.begin() + 1, a.end()), {}, &ok));
        if (!ok) throw TemplateError(absl::StrCat("no filter named '", filter, "'"));
      }
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "indent") {
    return Value::Str(Indent(ToStr(v), Arg(a, kw, 0, "width", Value::Int(4)),
                             Arg(a, kw, 1, "first").Truthy(), Arg(a, kw, 2, "blank").Truthy()));
  }
  if (name == "round") {
    const double scale =
        std::pow(10.0, static_cast<double>(Arg(a, kw, 0, "precision", Value::Int(0)).i));
    return Value::Float(std::round(v.number() * scale) / scale);
  }
  if (name == "abs")
    return v.kind == K::kInt ? Value::Int(std::llabs(v.i)) : Value::Float(std::fabs(v.number()));
  if (name == "unique") {
    List out;
    for (const Value& x : Items(v)) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return Equals(x, y); }))
        out.push_back(x);
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "reverse") {
    if (v.kind == K::kString) return GetSlice(v, Value(), Value(), Value::Int(-1));
    List items = Items(v);
    std::reverse(items.begin(), items.end());
    return Value::MakeList(std::move(items));
  }
  if (name == "sort" || name == "min" || name == "max") {
    List items = Items(v);
    std::stable_sort(items.begin(), items.end(), Less);
    if (Arg(a, kw, 0, "reverse").Truthy()) std::reverse(items.begin(), items.end());
    if (name == "sort") return Value::MakeList(std::move(items));
    if (items.empty()) return Value();
    return name == "min" ? items.front() : items.back();
  }
  if (name == "sum") {
    Value total = Value::Int(0);
    for (const Value& x : Items(v)) {
      total = (total.kind == K::kFloat || x.kind == K::kFloat)
                  ? Value::Float(total.number() + x.number())
                  : Value::Int(total.i + x.i);
    }
    return total;
  }
  if (name == "wordcount")
    return Value::Int(static_cast<int64_t>(StringMethod(ToStr(v), "split", {}, {}).list->size()));
  *found = false;
  return Value();
}

}  // namespace ptxserve::jinja
