// jinja2's built-in filters that chat templates use, plus Hugging Face's `tojson`.
// Sequence filters (map, select*, unique, sort, ...) are in seq_filters.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "engine/chat/builtins.h"
#include "engine/chat/filter_util.h"
#include "engine/chat/json_value.h"
#include "engine/chat/operators.h"
#include "engine/chat/pystr.h"

namespace ptxserve::chat {
namespace {

Value Str(std::string s) { return Value::String(std::move(s)); }

Value Trim(Evaluator&, const Value& v, const CallArgs& args) {
  const Value chars = args.GetOr(0, "chars", Value::None());
  return Str(PyStrip(v.ToString(), chars.is_none() ? std::nullopt : std::optional(chars.ToString()),
                     StripSide::kBoth));
}
Value Upper(Evaluator&, const Value& v, const CallArgs&) { return Str(PyUpperStr(v.ToString())); }
Value Lower(Evaluator&, const Value& v, const CallArgs&) { return Str(PyLowerStr(v.ToString())); }
Value Capitalize(Evaluator&, const Value& v, const CallArgs&) {
  return Str(PyCapitalize(v.ToString()));
}
Value String(Evaluator&, const Value& v, const CallArgs&) { return Str(v.ToString()); }
Value Safe(Evaluator&, const Value& v, const CallArgs&) { return Str(v.ToString()); }

// jinja2's title filter upper-cases after whitespace, '-', '(', '{', '[' and '<' only
// (str.title would also split "they're").
Value Title(Evaluator&, const Value& v, const CallArgs&) {
  std::u32string u = DecodeUtf8(v.ToString());
  bool word_start = true;
  for (char32_t& c : u) {
    const bool sep = PyIsSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    c = sep ? c : (word_start ? PyUpper(c) : PyLower(c));
    word_start = sep;
  }
  return Str(EncodeUtf8(u));
}

Value Length(Evaluator&, const Value& v, const CallArgs&) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Value::Int(0);
    case Value::Kind::kString:
      return Value::Int(static_cast<int64_t>(CodePointCount(v.str())));
    case Value::Kind::kList:
      return Value::Int(static_cast<int64_t>(v.list().items.size()));
    case Value::Kind::kDict:
      return Value::Int(static_cast<int64_t>(v.dict().items.size()));
    default:
      throw TemplateError("object of type '" + v.TypeName() + "' has no len()");
  }
}

Value Default(Evaluator&, const Value& v, const CallArgs& args) {
  const bool boolean = args.GetOr(1, "boolean", Value::Bool(false)).Truthy();
  if (v.is_undefined() || (boolean && !v.Truthy())) return args.GetOr(0, "default_value", Str(""));
  return v;
}

Value First(Evaluator& ev, const Value& v, const CallArgs&) {
  const std::vector<Value> items = ev.Iterate(v);
  return items.empty() ? Value::Undefined("No first item, sequence was empty.") : items.front();
}

Value Last(Evaluator& ev, const Value& v, const CallArgs&) {
  const std::vector<Value> items = ev.Iterate(v);
  return items.empty() ? Value::Undefined("No last item, sequence was empty.") : items.back();
}

Value List(Evaluator& ev, const Value& v, const CallArgs&) { return Value::List(ev.Iterate(v)); }

Value Items(Evaluator&, const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::List({});
  if (!v.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict().items) out.push_back(Value::List({Str(k), val}, true));
  return Value::List(std::move(out));
}

Value Join(Evaluator& ev, const Value& v, const CallArgs& args) {
  const std::string sep = args.GetOr(0, "d", Str("")).ToString();
  const Value attribute = args.GetOr(1, "attribute", Value::None());
  std::string out;
  bool first = true;
  for (const Value& item : ev.Iterate(v)) {
    if (!first) out += sep;
    out += (attribute.is_none() ? item : AttributeOf(ev, item, attribute)).ToString();
    first = false;
  }
  return Str(std::move(out));
}

Value Replace(Evaluator&, const Value& v, const CallArgs& args) {
  const Value count = args.GetOr(2, "count", Value::None());
  return Str(PyReplace(v.ToString(), args.GetOr(0, "old", Str("")).ToString(),
                       args.GetOr(1, "new", Str("")).ToString(),
                       count.is_none() ? -1 : count.as_int()));
}

// Python's float(str): surrounding whitespace allowed, "inf"/"nan" spelled any case.
bool ParseFloat(const std::string& text, double* out) {
  const std::string s = PyStrip(text, std::nullopt, StripSide::kBoth);
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && s.find_first_of("xXpP") == std::string::npos;
}

