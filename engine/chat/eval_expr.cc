// Expression evaluation (Evaluator::Eval); statements are in evaluator.cc.
#include "engine/chat/evaluator.h"
#include "engine/chat/operators.h"

namespace ptxserve::chat {

Value Evaluator::Eval(const Expr& e, Scope& scope) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName: {
      const Value* v = scope.Find(e.name);
      return v ? *v : Value::Undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(Eval(*a, scope));
      return Value::List(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      DictData dict;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value key = Eval(*e.args[i], scope);
        if (!key.is_string()) {
          throw TemplateError("unsupported construct: dict literal with a non-string key", e.line);
        }
        dict.Set(key.str(), Eval(*e.args[i + 1], scope));
      }
      return Value::Dict(std::move(dict));
    }
    case ExprKind::kAttr:
      return GetAttr(Eval(*e.args[0], scope), e.name);
    case ExprKind::kItem: {
      const Value obj = Eval(*e.args[0], scope);
      return GetItem(obj, Eval(*e.args[1], scope));
    }
    case ExprKind::kSlice:
      return Slice(e, scope);
    case ExprKind::kCall: {
      const Value callee = Eval(*e.args[0], scope);
      return Call(callee, EvalArgs(e, 1, scope));
    }
    case ExprKind::kFilter: {
      const Value subject = Eval(*e.args[0], scope);
      return e.filter(*this, subject, EvalArgs(e, 1, scope));
    }
    case ExprKind::kTest: {
      const Value subject = Eval(*e.args[0], scope);
      return Value::Bool(e.test(*this, subject, EvalArgs(e, 1, scope)) != e.negated);
    }
    case ExprKind::kNeg:
    case ExprKind::kPos:
      return Negate(Eval(*e.args[0], scope), e.kind == ExprKind::kNeg);
    case ExprKind::kNot:
      return Value::Bool(!Eval(*e.args[0], scope).Truthy());
    case ExprKind::kBinary: {
      const Value a = Eval(*e.args[0], scope);
      return Arithmetic(e.op, a, Eval(*e.args[1], scope));
    }
    case ExprKind::kCompare: {
      Value left = Eval(*e.args[0], scope);
      for (size_t i = 0; i < e.cmp_ops.size(); ++i) {
        Value right = Eval(*e.args[i + 1], scope);
        if (!Compare(e.cmp_ops[i], left, right)) return Value::Bool(false);
        left = std::move(right);
      }
      return Value::Bool(true);
    }
    case ExprKind::kAnd: {
      Value left = Eval(*e.args[0], scope);
      return left.Truthy() ? Eval(*e.args[1], scope) : left;
    }
    case ExprKind::kOr: {
      Value left = Eval(*e.args[0], scope);
      return left.Truthy() ? left : Eval(*e.args[1], scope);
    }
    case ExprKind::kCond:
      if (Eval(*e.args[0], scope).Truthy()) return Eval(*e.args[1], scope);
      if (e.args[2]) return Eval(*e.args[2], scope);
      return Value::Undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    case ExprKind::kConcat: {
      std::string out;
      for (const auto& a : e.args) out += Eval(*a, scope).ToString();
      return Value::String(std::move(out));
    }
  }
  return Value::None();
}

}  // namespace ptxserve::chat
