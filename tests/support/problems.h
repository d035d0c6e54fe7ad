// Problems for tests: attention parameters and generator options with the defaults the model's
// tests share, and the check that a call fails with one InputError line naming what is wrong.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include <gtest/gtest.h>

#include "src/model/errors.h"
#include "src/model/problem.h"
#include "src/model/problem_gen.h"

namespace attn::test {

inline AttnParams params(int heads = 8, int kv_heads = 2, int head_dim = 64, int block_size = 16,
                         DType dtype = DType::f16) {
  AttnParams p;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = block_size;
  p.dtype = dtype;
  return p;
}

inline GenOptions gen(uint64_t seed, bool shared_prefix = false, double pool_factor = 3.0) {
  GenOptions o;
  o.seed = seed;
  o.shared_prefix = shared_prefix;
  o.pool_factor = pool_factor;
  return o;
}

// Case `c` of a suite's fp8 cases: p over an E4M3 cache for even c, E5M2 for odd, under the
// three query dtypes in the suite's order, in turn every two cases (every pairing in six).
inline AttnParams fp8_variant(AttnParams p, int c, const DType (&queries)[3]) {
  p.kv_dtype = c % 2 == 0 ? DType::fp8_e4m3 : DType::fp8_e5m2;
  p.dtype = queries[(c / 2) % 3];
  return p;
}

// An fp8 cache's test scales, far from 1 so that a dropped, doubled or swapped scale fails:
// 1/64 for K and 4 for V per tensor, or per KV head 24 and 0.37 for K, 0.37 and 1/64 for V in
// turn (values near E4M3's 448 and in the subnormals).
inline void far_fp8_scales(GenOptions& g, bool per_head, int num_kv_heads) {
  g.k_scale.clear();
  g.v_scale.clear();
  if (!per_head) {
    g.k_scale = {1.0f / 64};
    g.v_scale = {4.0f};
    return;
  }
  for (int h = 0; h < num_kv_heads; ++h) {
    g.k_scale.push_back(h % 2 == 0 ? 24.0f : 0.37f);
    g.v_scale.push_back(h % 2 == 0 ? 0.37f : 1.0f / 64);
  }
}

// Runs `f`, expects an InputError whose one-line message contains every fragment.
inline void expect_input_error(const std::function<void()>& f,
                               std::initializer_list<std::string> parts, const std::string& what) {
  try {
    f();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << what << ": " << msg;
    for (const auto& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos)
          << what << ": message \"" << msg << "\" does not contain \"" << p << "\"";
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw a non-InputError: " << e.what();
    return;
  }
  ADD_FAILURE() << what << ": no InputError thrown";
}

} // namespace attn::test
