// The Python str/dict/list methods chat templates call (`content.strip()`,
// `tool.items()`, `message.get('x')`), and the globals.
#include <time.h>

#include <chrono>
#include <string>

#include "engine/chat/builtins.h"
#include "engine/chat/callable.h"
#include "engine/chat/operators.h"
#include "engine/chat/pystr.h"

namespace ptxserve::chat {
namespace {

constexpr std::string_view kStrMethods[] = {"strip",    "lstrip", "rstrip", "split", "startswith",
                                            "endswith", "upper",  "lower",  "title", "capitalize",
                                            "replace",  "find",   "count",  "join",  "splitlines",
                                            "isdigit",  "isspace"};
constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values"};
constexpr std::string_view kListMethods[] = {"index", "count"};
constexpr std::string_view kUnsupportedMethods[] = {
    "format",       "format_map", "zfill",    "center",     "ljust",     "rjust",
    "partition",    "rpartition", "rsplit",   "rfind",      "rindex",    "removeprefix",
    "removesuffix", "casefold",   "swapcase", "expandtabs", "encode",    "isalpha",
    "isalnum",      "isupper",    "islower",  "istitle",    "isnumeric", "isdecimal",
    "translate",    "append",     "extend",   "insert",     "pop",       "remove",
    "sort",         "reverse",    "update",   "setdefault", "popitem",   "clear",
    "copy",         "cycle",      "changed"};
constexpr std::string_view kUnsupportedGlobals[] = {"cycler", "joiner", "lipsum", "caller"};
constexpr std::string_view kGlobals[] = {"raise_exception", "strftime_now", "namespace", "range",
                                         "dict"};

template <size_t N>
bool In(const std::string_view (&names)[N], std::string_view name) {
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

const std::string& StrArg(const CallArgs& args, size_t index, std::string_view name,
                          std::string_view method) {
  const Value* v = args.Get(index, name);
  if (v == nullptr)
    throw TemplateError(std::string(method) + "() missing argument '" + std::string(name) + "'");
  if (!v->is_string()) {
    throw TemplateError(std::string(method) + "() argument must be str, not " + v->TypeName());
  }
  return v->str();
}

std::optional<std::string> OptionalStr(const CallArgs& args, size_t index, std::string_view name) {
  const Value* v = args.Get(index, name);
  if (v == nullptr || v->is_none()) return std::nullopt;
  if (!v->is_string()) throw TemplateError("argument must be str or None, not " + v->TypeName());
  return v->str();
}

Value StringList(std::vector<std::string> parts) {
  std::vector<Value> items;
  for (auto& p : parts) items.push_back(Value::String(std::move(p)));
  return Value::List(std::move(items));
}

// startswith/endswith take a str or a tuple of str.
bool AffixMatch(const std::string& s, const Value& affix, bool prefix) {
  if (affix.is_list()) {
    for (const Value& a : affix.list().items) {
      if (AffixMatch(s, a, prefix)) return true;
    }
    return false;
  }
  if (!affix.is_string())
    throw TemplateError("startswith/endswith first arg must be str or a tuple of str");
  const std::string& a = affix.str();
  if (a.size() > s.size()) return false;
  return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
}

Value StrMethod(Evaluator& ev, const std::string& s, const std::string& name,
                const CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const StripSide side = name[0] == 'l'   ? StripSide::kLeft
                           : name[0] == 'r' ? StripSide::kRight
                                            : StripSide::kBoth;
    return Value::String(PyStrip(s, OptionalStr(args, 0, "chars"), side));
  }
  if (name == "split") {
    const Value maxsplit = args.GetOr(1, "maxsplit", Value::Int(-1));
    return StringList(PySplit(s, OptionalStr(args, 0, "sep"), maxsplit.as_int()));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* affix = args.Get(0, "prefix");
    if (affix == nullptr) throw TemplateError(name + "() takes at least 1 argument (0 given)");
    return Value::Bool(AffixMatch(s, *affix, name == "startswith"));
  }
  if (name == "upper") return Value::String(PyUpperStr(s));
  if (name == "lower") return Value::String(PyLowerStr(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "replace") {
    const Value count = args.GetOr(2, "count", Value::Int(-1));
    return Value::String(
        PyReplace(s, StrArg(args, 0, "old", name), StrArg(args, 1, "new", name), count.as_int()));
  }
  if (name == "find") return Value::Int(PyFind(s, StrArg(args, 0, "sub", name)));
  if (name == "count") return Value::Int(PyCount(s, StrArg(args, 0, "sub", name)));
  if (name == "splitlines") return StringList(PySplitLines(s));
  if (name == "join") {
    std::string out;
    const Value* items = args.Get(0, "iterable");
    if (items == nullptr) throw TemplateError("join() takes exactly one argument (0 given)");
    bool first = true;
    for (const Value& v : ev.Iterate(*items)) {
      if (!v.is_string())
        throw TemplateError("sequence item: expected str instance, " + v.TypeName() + " found");
      if (!first) out += s;
      out += v.str();
      first = false;
    }
    return Value::String(std::move(out));
  }
  if (name == "isdigit" || name == "isspace") {
    const std::u32string u = DecodeUtf8(s);
    bool all = !u.empty();
    for (char32_t c : u) all = all && (name == "isspace" ? PyIsSpace(c) : (c >= '0' && c <= '9'));
    return Value::Bool(all);
  }
  throw TemplateError("unsupported method str." + name);
}

Value DictMethod(const DictData& d, const std::string& name, const CallArgs& args) {
  if (name == "get") {
    const Value* key = args.Get(0, "key");
    if (key == nullptr) throw TemplateError("get expected at least 1 argument, got 0");
    const Value* v = key->is_string() ? d.Find(key->str()) : nullptr;
    return v ? *v : args.GetOr(1, "default", Value::None());
  }
  std::vector<Value> out;
  for (const auto& [k, v] : d.items) {
    if (name == "keys") {
      out.push_back(Value::String(k));
    } else if (name == "values") {
      out.push_back(v);
    } else {
      out.push_back(Value::List({Value::String(k), v}, /*is_tuple=*/true));
    }
  }
  return Value::List(std::move(out));
}

Value ListMethod(const ListData& l, const std::string& name, const CallArgs& args) {
  const Value* x = args.Get(0, "value");
  if (x == nullptr) throw TemplateError(name + "() takes at least 1 argument (0 given)");
  int64_t count = 0;
  for (size_t i = 0; i < l.items.size(); ++i) {
    if (!Equals(l.items[i], *x)) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") throw TemplateError(x->Repr() + " is not in list");
  return Value::Int(count);
}

std::string StrftimeNow(Evaluator& ev, const std::string& format) {
  const std::time_t t = std::chrono::system_clock::to_time_t(ev.Now());
  std::tm tm{};
  localtime_r(&t, &tm);  // datetime.now() is local time
  std::string buf(format.size() * 4 + 64, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
  if (n == 0 && !format.empty()) throw TemplateError("strftime_now: format too long or invalid");
  buf.resize(n);
  return buf;
}

Value Range(const CallArgs& args) {
  std::vector<int64_t> bounds;
  for (const Value& v : args.positional) {
    if (!v.is_integral())
      throw TemplateError("'" + v.TypeName() + "' object cannot be interpreted as an integer");
    bounds.push_back(v.as_int());
  }
  if (bounds.empty() || bounds.size() > 3) throw TemplateError("range expected 1 to 3 arguments");
  const int64_t start = bounds.size() > 1 ? bounds[0] : 0;
  const int64_t stop = bounds.size() > 1 ? bounds[1] : bounds[0];
  const int64_t step = bounds.size() > 2 ? bounds[2] : 1;
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  // The sandbox caps ranges (MAX_RANGE) so a template cannot exhaust memory.
  constexpr int64_t kMaxRange = 100000;
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) {
      throw TemplateError(
          "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    out.push_back(Value::Int(i));
  }
  return Value::List(std::move(out));
}

}  // namespace

bool IsMethod(const Value& receiver, std::string_view name) {
  switch (receiver.kind()) {
    case Value::Kind::kString:
      return In(kStrMethods, name);
    case Value::Kind::kDict:
      return In(kDictMethods, name);
    case Value::Kind::kList:
      return In(kListMethods, name);
    default:
      return false;
  }
}

Value CallMethod(Evaluator& ev, const Value& receiver, const std::string& name,
                 const CallArgs& args) {
  if (receiver.is_string()) return StrMethod(ev, receiver.str(), name, args);
  if (receiver.is_dict()) return DictMethod(receiver.dict(), name, args);
  return ListMethod(receiver.list(), name, args);
}

bool IsUnsupportedMethod(std::string_view name) { return In(kUnsupportedMethods, name); }
bool IsUnsupportedGlobal(std::string_view name) { return In(kUnsupportedGlobals, name); }

void AddGlobals(Scope& scope) {
  for (std::string_view name : kGlobals) {
    auto c = std::make_shared<Callable>();
    c->name = std::string(name);
    scope.Set(std::string(name), Value::Function(std::move(c)));
  }
}

Value CallGlobal(Evaluator& ev, const std::string& name, const CallArgs& args) {
  if (name == "raise_exception") {
    const Value* msg = args.Get(0, "message");
    throw TemplateError(msg ? msg->ToString() : "");
  }
  if (name == "strftime_now")
    return Value::String(StrftimeNow(ev, StrArg(args, 0, "format", name)));
  if (name == "range") return Range(args);
  // namespace(...) and dict(...): an optional mapping, then keyword arguments.
  DictData attrs;
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    if (!init.is_dict() || args.positional.size() > 1)
      throw TemplateError(name + "() takes one mapping argument");
    attrs = init.dict();
  }
  for (const auto& [k, v] : args.keyword) attrs.Set(k, v);
  return name == "namespace" ? Value::Namespace(std::move(attrs)) : Value::Dict(std::move(attrs));
}

}  // namespace ptxserve::chat