Value Int(Evaluator&, const Value& v, const CallArgs& args) {
  const Value fallback = args.GetOr(0, "default", Value::Int(0));
  const int64_t base = args.GetOr(1, "base", Value::Int(10)).as_int();
  RequireDefined(v);  // int(Undefined) raises rather than falling back to the default
  if (v.is_integral()) return Value::Int(v.as_int());
  if (v.kind() == Value::Kind::kFloat)
    return std::isfinite(v.as_double()) ? Value::Int(static_cast<int64_t>(v.as_double()))
                                        : fallback;
  if (!v.is_string()) return fallback;
  std::string s = PyReplace(PyStrip(v.str(), std::nullopt, StripSide::kBoth), "_", "", -1);
  char* end = nullptr;
  const long long i = std::strtoll(s.c_str(), &end, static_cast<int>(base));
  if (!s.empty() && end == s.c_str() + s.size()) return Value::Int(i);
  double d = 0;
  return ParseFloat(v.str(), &d) && std::isfinite(d) ? Value::Int(static_cast<int64_t>(d))
                                                     : fallback;
}

Value Float(Evaluator&, const Value& v, const CallArgs& args) {
  RequireDefined(v);
  if (v.is_number()) return Value::Float(v.as_double());
  double d = 0;
  if (v.is_string() && ParseFloat(v.str(), &d)) return Value::Float(d);
  return args.GetOr(0, "default", Value::Float(0.0));
}

Value Abs(Evaluator&, const Value& v, const CallArgs&) {
  if (v.is_integral()) return Value::Int(std::llabs(v.as_int()));
  if (v.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(v.as_double()));
  throw TemplateError("bad operand type for abs(): '" + v.TypeName() + "'");
}

Value Round(Evaluator&, const Value& v, const CallArgs& args) {
  RequireDefined(v);
  if (!v.is_number())
    throw TemplateError("type " + v.TypeName() + " doesn't define __round__ method");
  const int64_t precision = args.GetOr(0, "precision", Value::Int(0)).as_int();
  const std::string method = args.GetOr(1, "method", Str("common")).ToString();
  if (v.is_integral() && method == "common" && precision >= 0) return Value::Int(v.as_int());
  const double x = v.as_double();
  if (method == "ceil" || method == "floor") {
    const double scale = std::pow(10.0, static_cast<double>(precision));
    return Value::Float((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  }
  if (method != "common") throw TemplateError("method must be common, ceil or floor");
  // Python's round() is correctly rounded (half-even on the exact binary value), as
  // glibc's printf is; going through text gets the same digits.
  if (precision < 0) {
    const double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value::Float(std::nearbyint(x / scale) * scale);
  }
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), x);
  return Value::Float(std::strtod(buf, nullptr));
}

// HF's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value ToJson(Evaluator&, const Value& v, const CallArgs& args) {
  JsonDumpOptions opts;
  opts.ensure_ascii = args.GetOr(0, "ensure_ascii", Value::Bool(false)).Truthy();
  const Value indent = args.GetOr(1, "indent", Value::None());
  if (indent.is_integral()) {
    opts.indent = std::string(static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)), ' ');
  } else if (indent.is_string()) {
    opts.indent = indent.str();
  } else if (!indent.is_none()) {
    throw TemplateError("tojson: indent must be an int or a str");
  }
  const Value separators = args.GetOr(2, "separators", Value::None());
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.list().items.size() != 2) {
      throw TemplateError("tojson: separators must be a pair of strings");
    }
    opts.separators.emplace(separators.list().items[0].ToString(),
                            separators.list().items[1].ToString());
  }
  opts.sort_keys = args.GetOr(3, "sort_keys", Value::Bool(false)).Truthy();
  return Str(PyJsonDumps(v, opts));
}

Value Indent(Evaluator&, const Value& v, const CallArgs& args) {
  const Value width = args.GetOr(0, "width", Value::Int(4));
  const bool first = args.GetOr(1, "first", Value::Bool(false)).Truthy();
  const bool blank = args.GetOr(2, "blank", Value::Bool(false)).Truthy();
  const std::string pad =
      width.is_string()
          ? width.str()
          : std::string(static_cast<size_t>(std::max<int64_t>(width.as_int(), 0)), ' ');
  // jinja2 appends "\n" before splitlines, so a trailing newline yields no extra line.
  const std::vector<std::string> lines = PySplitLines(v.ToString() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    const bool indent_line = i > 0 && (blank || !lines[i].empty());
    out += (indent_line ? pad : "") + lines[i];
  }
  return Str(first ? pad + out : out);
}

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};

constexpr NamedFilter kFilters[] = {
    {"abs", Abs},         {"capitalize", Capitalize},
    {"count", Length},    {"d", Default},
    {"default", Default}, {"first", First},
    {"float", Float},     {"indent", Indent},
    {"int", Int},         {"items", Items},
    {"join", Join},       {"last", Last},
    {"length", Length},   {"list", List},
    {"lower", Lower},     {"replace", Replace},
    {"round", Round},     {"safe", Safe},
    {"string", String},   {"title", Title},
    {"tojson", ToJson},   {"trim", Trim},
    {"upper", Upper},
};

}  // namespace

FilterFn FindFilter(std::string_view name) {
  for (const NamedFilter& f : kFilters) {
    if (f.name == name) return f.fn;
  }
  return FindSequenceFilter(name);
}

}  // namespace ptxserve::chat
