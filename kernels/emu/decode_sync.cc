// Decode rules for warp collectives (shfl, vote, redux), barriers, and control flow and
// ordering instructions (bra, ret/exit, membar/fence, no-ops).
#include "kernels/emu/decoder.h"

namespace ptxserve::emu {
namespace {

// 1 when a membermask operand is an immediate (the same in every lane).
uint8_t UniformFlag(const RawOperand& o) { return o.kind == RawOperand::kInt ? 1 : 0; }

}  // namespace

absl::Status Decoder::Shfl() {
  if (auto s = ParseMods(kMType | kMShfl | kMSync); !s.ok()) return s;
  if (!m_.sync) return Err("shfl without .sync is not supported (use shfl.sync)");
  if (!m_.has_shfl) return Err("missing mode (.up, .down, .bfly, .idx)");
  if (OneType() != Ty::kB32) return Err("shfl.sync takes .b32");
  if (auto s = NeedOps(5); !s.ok()) return s;
  RawOperand d = r_.ops[0];
  if (d.has_reg2) {
    if (!d.reg2.pred) return Err("second destination must be a predicate register");
    in_.pd[0] = d.reg2.index;
    in_.has_pd2 = true;
    d.has_reg2 = false;
  }
  auto ds = Dst(d, Ty::kB32);
  if (!ds.ok()) return ds.status();
  in_.d[0] = *ds;
  for (int k = 0; k < 4; ++k) {
    if (auto s = SetSrc(k, k + 1, Ty::kB32); !s.ok()) return s;
  }
  in_.mode = static_cast<uint8_t>(m_.shfl);
  in_.mode2 = UniformFlag(r_.ops[4]);
  in_.fn = SelectShfl(m_.shfl);
  return absl::OkStatus();
}

absl::Status Decoder::Vote() {
  if (auto s = ParseMods(kMType | kMVote | kMSync); !s.ok()) return s;
  if (!m_.sync) return Err("vote without .sync is not supported (use vote.sync)");
  if (!m_.has_vote) return Err("missing mode (.all, .any, .uni, .ballot)");
  if (auto s = NeedOps(3); !s.ok()) return s;
  const bool ballot = m_.vote == VoteMode::kBallot;
  if (OneType() != (ballot ? Ty::kB32 : Ty::kPred)) {
    return Err("vote.sync.%s takes %s", ballot ? "ballot" : "all/any/uni",
               ballot ? ".b32" : ".pred");
  }
  if (ballot) {
    if (auto s = SetDst(0, 0, Ty::kB32); !s.ok()) return s;
  } else {
    if (auto s = PredDst(0, r_.ops[0]); !s.ok()) return s;
  }
  if (auto s = PredSrc(0, r_.ops[1]); !s.ok()) return s;
  if (auto s = SetSrc(0, 2, Ty::kB32); !s.ok()) return s;
  in_.mode2 = UniformFlag(r_.ops[2]);
  in_.fn = SelectVote(m_.vote);
  return absl::OkStatus();
}

absl::Status Decoder::Redux() {
  if (auto s = ParseMods(kMType | kMAop | kMSync); !s.ok()) return s;
  if (!m_.sync) return Err("redux needs .sync");
  if (auto s = NeedTypes(1); !s.ok()) return s;
  if (auto s = NeedOps(3); !s.ok()) return s;
  const Ty t = m_.types[0];
  if (auto s = SetDst(0, 0, t); !s.ok()) return s;
  if (auto s = SetSrc(0, 1, t); !s.ok()) return s;
  if (auto s = SetSrc(1, 2, Ty::kB32); !s.ok()) return s;
  in_.mode2 = UniformFlag(r_.ops[2]);
  in_.fn = SelectRedux(m_.aop, t);
  if (in_.fn == nullptr) return Err("unsupported redux operation/type");
  return absl::OkStatus();
}

absl::Status Decoder::Bar() {
  std::vector<std::string> mods;
  for (const auto& m : r_.mods) {
    if (m != "cta") mods.push_back(m);
  }
  const bool is_bar = op_ == Op::kBar;
  if (is_bar && mods.size() == 2 && mods[0] == "warp" && mods[1] == "sync") {
    if (auto s = NeedOps(1); !s.ok()) return s;
    if (auto s = SetSrc(0, 0, Ty::kB32); !s.ok()) return s;
    in_.mode2 = UniformFlag(r_.ops[0]);
    in_.fn = SelectWarpSync();
    return absl::OkStatus();
  }
  bool aligned = is_bar, arrive = false;
  int red = 0;  // bar.red: 1 popc, 2 and, 3 or
  if (mods.empty()) return Err("missing .sync, .arrive or .red");
  size_t next = 1;
  if (mods[0] == "sync") {
  } else if (mods[0] == "arrive") {
    arrive = true;
  } else if (mods[0] == "red") {
    const std::string op = mods.size() > 1 ? mods[1] : "";
    const std::string ty = mods.size() > 2 ? mods[2] : "";
    if (op == "popc" && ty == "u32") {
      red = 1;
    } else if ((op == "and" || op == "or") && ty == "pred") {
      red = op == "and" ? 2 : 3;
    } else {
      return Err("expected bar.red.popc.u32, bar.red.and.pred or bar.red.or.pred");
    }
    next = 3;
  } else {
    return Err("unknown modifier '.%s'", mods[0]);
  }
  for (size_t i = next; i < mods.size(); ++i) {
    if (!is_bar && mods[i] == "aligned") {
      aligned = true;
    } else {
      return Err("unknown modifier '.%s'", mods[i]);
    }
  }
  size_t first = 0;
  if (red != 0) {
    // bar.red d, a{, b}, {!}c
    if (auto s = NeedOps(3, 4); !s.ok()) return s;
    if (red == 1) {
      if (auto s = SetDst(0, 0, Ty::kU32); !s.ok()) return s;
    } else {
      if (auto s = PredDst(0, r_.ops[0]); !s.ok()) return s;
    }
    if (auto s = PredSrc(0, r_.ops.back()); !s.ok()) return s;
    first = 1;
  } else {
    if (auto s = NeedOps(arrive ? 2 : 1, 2); !s.ok()) return s;
  }
  const size_t nbar = r_.ops.size() - first - (red != 0 ? 1 : 0);
  if (auto s = SetSrc(0, first, Ty::kU32); !s.ok()) return s;
  const bool has_count = nbar == 2;
  if (has_count) {
    if (auto s = SetSrc(1, first + 1, Ty::kU32); !s.ok()) return s;
  }
  in_.mode = static_cast<uint8_t>((has_count ? 1 : 0) | (aligned ? 2 : 0) | (red != 0 ? 4 : 0));
  in_.mode2 = static_cast<uint8_t>(red);
  in_.ctl = arrive ? Ctl::kBarArrive : Ctl::kBar;
  return absl::OkStatus();
}

absl::Status Decoder::Misc() {
  switch (op_) {
    case Op::kActivemask:
      if (auto s = ParseMods(kMType); !s.ok()) return s;
      if (OneType() != Ty::kB32) return Err("activemask takes .b32");
      if (auto s = NeedOps(1); !s.ok()) return s;
      if (auto s = SetDst(0, 0, Ty::kB32); !s.ok()) return s;
      in_.fn = SelectActiveMask();
      return absl::OkStatus();
    case Op::kMembar:
    case Op::kFence:
      // Warps of a block run one after another; blocks on other host threads see this
      // thread's writes in order once a host fence stands between them (SelectFence).
      for (const auto& m : r_.mods) {
        static const char* kOk[] = {
            "cta",   "gl",    "sys",   "gpu",         "cluster",         "sc",    "acq_rel",
            "proxy", "async", "alias", "shared::cta", "shared::cluster", "global"};
        bool ok = false;
        for (const char* k : kOk) ok = ok || m == k;
        if (!ok) return Err("unknown modifier '.%s'", m);
      }
      if (auto s = NeedOps(0); !s.ok()) return s;
      in_.fn = SelectFence();
      return absl::OkStatus();
    case Op::kPrefetch:
    case Op::kPrefetchu:
    case Op::kNanosleep:
      in_.fn = SelectNop();
      return absl::OkStatus();
    case Op::kGriddepcontrol:
      // Launches run one after another: the instructions mark what the dependent-launch
      // race check needs (dependent_launch.h).
      if (r_.mods.size() != 1 || (r_.mods[0] != "launch_dependents" && r_.mods[0] != "wait")) {
        return Err("expected griddepcontrol.launch_dependents or griddepcontrol.wait");
      }
      if (auto s = NeedOps(0); !s.ok()) return s;
      if (r_.mods[0] == "wait") {
        b_.fn->waits_on_grid = true;
        in_.fn = SelectGridWait();
      } else {
        b_.fn->triggers_dependents = true;
        in_.fn = SelectLaunchDependents();
      }
      return absl::OkStatus();
    case Op::kBra: {
      if (auto s = ParseMods(kMUni); !s.ok()) return s;
      if (auto s = NeedOps(1); !s.ok()) return s;
      const RawOperand& l = r_.ops[0];
      if (l.kind != RawOperand::kSym) return Err("branch target must be a label");
      auto it = b_.labels.find(l.name);
      if (it == b_.labels.end()) return Err("unknown label '%s'", l.name);
      in_.target = it->second;
      in_.mode = m_.uni ? 1 : 0;
      in_.ctl = Ctl::kBra;
      return absl::OkStatus();
    }
    case Op::kRet:
    case Op::kExit:
      if (auto s = ParseMods(kMUni); !s.ok()) return s;
      if (auto s = NeedOps(0); !s.ok()) return s;
      in_.ctl = Ctl::kExit;
      return absl::OkStatus();
    default:
      return Err("unsupported instruction");
  }
}

}  // namespace ptxserve::emu
