// RunForward's order of ops and its stop at the first failure, over ops that record what
// they are asked to do.
#include "engine/model/forward.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ptxserve {
namespace {

std::string Name(Act a) {
  constexpr const char* kNames[] = {"residual", "normed", "q",   "k",    "v",     "attention",
                                    "gate",     "up",     "mlp", "rows", "logits"};
  return kNames[static_cast<int>(a)];
}

std::string Name(WeightRef w) {
  constexpr const char* kNames[] = {"attn_norm", "wq",         "wk",     "wv",
                                    "wo",        "mlp_norm",   "w_gate", "w_up",
                                    "w_down",    "final_norm", "lm_head"};
  return w.layer < 0 ? kNames[static_cast<int>(w.role)]
                     : absl::StrCat(w.layer, ".", kNames[static_cast<int>(w.role)]);
}

class RecordingOps final : public ForwardOps {
 public:
  std::vector<std::string> log;
  size_t fail_at = SIZE_MAX;  // the op (index into log) that returns an error

  absl::Status Embed() override { return Record("embed"); }
  absl::Status RmsNorm(Act in, WeightRef w, Act out) override {
    return Record(absl::StrCat("norm ", Name(in), "*", Name(w), "->", Name(out)));
  }
  absl::Status Linear(Act in, std::initializer_list<Projection> ps) override {
    std::string s = absl::StrCat("linear ", Name(in), ":");
    for (const Projection& p : ps) {
      absl::StrAppend(&s, " ", Name(p.weight), p.accumulate ? "+>" : "->", Name(p.out));
    }
    return Record(s);
  }
  absl::Status RopeAndWriteKv(int layer) override {
    return Record(absl::StrCat("rope+kv ", layer));
  }
  absl::Status Attention(int layer) override { return Record(absl::StrCat("attention ", layer)); }
  absl::Status SiluMul() override { return Record("silu_mul"); }
  absl::Status GatherRows() override { return Record("gather"); }

 private:
  absl::Status Record(std::string op) {
    log.push_back(std::move(op));
    if (log.size() - 1 == fail_at) return absl::InternalError(absl::StrCat("op ", fail_at));
    return absl::OkStatus();
  }
};

ModelConfig TwoLayers() {
  ModelConfig c;
  c.num_layers = 2;
  return c;
}

std::vector<std::string> Layer(int l) {
  const std::string p = absl::StrCat(l, ".");
  return {"norm residual*" + p + "attn_norm->normed",
          "linear normed: " + p + "wq->q " + p + "wk->k " + p + "wv->v",
          absl::StrCat("rope+kv ", l),
          absl::StrCat("attention ", l),
          "linear attention: " + p + "wo+>residual",
          "norm residual*" + p + "mlp_norm->normed",
          "linear normed: " + p + "w_gate->gate " + p + "w_up->up",
          "silu_mul",
          "linear mlp: " + p + "w_down+>residual"};
}

TEST(ForwardTest, EmbedsRunsEveryLayerThenTheHeadOverTheRows) {
  RecordingOps ops;
  ASSERT_TRUE(RunForward(TwoLayers(), 3, ops).ok());
  std::vector<std::string> want = {"embed"};
  for (int l = 0; l < 2; ++l) {
    for (std::string& op : Layer(l)) want.push_back(std::move(op));
  }
  want.insert(want.end(), {"gather", "norm rows*final_norm->rows", "linear rows: lm_head->logits"});
  EXPECT_EQ(ops.log, want);
}

TEST(ForwardTest, NoLogitsRowsSkipsTheHead) {
  RecordingOps ops;
  ASSERT_TRUE(RunForward(TwoLayers(), 0, ops).ok());
  ASSERT_EQ(ops.log.size(), 1 + 2 * Layer(0).size());
  EXPECT_EQ(ops.log.back(), "linear mlp: 1.w_down+>residual");
}

TEST(ForwardTest, StopsAtTheFirstFailingOpAndReturnsItsStatus) {
  for (size_t fail_at : {size_t{0}, size_t{4}, size_t{12}, size_t{19}, size_t{21}}) {
    RecordingOps ops;
    ops.fail_at = fail_at;
    const absl::Status s = RunForward(TwoLayers(), 1, ops);
    EXPECT_EQ(s, absl::InternalError(absl::StrCat("op ", fail_at)));
    EXPECT_EQ(ops.log.size(), fail_at + 1) << "ran on after op " << fail_at;
  }
}

}  // namespace
}  // namespace ptxserve
