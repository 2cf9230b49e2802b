// Filters over sequences: map, select/reject(attr), unique, sort, reverse, sum, min, max.
#include <algorithm>
#include <string>

#include "engine/chat/builtins.h"
#include "engine/chat/filter_util.h"
#include "engine/chat/operators.h"
#include "engine/chat/pystr.h"

namespace ptxserve::chat {
namespace {

// Arguments after the first `skip` positional ones, as passed on to a test or filter.
CallArgs Rest(const CallArgs& args, size_t skip) {
  CallArgs rest;
  if (args.positional.size() > skip) {
    rest.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(skip),
                           args.positional.end());
  }
  rest.keyword = args.keyword;
  return rest;
}

// select/reject(seq, test?, args...) and selectattr/rejectattr(seq, attr, test?, args...).
Value Select(Evaluator& ev, const Value& seq, const CallArgs& args, bool by_attr, bool keep) {
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (args.positional.empty()) throw TemplateError("Missing parameter for attribute name");
    attribute = args.positional[next++];
  }
  TestFn test = nullptr;
  if (args.positional.size() > next) {
    const std::string name = args.positional[next++].ToString();
    test = FindTest(name);
    if (test == nullptr) throw TemplateError("No test named '" + name + "'.");
  }
  const CallArgs test_args = Rest(args, next);
  std::vector<Value> out;
  for (const Value& item : ev.Iterate(seq)) {
    const Value subject = by_attr ? AttributeOf(ev, item, attribute) : item;
    const bool pass = test ? test(ev, subject, test_args) : subject.Truthy();
    if (pass == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

Value SelectFilter(Evaluator& ev, const Value& v, const CallArgs& a) {
  return Select(ev, v, a, false, true);
}
Value RejectFilter(Evaluator& ev, const Value& v, const CallArgs& a) {
  return Select(ev, v, a, false, false);
}
Value SelectAttr(Evaluator& ev, const Value& v, const CallArgs& a) {
  return Select(ev, v, a, true, true);
}
Value RejectAttr(Evaluator& ev, const Value& v, const CallArgs& a) {
  return Select(ev, v, a, true, false);
}

Value Map(Evaluator& ev, const Value& seq, const CallArgs& args) {
  std::vector<Value> out;
  const Value* attribute = args.Get(99, "attribute");
  if (attribute != nullptr) {
    const Value fallback = args.GetOr(99, "default", Value());
    for (const Value& item : ev.Iterate(seq)) {
      Value v = AttributeOf(ev, item, *attribute);
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return Value::List(std::move(out));
  }
  if (args.positional.empty()) throw TemplateError("map requires a filter argument");
  const std::string name = args.positional[0].ToString();
  const FilterFn filter = FindFilter(name);
  if (filter == nullptr) throw TemplateError("No filter named '" + name + "'.");
  const CallArgs filter_args = Rest(args, 1);
  for (const Value& item : ev.Iterate(seq)) out.push_back(filter(ev, item, filter_args));
  return Value::List(std::move(out));
}

// The comparison key of unique/sort/min/max: the attribute, lower-cased unless
// case_sensitive (jinja2's ignore_case postprocess).
Value SortKey(Evaluator& ev, const Value& item, const CallArgs& args, size_t attr_index) {
  const Value attribute = args.GetOr(attr_index, "attribute", Value::None());
  Value key = attribute.is_none() ? item : AttributeOf(ev, item, attribute);
  const bool case_sensitive =
      args.GetOr(attr_index - 1, "case_sensitive", Value::Bool(false)).Truthy();
  if (!case_sensitive && key.is_string()) key = Value::String(PyLowerStr(key.str()));
  return key;
}

Value Unique(Evaluator& ev, const Value& seq, const CallArgs& args) {
  std::vector<Value> out, seen;
  for (const Value& item : ev.Iterate(seq)) {
    Value key = SortKey(ev, item, args, 1);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, key); })) {
      seen.push_back(std::move(key));
      out.push_back(item);
    }
  }
  return Value::List(std::move(out));
}

Value Sort(Evaluator& ev, const Value& seq, const CallArgs& args) {
  const bool reverse = args.GetOr(0, "reverse", Value::Bool(false)).Truthy();
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : ev.Iterate(seq)) keyed.emplace_back(SortKey(ev, item, args, 2), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? Less(b.first, a.first) : Less(a.first, b.first);
  });
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return Value::List(std::move(out));
}

Value Extreme(Evaluator& ev, const Value& seq, const CallArgs& args, bool want_max) {
  const std::vector<Value> items = ev.Iterate(seq);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = SortKey(ev, items[0], args, 1);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = SortKey(ev, items[i], args, 1);
    if (want_max ? Less(best_key, key) : Less(key, best_key)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value Min(Evaluator& ev, const Value& v, const CallArgs& a) { return Extreme(ev, v, a, false); }
Value Max(Evaluator& ev, const Value& v, const CallArgs& a) { return Extreme(ev, v, a, true); }

Value Sum(Evaluator& ev, const Value& seq, const CallArgs& args) {
  const Value attribute = args.GetOr(0, "attribute", Value::None());
  Value total = args.GetOr(1, "start", Value::Int(0));
  for (const Value& item : ev.Iterate(seq)) {
    total = Arithmetic(BinOp::kAdd, total,
                       attribute.is_none() ? item : AttributeOf(ev, item, attribute));
  }
  return total;
}

Value Reverse(Evaluator& ev, const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::u32string u = DecodeUtf8(v.str());
    std::reverse(u.begin(), u.end());
    return Value::String(EncodeUtf8(u));
  }
  std::vector<Value> items = ev.Iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};

constexpr NamedFilter kSequenceFilters[] = {
    {"map", Map},
    {"select", SelectFilter},
    {"reject", RejectFilter},
    {"selectattr", SelectAttr},
    {"rejectattr", RejectAttr},
    {"unique", Unique},
    {"sort", Sort},
    {"reverse", Reverse},
    {"sum", Sum},
    {"min", Min},
    {"max", Max},
};

}  // namespace

Value AttributeOf(Evaluator& ev, const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return ev.GetItem(item, attribute);
  Value v = item;
  size_t start = 0;
  const std::string& path = attribute.str();
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    v = ev.GetItem(v, digits ? Value::Int(std::stoll(part)) : Value::String(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

FilterFn FindSequenceFilter(std::string_view name) {
  for (const NamedFilter& f : kSequenceFilters) {
    if (f.name == name) return f.fn;
  }
  return nullptr;
}

}  // namespace ptxserve::chat
