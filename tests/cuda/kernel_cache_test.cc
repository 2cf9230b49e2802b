// The kernel cache on the emulated device: compile once per key (also under concurrent
// requests), cached failures, launch and hit counting, the compile callback.
#include "engine/cuda/kernel_cache.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/emulated_driver.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/residual_add.h"

namespace ptxserve::cuda {
namespace {

using ::testing::HasSubstr;

class KernelCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetEmulatedFault({});
    auto t = LoadEmulatedDriver();
    ASSERT_TRUE(t.ok()) << t.status();
    auto d = Device::Open(*std::move(t));
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = *std::move(d);
  }

  // The residual_add kernel under `key`, counting generator calls.
  KernelSpec Spec(const std::string& key, std::atomic<int>* calls, int delay_ms = 0) {
    KernelSpec s;
    s.key = key;
    s.entry = kernels::testing::kResidualAddEntry;
    s.generate = [calls, delay_ms]() {
      calls->fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      return kernels::testing::GenerateResidualAdd({});
    };
    return s;
  }

  std::unique_ptr<Device> device_;
};

TEST_F(KernelCacheTest, CompilesOncePerKey) {
  std::vector<std::string> compiled;
  KernelCache cache(device_.get(), [&](absl::string_view key, double s) {
    compiled.emplace_back(key);
    EXPECT_GE(s, 0.0);
  });
  std::atomic<int> calls{0};
  auto a = cache.Get(Spec("residual_add:a", &calls));
  ASSERT_TRUE(a.ok()) << a.status();
  auto again = cache.Get(Spec("residual_add:a", &calls));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*a, *again);
  auto b = cache.Get(Spec("residual_add:b", &calls));
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(compiled, (std::vector<std::string>{"residual_add:a", "residual_add:b"}));
  const KernelCacheStats st = cache.stats();
  EXPECT_EQ(st.misses, 2);
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.modules, 2);
  EXPECT_EQ(st.failures, 0);
  EXPECT_GT(st.compile_seconds, 0.0);
}

TEST_F(KernelCacheTest, ConcurrentRequestsForOneKeyCompileOnce) {
  KernelCache cache(device_.get());
  std::atomic<int> calls{0};
  std::vector<const CompiledKernel*> got(8, nullptr);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto k = cache.Get(Spec("residual_add:shared", &calls, /*delay_ms=*/50));
      if (k.ok()) got[i] = *k;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(calls.load(), 1);
  for (const CompiledKernel* k : got) EXPECT_EQ(k, got[0]);
  ASSERT_NE(got[0], nullptr);
  const KernelCacheStats st = cache.stats();
  EXPECT_EQ(st.misses, 1);
  EXPECT_EQ(st.hits, 7);
}

TEST_F(KernelCacheTest, FailuresAreCachedAndNamed) {
  KernelCache cache(device_.get());
  int calls = 0;
  KernelSpec bad;
  bad.key = "gemm:n0:broken";
  bad.entry = "gemm";
  bad.generate = [&calls]() -> absl::StatusOr<std::string> {
    ++calls;
    return absl::InvalidArgumentError("gemm config: n = 0");
  };
  auto k = cache.Get(bad);
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("generating kernel gemm:n0:broken"));
  EXPECT_FALSE(cache.Get(bad).ok());
  EXPECT_EQ(calls, 1);
  KernelSpec jit;
  jit.key = "not_ptx";
  jit.entry = "k";
  jit.generate = []() -> absl::StatusOr<std::string> { return std::string("not ptx at all"); };
  auto j = cache.Get(jit);
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(std::string(j.status().message()), HasSubstr("cuModuleLoadDataEx (kernel not_ptx)"));
  KernelSpec entry;
  entry.key = "residual_add:wrong_entry";
  entry.entry = "no_such_entry";
  entry.generate = [] { return kernels::testing::GenerateResidualAdd({}); };
  auto e = cache.Get(entry);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("cuModuleGetFunction(no_such_entry)"));
  EXPECT_EQ(cache.stats().failures, 3);
  EXPECT_EQ(cache.stats().modules, 0);
}

// Whether a kernel is a programmatic dependent launch is its spec's word (the Config's
// kernels::GridDependent, which kernels_generate_test holds to the PTX), not read from the
// PTX at compile time.
TEST_F(KernelCacheTest, GridDependentComesFromTheSpec) {
  KernelCache cache(device_.get());
  std::atomic<int> calls{0};
  for (const bool dependent : {false, true}) {
    KernelSpec spec = Spec(absl::StrCat("residual_add:dependent", dependent), &calls);
    spec.grid_dependent = dependent;
    auto k = cache.Get(spec);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ((*k)->grid_dependent, dependent);
  }
}

TEST_F(KernelCacheTest, LaunchesCountHitsAndLaunchesByName) {
  KernelCache cache(device_.get());
  std::atomic<int> calls{0};
  auto k = cache.Get(Spec("residual_add:launch", &calls));
  ASSERT_TRUE(k.ok()) << k.status();
  auto x = device_->Alloc(64, "x");
  ASSERT_TRUE(x.ok());
  ASSERT_TRUE(device_->Memset(x->ptr(), 0, 64, "x").ok());
  CUdeviceptr px = x->ptr();
  uint32_t n = 16;
  void* params[] = {&px, &px, &n};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(cache.Launch(**k, kernels::testing::ResidualAddLaunch({}, n), params).ok());
  }
  ASSERT_TRUE(device_->Synchronize("test").ok());
  const KernelCacheStats st = cache.stats();
  EXPECT_EQ(st.hits, 3);
  EXPECT_EQ(st.misses, 1);
  EXPECT_EQ(st.launches.at("residual_add"), 3);
}

}  // namespace
}  // namespace ptxserve::cuda
