#include "engine/chat/jinja_render.h"

#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_builtins.h"

namespace ptxserve::jinja {
namespace {

using K = Value::Kind;
using EK = Expr::Kind;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const Value& variables, const RenderGlobals& globals) : globals_(globals) {
    scopes_.emplace_back();
    if (variables.kind == K::kDict) {
      for (const auto& [k, v] : *variables.dict) scopes_.back()[k] = v;
    }
  }

  std::string Run(const Body& body) {
    RenderBody(body);
    return std::move(out_);
  }

 private:
  [[noreturn]] static void Fail(int line, const std::string& what) {
    throw TemplateError(absl::StrCat("line ", line, ": ", what));
  }

  Flow RenderBody(const Body& body) {
    for (const Node& n : body) {
      const Flow f = RenderNode(n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow RenderNode(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kText:
        out_ += n.text;
        return Flow::kNormal;
      case Node::Kind::kOutput:
        out_ += ToStr(Eval(*n.expr));
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (!cond || Eval(*cond).Truthy()) return RenderBody(body);
        }
        return Flow::kNormal;
      case Node::Kind::kFor:
        RenderFor(n);
        return Flow::kNormal;
      case Node::Kind::kSet:
        Assign(n, Eval(*n.expr));
        return Flow::kNormal;
      case Node::Kind::kSetBlock: {
        std::string saved = std::move(out_);
        out_.clear();
        RenderBody(n.body);
        Value v = Value::Str(std::move(out_));
        out_ = std::move(saved);
        Assign(n, std::move(v));
        return Flow::kNormal;
      }
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void Assign(const Node& n, Value v) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = std::move(v);
      return;
    }
    Value ns = Lookup(n.targets[0]);
    if (ns.kind != K::kDict || !ns.is_namespace) {
      Fail(n.line,
           absl::StrCat("cannot assign attribute on non-namespace object '", n.targets[0], "'"));
    }
    for (auto& [k, old] : *ns.dict) {
      if (k == n.targets[1]) {
        old = std::move(v);
        return;
      }
    }
    ns.dict->emplace_back(n.targets[1], std::move(v));
  }

  void RenderFor(const Node& n) {
    const Value iterable = Eval(*n.expr);
    List items;
    if (iterable.kind == K::kDict) {
      for (const auto& [k, _] : *iterable.dict) items.push_back(Value::Str(k));
    } else if (iterable.kind == K::kList) {
      items = *iterable.list;
    } else if (iterable.kind == K::kString) {
      items = *ApplyFilterOrFail("list", iterable, n.line).list;
    } else if (iterable.defined()) {
      Fail(n.line, absl::StrCat("'", iterable.TypeName(), "' object is not iterable"));
    }
    if (n.filter) {
      List kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        Bind(n, item);
        if (Eval(*n.filter).Truthy()) kept.push_back(item);
        scopes_.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      RenderBody(n.else_body);
      return;
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      scopes_.emplace_back();
      Bind(n, items[i]);
      scopes_.back()["loop"] = Value::MakeDict({
          {"index", Value::Int(i + 1)},
          {"index0", Value::Int(i)},
          {"revindex", Value::Int(len - i)},
          {"revindex0", Value::Int(len - i - 1)},
          {"first", Value::Bool(i == 0)},
          {"last", Value::Bool(i == len - 1)},
          {"length", Value::Int(len)},
          {"previtem", i > 0 ? items[i - 1] : Value()},
          {"nextitem", i + 1 < len ? items[i + 1] : Value()},
      });
      const Flow f = RenderBody(n.body);
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
  }

  void Bind(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = item;
      return;
    }
    if (item.kind != K::kList || item.list->size() != n.targets.size()) {
      Fail(n.line,
           absl::StrCat("cannot unpack ", item.TypeName(), " into ", n.targets.size(), " names"));
    }
    for (size_t k = 0; k < n.targets.size(); ++k) scopes_.back()[n.targets[k]] = (*item.list)[k];
  }

  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Global(name);
  }

