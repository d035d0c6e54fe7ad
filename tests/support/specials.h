// Non-finite values in a cache and the comparison of outputs that hold some: the tests that put a
// NaN or an infinity into V (the CPU backend's and the CUDA kernels' emulated runs) share them.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "reference/reference.h"
#include "src/backends/backend.h"
#include "src/model/problem.h"
#include "src/model/problem_gen.h"
#include "src/validation/check.h"

namespace attn::test {

// Sets element `dim` of value row `key` of sequence b, KV head kvh, to a NaN or to +infinity in
// the cache's own dtype. E4M3 has no infinity: it gets its NaN (S.1111.111) either way.
inline void put_special_value(Problem& pr, int b, int kvh, int key, int dim, bool nan) {
  const std::size_t at = std::size_t(pr.value_index(b, kvh, key, dim));
  void* cache = pr.value_cache.raw();
  switch (pr.params.cache_dtype()) {
  case DType::f32: {
    const float v =
        nan ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    std::memcpy(static_cast<float*>(cache) + at, &v, sizeof v);
    return;
  }
  case DType::f16:
    static_cast<uint16_t*>(cache)[at] = nan ? 0x7e00 : 0x7c00;
    return;
  case DType::bf16:
    static_cast<uint16_t*>(cache)[at] = nan ? 0x7fc0 : 0x7f80;
    return;
  case DType::fp8_e4m3:
    static_cast<uint8_t*>(cache)[at] = 0x7f;
    return;
  case DType::fp8_e5m2:
    static_cast<uint8_t*>(cache)[at] = nan ? 0x7f : 0x7c; // S.11111.11, 0.11111.00
    return;
  }
}

// The prefill problem of the special-value tests: a 100-row prompt and a 3-row chunk over 100
// keys, with a NaN at key 40 of the prompt (rows 0..39 do not see it) and an infinity at key 98
// of the chunk (its first row, at 97, does not), KV head 1, dimension 5. Under a causal mask,
// each query head of KV head 1 gets kPrefillSpecialRows non-finite outputs.
inline constexpr int kPrefillSpecialRows = 60 + 2;
inline Problem prefill_with_specials(const AttnParams& p, const GenOptions& g) {
  Problem pr = make_prefill_problem(p, {100, 3}, {100, 100}, g);
  put_special_value(pr, 0, 1, 40, 5, true);
  put_special_value(pr, 1, 1, 98, 5, false);
  return pr;
}

// The decode problem of the special-value tests: an infinity at the last key of a 300-token and a
// 77-token context, KV head 1, dimension 5: two non-finite outputs per query head of KV head 1.
inline Problem decode_with_last_key_infinities(const AttnParams& p, const GenOptions& g) {
  Problem pr = make_decode_problem(p, {300, 77}, g);
  put_special_value(pr, 0, 1, 299, 5, false);
  put_special_value(pr, 1, 1, 76, 5, false);
  return pr;
}

// Compares every output element with the reference: a non-finite one must be the same (NaN for
// NaN, an infinity for that infinity), a finite one within the tolerance. Returns how many were
// non-finite; the first mismatch is a failure and ends the comparison.
inline int specials_matching(const ReferenceResult& ref, const RunOutput& o, const Tolerance& tol,
                             const std::string& what) {
  int specials = 0;
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    const double want = ref.out[i];
    const double got = o.out.get(i);
    if (!std::isfinite(want)) {
      ++specials;
      if (std::isnan(want) ? !std::isnan(got) : got != want) {
        ADD_FAILURE() << what << " element " << i << ": got " << got << ", want " << want;
        return specials;
      }
    } else if (!(std::abs(got - want) <= tol.atol + tol.rtol * std::abs(want))) {
      ADD_FAILURE() << what << " element " << i << ": got " << got << ", want " << want;
      return specials;
    }
  }
  return specials;
}

} // namespace attn::test
