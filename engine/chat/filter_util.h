// Helpers shared by the filter files.
#pragma once

#include <string_view>

#include "engine/chat/ast.h"
#include "engine/chat/evaluator.h"
#include "engine/chat/value.h"

namespace ptxserve::chat {

// jinja2's make_attrgetter: `attribute` is a key, an index, or a dotted path of them
// ("function.name", "0"), each step an environment.getitem.
Value AttributeOf(Evaluator& ev, const Value& item, const Value& attribute);

// map, select, reject, selectattr, rejectattr, unique, sort, reverse, sum, min, max.
FilterFn FindSequenceFilter(std::string_view name);

}  // namespace ptxserve::chat