  Value Global(const std::string& name) const {
    if (name == "raise_exception") {
      return Value::MakeFunction([](const Args& a, const Kwargs&) -> Value {
        throw TemplateError(a.empty() ? "raise_exception" : ToStr(a[0]));
      });
    }
    if (name == "strftime_now" && globals_.strftime_now) {
      return Value::MakeFunction([f = globals_.strftime_now](const Args& a, const Kwargs&) {
        return Value::Str(f(a.empty() ? "" : ToStr(a[0])));
      });
    }
    if (name == "namespace" || name == "dict") {
      const bool ns = name == "namespace";
      return Value::MakeFunction([ns](const Args& a, const Kwargs& kw) {
        Dict d;
        if (!a.empty() && a[0].kind == K::kDict) d = *a[0].dict;
        for (const auto& [k, v] : kw) d.emplace_back(k, v);
        Value x = Value::MakeDict(std::move(d));
        x.is_namespace = ns;
        return x;
      });
    }
    if (name == "range") {
      return Value::MakeFunction([](const Args& a, const Kwargs&) {
        int64_t start = 0, stop = 0, step = 1;
        if (a.size() == 1) stop = a[0].i;
        if (a.size() >= 2) start = a[0].i, stop = a[1].i;
        if (a.size() >= 3) step = a[2].i;
        if (step == 0) throw TemplateError("range() arg 3 must not be zero");
        List out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
          out.push_back(Value::Int(i));
        return Value::MakeList(std::move(out));
      });
    }
    return Value();
  }

  Value ApplyFilterOrFail(const std::string& name, const Value& v, int line, const Args& a = {},
                          const Kwargs& kw = {}) {
    bool found = true;
    Value out = ApplyFilter(name, v, a, kw, &found);
    if (!found) Fail(line, absl::StrCat("no filter named '", name, "'"));
    return out;
  }

  void EvalArgs(const Expr& e, size_t first, Args* args, Kwargs* kwargs) {
    for (size_t i = first; i < e.items.size(); ++i) args->push_back(Eval(*e.items[i]));
    for (const auto& [k, v] : e.kwargs) kwargs->emplace_back(k, Eval(*v));
  }

  Value Eval(const Expr& e) {
    try {
      return EvalUnchecked(e);
    } catch (const TemplateError& err) {
      // The innermost expression names the line; outer ones pass it on.
      if (std::string(err.what()).rfind("line ", 0) == 0) throw;
      Fail(e.line, err.what());
    }
  }

