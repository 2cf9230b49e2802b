// jinja2's built-in tests (`x is defined`, `x is string`, `x is divisibleby 3`, ...).
#include <string_view>

#include "engine/chat/builtins.h"
#include "engine/chat/operators.h"
#include "engine/chat/pystr.h"

namespace ptxserve::chat {
namespace {

using K = Value::Kind;

const Value& Operand(const CallArgs& args, std::string_view test) {
  const Value* v = args.Get(0, "other");
  if (v == nullptr) throw TemplateError("test '" + std::string(test) + "' needs an argument");
  return *v;
}

bool IsDefined(Evaluator&, const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool IsUndefined(Evaluator&, const Value& v, const CallArgs&) { return v.is_undefined(); }
bool IsNone(Evaluator&, const Value& v, const CallArgs&) { return v.is_none(); }
bool IsBoolean(Evaluator&, const Value& v, const CallArgs&) { return v.kind() == K::kBool; }
bool IsTrue(Evaluator&, const Value& v, const CallArgs&) {
  return v.kind() == K::kBool && v.as_bool();
}
bool IsFalse(Evaluator&, const Value& v, const CallArgs&) {
  return v.kind() == K::kBool && !v.as_bool();
}
bool IsInteger(Evaluator&, const Value& v, const CallArgs&) { return v.kind() == K::kInt; }
bool IsFloat(Evaluator&, const Value& v, const CallArgs&) { return v.kind() == K::kFloat; }
bool IsNumber(Evaluator&, const Value& v, const CallArgs&) { return v.is_number(); }
bool IsString(Evaluator&, const Value& v, const CallArgs&) { return v.is_string(); }
bool IsMapping(Evaluator&, const Value& v, const CallArgs&) { return v.is_dict(); }
bool IsCallable(Evaluator&, const Value& v, const CallArgs&) {
  return v.kind() == K::kCallable || v.is_undefined();  // Undefined defines __call__ (to raise)
}
// jinja2's Undefined defines __iter__, __len__ and __getitem__, so it passes both.
bool IsIterable(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}

// jinja2: value % 2 == 1, value % 2 == 0, value % num == 0 (so 2.5 is neither odd nor even).
bool IsOdd(Evaluator&, const Value& v, const CallArgs&) {
  return Equals(Arithmetic(BinOp::kMod, v, Value::Int(2)), Value::Int(1));
}
bool IsEven(Evaluator&, const Value& v, const CallArgs&) {
  return Equals(Arithmetic(BinOp::kMod, v, Value::Int(2)), Value::Int(0));
}
bool IsDivisibleBy(Evaluator&, const Value& v, const CallArgs& args) {
  const Value* n = args.Get(0, "num");
  if (n == nullptr) throw TemplateError("test 'divisibleby' needs an argument");
  return Equals(Arithmetic(BinOp::kMod, v, *n), Value::Int(0));
}

template <CmpOp op>
bool IsCompare(Evaluator&, const Value& v, const CallArgs& args) {
  return Compare(op, v, Operand(args, "comparison"));
}
constexpr TestFn IsEq = IsCompare<CmpOp::kEq>, IsNe = IsCompare<CmpOp::kNe>,
                 IsLt = IsCompare<CmpOp::kLt>, IsLe = IsCompare<CmpOp::kLe>,
                 IsGt = IsCompare<CmpOp::kGt>, IsGe = IsCompare<CmpOp::kGe>;
bool IsIn(Evaluator&, const Value& v, const CallArgs& args) {
  const Value* seq = args.Get(0, "seq");
  if (seq == nullptr) throw TemplateError("test 'in' needs an argument");
  return Contains(*seq, v);
}

// `is sameas`: identity. Only None and the booleans are singletons we can tell apart.
bool IsSameAs(Evaluator&, const Value& v, const CallArgs& args) {
  const Value& other = Operand(args, "sameas");
  if (v.kind() != other.kind()) return false;
  return (v.is_none() || v.kind() == K::kBool) && Equals(v, other);
}

bool IsLower(Evaluator&, const Value& v, const CallArgs&) {
  const std::string s = v.ToString();
  return PyLowerStr(s) == s && PyUpperStr(s) != s;
}
bool IsUpper(Evaluator&, const Value& v, const CallArgs&) {
  const std::string s = v.ToString();
  return PyUpperStr(s) == s && PyLowerStr(s) != s;
}

struct NamedTest {
  std::string_view name;
  TestFn fn;
};

constexpr NamedTest kTests[] = {
    {"defined", IsDefined},
    {"undefined", IsUndefined},
    {"none", IsNone},
    {"boolean", IsBoolean},
    {"true", IsTrue},
    {"false", IsFalse},
    {"integer", IsInteger},
    {"float", IsFloat},
    {"number", IsNumber},
    {"string", IsString},
    {"mapping", IsMapping},
    {"iterable", IsIterable},
    {"sequence", IsIterable},
    {"callable", IsCallable},
    {"odd", IsOdd},
    {"even", IsEven},
    {"divisibleby", IsDivisibleBy},
    {"eq", IsEq},
    {"equalto", IsEq},
    {"==", IsEq},
    {"ne", IsNe},
    {"!=", IsNe},
    {"lt", IsLt},
    {"lessthan", IsLt},
    {"<", IsLt},
    {"le", IsLe},
    {"<=", IsLe},
    {"gt", IsGt},
    {"greaterthan", IsGt},
    {">", IsGt},
    {"ge", IsGe},
    {">=", IsGe},
    {"in", IsIn},
    {"sameas", IsSameAs},
    {"lower", IsLower},
    {"upper", IsUpper},
};

}  // namespace

TestFn FindTest(std::string_view name) {
  for (const NamedTest& t : kTests) {
    if (t.name == name) return t.fn;
  }
  return nullptr;
}

}  // namespace ptxserve::chat
