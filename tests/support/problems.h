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