  Value EvalUnchecked(const Expr& e) {
    switch (e.kind) {
      case EK::kLiteral:
        return e.value;
      case EK::kName:
        return Lookup(e.name);
      case EK::kList:
      case EK::kTuple: {
        List items;
        for (const auto& x : e.items) items.push_back(Eval(*x));
        return Value::MakeList(std::move(items));
      }
      case EK::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2)
          d.emplace_back(ToStr(Eval(*e.items[i])), Eval(*e.items[i + 1]));
        return Value::MakeDict(std::move(d));
      }
      case EK::kAttr:
        return GetAttribute(Eval(*e.items[0]), e.name);
      case EK::kItem:
        return GetItem(Eval(*e.items[0]), Eval(*e.items[1]));
      case EK::kSlice: {
        auto part = [&](int k) { return e.items[k] ? Eval(*e.items[k]) : Value(); };
        return GetSlice(Eval(*e.items[0]), part(1), part(2), part(3));
      }
      case EK::kCall: {
        const Value callee = Eval(*e.items[0]);
        if (callee.kind != K::kFunction) {
          throw TemplateError(absl::StrCat("'", callee.TypeName(), "' object is not callable"));
        }
        Args args;
        Kwargs kwargs;
        EvalArgs(e, 1, &args, &kwargs);
        return (*callee.fn)(args, kwargs);
      }
      case EK::kFilter: {
        const Value input = Eval(*e.items[0]);
        Args args;
        Kwargs kwargs;
        EvalArgs(e, 1, &args, &kwargs);
        return ApplyFilterOrFail(e.name, input, e.line, args, kwargs);
      }
      case EK::kTest: {
        const Value input = Eval(*e.items[0]);
        Args args;
        Kwargs kwargs;
        EvalArgs(e, 1, &args, &kwargs);
        bool found = true;
        const bool result = ApplyTest(e.name, input, args, &found);
        if (!found) Fail(e.line, absl::StrCat("no test named '", e.name, "'"));
        return Value::Bool(result != e.negated);
      }
      case EK::kUnary: {
        const Value v = Eval(*e.items[0]);
        if (e.name == "not") return Value::Bool(!v.Truthy());
        if (!v.is_number())
          throw TemplateError(
              absl::StrCat("bad operand type for unary ", e.name, ": '", v.TypeName(), "'"));
        if (e.name == "+") return v;
        return v.kind == K::kFloat ? Value::Float(-v.f)
                                   : Value::Int(-(v.kind == K::kBool ? v.b : v.i));
      }
      case EK::kCondition:
        if (Eval(*e.items[1]).Truthy()) return Eval(*e.items[0]);
        return e.items[2] ? Eval(*e.items[2]) : Value();
      case EK::kBinary:
        return EvalBinary(e);
    }
    return Value();
  }

  Value EvalBinary(const Expr& e) {
    const Value a = Eval(*e.items[0]);
    if (e.name == "and") return a.Truthy() ? Eval(*e.items[1]) : a;
    if (e.name == "or") return a.Truthy() ? a : Eval(*e.items[1]);
    const Value b = Eval(*e.items[1]);
    const std::string& op = e.name;
    if (op == "~") return Value::Str(ToStr(a) + ToStr(b));
    if (op == "==") return Value::Bool(Equals(a, b));
    if (op == "!=") return Value::Bool(!Equals(a, b));
    if (op == "<") return Value::Bool(Less(a, b));
    if (op == ">") return Value::Bool(Less(b, a));
    if (op == "<=") return Value::Bool(!Less(b, a));
    if (op == ">=") return Value::Bool(!Less(a, b));
    if (op == "in" || op == "not in") {
      bool found = true;
      const bool in = ApplyTest("in", a, {b}, &found);
      return Value::Bool(in == (op == "in"));
    }
    if (op == "+" && a.kind == K::kString && b.kind == K::kString) return Value::Str(a.s + b.s);
    if (op == "+" && a.kind == K::kList && b.kind == K::kList) {
      List l = *a.list;
      l.insert(l.end(), b.list->begin(), b.list->end());
      return Value::MakeList(std::move(l));
    }
    if (op == "*" && a.kind == K::kString && b.kind == K::kInt) {
      std::string s;
      for (int64_t i = 0; i < b.i; ++i) s += a.s;
      return Value::Str(s);
    }
    if (!a.is_number() || !b.is_number()) {
      throw TemplateError(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(),
                                       "' and '", b.TypeName(), "'"));
    }
    const bool ints = a.kind != K::kFloat && b.kind != K::kFloat;
    const int64_t x = a.kind == K::kBool ? a.b : a.i, y = b.kind == K::kBool ? b.b : b.i;
    const double fx = a.number(), fy = b.number();
    if (op == "+") return ints ? Value::Int(x + y) : Value::Float(fx + fy);
    if (op == "-") return ints ? Value::Int(x - y) : Value::Float(fx - fy);
    if (op == "*") return ints ? Value::Int(x * y) : Value::Float(fx * fy);
    if (op == "**")
      return ints && y >= 0 ? Value::Int(static_cast<int64_t>(std::pow(fx, fy)))
                            : Value::Float(std::pow(fx, fy));
    if ((ints && y == 0) || (!ints && fy == 0)) throw TemplateError("division by zero");
    if (op == "/") return Value::Float(fx / fy);
    if (op == "//") {
      if (!ints) return Value::Float(std::floor(fx / fy));
      return Value::Int(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
    }
    // %: Python's modulo takes the divisor's sign.
    if (!ints) return Value::Float(fx - fy * std::floor(fx / fy));
    const int64_t r = x % y;
    return Value::Int(r != 0 && ((r < 0) != (y < 0)) ? r + y : r);
  }

  const RenderGlobals& globals_;
  std::vector<std::map<std::string, Value>> scopes_;
  std::string out_;
};

}  // namespace

std::string Render(const Body& body, const Value& variables, const RenderGlobals& globals) {
  Renderer r(variables, globals);
  return r.Run(body);
}

}  // namespace ptxserve::jinja
