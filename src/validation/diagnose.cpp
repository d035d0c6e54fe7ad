#include "src/validation/diagnose.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "src/model/dtype.h"
#include "src/model/fp8.h"
#include "src/model/kv_layout.h"
#include "src/model/rng.h"
#include "src/validation/engine_bugs.h"

namespace attn {

namespace {

// Problems above this many multiply-adds (visible query-key pairs x head_dim) are not
// diagnosed: each explanation costs a reference computation.
constexpr double kMaxDiagnosedWork = 5e8;

struct Alternative {
  const char* what;
  std::function<bool(const AttnParams&)> applies;
  std::function<void(AttnParams&)> change;
};

const std::vector<Alternative>& alternatives() {
  static const std::vector<Alternative> alts = {
      {"the sliding window is ignored",
       [](const AttnParams& p) { return p.window_left >= 0 || p.window_right >= 0; },
       [](AttnParams& p) { p.window_left = p.window_right = -1; }},
      {"window_left is ignored (window_right is applied)",
       [](const AttnParams& p) { return p.window_left >= 0 && p.window_right >= 0; },
       [](AttnParams& p) { p.window_left = -1; }},
      {"window_right is ignored (window_left is applied)",
       [](const AttnParams& p) { return p.window_left >= 0 && p.window_right >= 0; },
       [](AttnParams& p) { p.window_right = -1; }},
      {"the softcap is ignored", [](const AttnParams& p) { return p.softcap > 0; },
       [](AttnParams& p) { p.softcap = 0; }},
      // After each alone: where the window covers every key, ignoring it changes nothing, and a
      // kernel that ignores only the softcap was said to ignore both (an outside audit).
      {"the sliding window and the softcap are ignored",
       [](const AttnParams& p) {
         return (p.window_left >= 0 || p.window_right >= 0) && p.softcap > 0;
       },
       [](AttnParams& p) {
         p.window_left = p.window_right = -1;
         p.softcap = 0;
       }},
      {"every mask is ignored (full attention where a causal window was asked)",
       [](const AttnParams& p) { return p.causal && (p.window_left >= 0 || p.window_right >= 0); },
       [](AttnParams& p) {
         p.causal = false;
         p.window_left = p.window_right = -1;
       }},
      {"non-causal output where causal was asked (the causal mask is ignored)",
       [](const AttnParams& p) { return p.causal; }, [](AttnParams& p) { p.causal = false; }},
      {"causal output where non-causal was asked (causal=false is ignored: the kernel always "
       "masks)",
       [](const AttnParams& p) { return !p.causal; }, [](AttnParams& p) { p.causal = true; }},
      {"the given scale is ignored (1/sqrt(head_dim) is used)",
       [](const AttnParams& p) {
         return p.scale && std::abs(*p.scale - 1.0 / std::sqrt(double(p.head_dim))) > 1e-9;
       },
       [](AttnParams& p) { p.scale.reset(); }},
      // The scale mistakes an outside audit's plugin made, which failed unexplained: the scale
      // applied twice (to q and again to the scores), not at all, and 1/sqrt(num_heads *
      // head_dim) (a hidden size where the head's belongs).
      {"the scale is applied twice (scale squared)",
       [](const AttnParams& p) { return std::abs(p.effective_scale() - 1.0) > 1e-9; },
       [](AttnParams& p) { p.scale = p.effective_scale() * p.effective_scale(); }},
      {"no scale is applied (the scores are the plain dot products)",
       [](const AttnParams& p) { return std::abs(p.effective_scale() - 1.0) > 1e-9; },
       [](AttnParams& p) { p.scale = 1.0; }},
      {"the scale is 1/sqrt(num_heads * head_dim), not 1/sqrt(head_dim)",
       [](const AttnParams& p) { return !p.scale && p.num_heads > 1; },
       [](AttnParams& p) { p.scale = 1.0 / std::sqrt(double(p.num_heads) * p.head_dim); }},
      {"window_left is one key too wide", [](const AttnParams& p) { return p.window_left >= 0; },
       [](AttnParams& p) { p.window_left += 1; }},
      {"window_left is one key too narrow", [](const AttnParams& p) { return p.window_left >= 1; },
       [](AttnParams& p) { p.window_left -= 1; }},
      {"window_right is one key too wide", [](const AttnParams& p) { return p.window_right >= 0; },
       [](AttnParams& p) { p.window_right += 1; }},
      {"window_right is one key too narrow",
       [](const AttnParams& p) { return p.window_right >= 1; },
       [](AttnParams& p) { p.window_right -= 1; }},
  };
  return alts;
}

// Whether two outputs agree element by element within the tolerance (NaN only with NaN).
bool same_output(const HostTensor& a, const HostTensor& b, const Tolerance& tol) {
  if (a.numel() != b.numel()) {
    return false;
  }
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.get(std::size_t(i));
    const double y = b.get(std::size_t(i));
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) {
        return false;
      }
      continue;
    }
    if (std::abs(x - y) > tol.atol + tol.rtol * std::abs(y)) {
      return false;
    }
  }
  return true;
}

bool any_visible(const ReferenceResult& ref) {
  return std::any_of(ref.lse.begin(), ref.lse.end(), [](double l) { return std::isfinite(l); });
}

// A copy of `pr` whose caches hold new random values (same shapes, tables and lengths).
Problem with_new_cache_values(const Problem& pr) {
  Problem q = pr;
  Rng rng(pr.seed ^ 0x5eed0ca11edc0deull);
  // In batches (Rng::normals: the stream of one normal() per element, drawn several at a time):
  // one at a time, these draws were a fifth of a verify run that diagnosed every case.
  std::vector<double> v(4096);
  for (HostTensor* t : {&q.key_cache, &q.value_cache}) {
    const auto n = std::size_t(t->numel());
    for (std::size_t at = 0; at < n; at += v.size()) {
      const std::size_t k = std::min(v.size(), n - at);
      rng.normals(v.data(), k);
      for (std::size_t i = 0; i < k; ++i) {
        t->set(at + i, float(v[i]));
      }
    }
  }
  return q;
}

// A copy of `pr` whose slots past each sequence's length in its last block hold `value` where
// they held NaN (a nan-tails case's poison): what no correct kernel reads, made harmless.
Problem with_finite_tails(const Problem& pr, float value) {
  Problem q = pr;
  const int bs = pr.params.block_size;
  for (int b = 0; b < pr.batch; ++b) {
    const int k = pr.k_len(b);
    for (int j = k; j < (k + bs - 1) / bs * bs; ++j) {
      for (int h = 0; h < pr.params.num_kv_heads; ++h) {
        for (int d = 0; d < pr.params.head_dim; ++d) {
          for (auto [t, i] : {std::pair{&q.key_cache, pr.key_index(b, h, j, d)},
                              std::pair{&q.value_cache, pr.value_index(b, h, j, d)}}) {
            if (std::isnan(t->get(std::size_t(i)))) {
              t->set(std::size_t(i), value);
            }
          }
        }
      }
    }
  }
  return q;
}

// A copy of `pr` with every physical block moved to another slot of the pool and the block
// tables rewritten to match: the same logical keys and values, stored elsewhere.
Problem with_blocks_moved(const Problem& pr) {
  Problem q = pr;
  const int nb = pr.num_blocks;
  std::vector<int32_t> to(static_cast<std::size_t>(nb));
  std::iota(to.begin(), to.end(), 0);
  Rng rng(pr.seed ^ 0xb10c7ab1e5ull);
  for (int i = nb - 1; i > 0; --i) { // Fisher-Yates
    std::swap(to[std::size_t(i)], to[std::size_t(rng.range(0, i))]);
  }
  bool identity = true;
  for (int i = 0; i < nb; ++i) {
    identity = identity && to[std::size_t(i)] == i;
  }
  if (identity && nb > 1) {
    std::rotate(to.begin(), to.begin() + 1, to.end()); // never the identity
  }
  // Every layout keeps one block's elements together, block index first.
  for (auto [src, dst] :
       {std::pair{&pr.key_cache, &q.key_cache}, std::pair{&pr.value_cache, &q.value_cache}}) {
    const std::size_t per_block = src->data.size() / std::size_t(std::max(nb, 1));
    for (int b = 0; b < nb; ++b) {
      std::copy_n(src->data.begin() + std::ptrdiff_t(std::size_t(b) * per_block), per_block,
                  dst->data.begin() + std::ptrdiff_t(std::size_t(to[std::size_t(b)]) * per_block));
    }
  }
  for (int32_t& e : q.block_tables) {
    if (e >= 0 && e < nb) {
      e = to[std::size_t(e)];
    }
  }
  return q;
}

// The mistakes engines make reading an fp8 cache (SPEC.md "fp8 KV caches"), each as the problem
// whose reference a kernel with that mistake matches: the scales' values and placement, and the
// format the bytes are read as.
struct CacheMistake {
  const char* what;
  std::function<bool(const Problem&)> applies;
  std::function<void(Problem&)> change;
};

std::vector<float> squared(std::vector<float> s) {
  for (float& x : s) {
    x *= x;
  }
  return s;
}

std::vector<float> inverted(std::vector<float> s) {
  for (float& x : s) {
    x = 1.0f / x;
  }
  return s;
}

// Per-KV-head scales read through a vector of n lanes: head j gets the scale of head j % n.
void wrap_scales(Problem& p, int n) {
  for (auto* s : {&p.k_scale, &p.v_scale}) {
    for (std::size_t j = std::size_t(n); j < s->size(); ++j) {
      (*s)[j] = (*s)[j % std::size_t(n)];
    }
  }
}

// Whether reading the scales through n lanes changes them.
bool wraps_scales(const Problem& p, int n) {
  for (const auto* s : {&p.k_scale, &p.v_scale}) {
    for (std::size_t j = std::size_t(n); j < s->size(); ++j) {
      if ((*s)[j] != (*s)[j % std::size_t(n)]) {
        return true;
      }
    }
  }
  return false;
}

bool scale_not_one(const std::vector<float>& s) {
  return std::any_of(s.begin(), s.end(), [](float x) { return x != 1.0f; });
}

// An fp8 byte of a subnormal number: exponent field 0, mantissa not 0.
bool fp8_subnormal(std::byte b, DType format) {
  const auto magnitude = std::to_integer<unsigned>(b) & 0x7fu;
  return magnitude != 0 && (magnitude >> fp8_spec(fp8_format(format)).man_bits) == 0;
}

bool has_fp8_subnormals(const Problem& p) {
  const DType f = p.params.cache_dtype();
  for (const HostTensor* t : {&p.key_cache, &p.value_cache}) {
    if (std::any_of(t->data.begin(), t->data.end(),
                    [f](std::byte b) { return fp8_subnormal(b, f); })) {
      return true;
    }
  }
  return false;
}

const std::vector<CacheMistake>& cache_mistakes() {
  static const std::vector<CacheMistake> m = {
      {"the fp8 scales are ignored (k_scale and v_scale taken as 1)",
       [](const Problem& p) { return scale_not_one(p.k_scale) && scale_not_one(p.v_scale); },
       [](Problem& p) { p.k_scale.clear(), p.v_scale.clear(); }},
      {"k_scale is ignored (taken as 1)", [](const Problem& p) { return scale_not_one(p.k_scale); },
       [](Problem& p) { p.k_scale.clear(); }},
      {"v_scale is ignored (taken as 1)", [](const Problem& p) { return scale_not_one(p.v_scale); },
       [](Problem& p) { p.v_scale.clear(); }},
      {"k_scale is used for V as well (v_scale ignored)",
       [](const Problem& p) { return p.k_scale != p.v_scale; },
       [](Problem& p) { p.v_scale = p.k_scale; }},
      {"v_scale is used for K as well (k_scale ignored)",
       [](const Problem& p) { return p.k_scale != p.v_scale; },
       [](Problem& p) { p.k_scale = p.v_scale; }},
      {"k_scale and v_scale are swapped",
       [](const Problem& p) {
         return p.k_scale != p.v_scale && (p.k_scale.size() <= 1) == (p.v_scale.size() <= 1);
       },
       [](Problem& p) { std::swap(p.k_scale, p.v_scale); }},
      {"the fp8 scales are applied twice",
       [](const Problem& p) { return scale_not_one(p.k_scale) || scale_not_one(p.v_scale); },
       [](Problem& p) {
         p.k_scale = squared(p.k_scale);
         p.v_scale = squared(p.v_scale);
       }},
      {"the fp8 scales divide instead of multiply",
       [](const Problem& p) { return scale_not_one(p.k_scale) || scale_not_one(p.v_scale); },
       [](Problem& p) {
         p.k_scale = inverted(p.k_scale);
         p.v_scale = inverted(p.v_scale);
       }},
      {"per-KV-head scales: KV head 0's scale is used for every head",
       [](const Problem& p) {
         auto varies = [](const std::vector<float>& s) {
           return s.size() > 1 && std::any_of(s.begin(), s.end(), [&](float x) { return x != s[0]; });
         };
         return varies(p.k_scale) || varies(p.v_scale);
       },
       [](Problem& p) {
         for (auto* s : {&p.k_scale, &p.v_scale}) {
           if (!s->empty()) {
             *s = {s->front()};
           }
         }
       }},
      {"per-KV-head scales: KV head j uses the scale of head j % 2 (the scales read as a vector "
       "of 2 lanes)",
       [](const Problem& p) { return wraps_scales(p, 2); }, [](Problem& p) { wrap_scales(p, 2); }},
      {"per-KV-head scales: KV head j uses the scale of head j % 4 (the scales read as a vector "
       "of 4 lanes)",
       [](const Problem& p) { return wraps_scales(p, 4); }, [](Problem& p) { wrap_scales(p, 4); }},
      {"per-KV-head scales: KV head j uses the scale of head j % 8 (the scales read as a vector "
       "of 8 lanes)",
       [](const Problem& p) { return wraps_scales(p, 8); }, [](Problem& p) { wrap_scales(p, 8); }},
      {"per-KV-head scales: KV head j uses the scale of head j % 16 (the scales staged in a table "
       "of 16)",
       [](const Problem& p) { return wraps_scales(p, 16); },
       [](Problem& p) { wrap_scales(p, 16); }},
      {"the per-tensor scales are read as one per KV head (k_scale[kv_head], v_scale[kv_head]: "
       "past their one element, where the host lays NaN)",
       [](const Problem& p) { return p.num_kv_scales() == 1 && p.params.num_kv_heads > 1; },
       [](Problem& p) {
         // NaN scales do not validate: NaN bytes in every K and V element of KV heads 1 and up
         // give the same answer (a NaN times any scale).
         const AttnParams& a = p.params;
         const KvCacheGeometry g = kv_cache_geometry(p.kv_layout, a.cache_dtype(), a.num_kv_heads,
                                                     a.block_size, a.head_dim);
         const int64_t blocks = int64_t(p.key_cache.data.size()) / g.block_elems();
         for (int64_t blk = 0; blk < blocks; ++blk) {
           for (int h = 1; h < a.num_kv_heads; ++h) {
             for (int s = 0; s < a.block_size; ++s) {
               for (int d = 0; d < a.head_dim; ++d) {
                 p.key_cache.data[std::size_t(g.key_index(blk, h, s, d))] = std::byte{0x7f};
                 p.value_cache.data[std::size_t(g.value_index(blk, h, s, d))] = std::byte{0x7f};
               }
             }
           }
         }
       }},
      {"fp8 subnormal numbers are read as 0 (flushed to zero)", has_fp8_subnormals,
       [](Problem& p) {
         const DType f = p.params.cache_dtype();
         for (HostTensor* t : {&p.key_cache, &p.value_cache}) {
           for (std::byte& b : t->data) {
             if (fp8_subnormal(b, f)) {
               b &= std::byte{0x80}; // a zero of the same sign
             }
           }
         }
       }},
      {"the fp8 sign bit is ignored (every value read as its magnitude)",
       [](const Problem& p) {
         for (const HostTensor* t : {&p.key_cache, &p.value_cache}) {
           if (std::any_of(t->data.begin(), t->data.end(),
                           [](std::byte b) { return std::to_integer<unsigned>(b) > 0x80u; })) {
             return true;
           }
         }
         return false;
       },
       [](Problem& p) {
         for (HostTensor* t : {&p.key_cache, &p.value_cache}) {
           for (std::byte& b : t->data) {
             b &= std::byte{0x7f};
           }
         }
       }},
      {"the fp8_e4m3 cache is read as fp8_e5m2",
       [](const Problem& p) { return p.params.cache_dtype() == DType::fp8_e4m3; },
       [](Problem& p) {
         p.params.kv_dtype = DType::fp8_e5m2;
         p.key_cache.dtype = p.value_cache.dtype = DType::fp8_e5m2;
       }},
      {"the fp8_e4m3 cache is read as e4m3fnuz (AMD's E4M3: bias 8, so every value is halved, "
       "and 0x80, a negative zero here, is its NaN)",
       [](const Problem& p) { return p.params.cache_dtype() == DType::fp8_e4m3; },
       [](Problem& p) {
         // A kernel reading e4m3fnuz: the same bytes at half the value (both scales halved,
         // exact), and -0 read as NaN (0x7f, E4M3's). 0x7f is 240 there, NaN here: no case
         // puts one where a kernel reads it.
         for (auto* s : {&p.k_scale, &p.v_scale}) {
           if (s->empty()) {
             s->push_back(1.0f);
           }
           for (float& x : *s) {
             x *= 0.5f;
           }
         }
         for (HostTensor* t : {&p.key_cache, &p.value_cache}) {
           for (std::byte& b : t->data) {
             if (b == std::byte{0x80}) {
               b = std::byte{0x7f};
             }
           }
         }
       }},
      {"the fp8_e5m2 cache is read as fp8_e4m3",
       [](const Problem& p) { return p.params.cache_dtype() == DType::fp8_e5m2; },
       [](Problem& p) {
         p.params.kv_dtype = DType::fp8_e4m3;
         p.key_cache.dtype = p.value_cache.dtype = DType::fp8_e4m3;
       }},
  };
  return m;
}

// The root mean square of a reference's finite outputs.
double rms(const ReferenceResult& r) {
  double sum = 0.0;
  std::size_t n = 0;
  for (const double x : r.out) {
    if (std::isfinite(x)) {
      sum += x * x;
      ++n;
    }
  }
  return n > 0 ? std::sqrt(sum / double(n)) : 0.0;
}

// How far `out` is from a reference's answer: ||out - r|| / ||r|| over the elements both hold
// finite (infinity where none is, or where r is all zero).
double normwise_distance(const HostTensor& out, const ReferenceResult& r) {
  double err = 0.0;
  double size = 0.0;
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    const double want = r.out[i];
    const double got = out.get(i);
    if (std::isfinite(want) && std::isfinite(got)) {
      err += (got - want) * (got - want);
      size += want * want;
    }
  }
  return size > 0 ? std::sqrt(err / size) : std::numeric_limits<double>::infinity();
}

// The normwise distance within which an fp8 mistake that fits no element by element still names
// an output (diagnose_failure).
constexpr double kMistakeNormwise = 1e-2;

// `tol` for judging an output against what a mistake computes: the absolute floor grows with the
// mistake's outputs where they are larger than attention's (a value scale ignored makes them
// 1/v_scale times larger, and a kernel's rounding with them), so that one element near zero does
// not hide the mistake that explains every other.
Tolerance tolerance_for_mistake(const Tolerance& tol, const ReferenceResult& ref,
                                const ReferenceResult& mistaken) {
  const double base = rms(ref);
  const double now = rms(mistaken);
  Tolerance t = tol;
  if (base > 0 && now > base) {
    t.atol *= now / base;
  }
  return t;
}

// Whether `out` is what a mistake computes (`mistaken`, judged with tolerance_for_mistake): every
// element within tolerance, or not finite where the mistake's is not either (bytes read in the
// wrong fp8 format decode to infinities and NaN, and the kernel that reads them so meets them
// too). (A kernel that takes a split-KV partition whose every score is NaN as one with no keys,
// as the test plugin's split-KV does, gives finite outputs there: such a mistake is named within
// 1e-2 normwise. Letting any finite output pass where the mistake's is NaN named E4M3 read as
// E5M2, whose saturated keys are NaN, for that plugin's e4m3fnuz mistake.)
bool computes_mistake(const HostTensor& out, const ReferenceResult& ref,
                      const ReferenceResult& mistaken, const Tolerance& tol) {
  const Tolerance t = tolerance_for_mistake(tol, ref, mistaken);
  const std::size_t per_row = std::size_t(mistaken.heads) * std::size_t(mistaken.head_dim);
  HostTensor rounded(out.dtype, {1});
  bool any = false;
  for (int r = 0; r < mistaken.rows; ++r) {
    if (!mistaken.computed[std::size_t(r)]) {
      continue;
    }
    for (std::size_t i = std::size_t(r) * per_row; i < std::size_t(r + 1) * per_row; ++i) {
      const double want = mistaken.out[i];
      const ElementVerdict v = judge_element(out, i, want, t);
      if (v == ElementVerdict::ok ||
          (!std::isfinite(want) && (v == ElementVerdict::nan || v == ElementVerdict::inf))) {
        any = true;
        continue;
      }
      if (v == ElementVerdict::inf) {
        // A value past the output dtype's range is written as an infinity of its sign.
        rounded.set(0, float(want));
        if (rounded.get(0) == out.get(i)) {
          any = true;
          continue;
        }
      }
      return false;
    }
  }
  return any;
}

} // namespace

std::vector<std::string> diagnose_failure(Backend& be, const KernelConfig& cfg, const Problem& pr,
                                          const RunOutput& got, const ReferenceResult& ref,
                                          const Tolerance& tol,
                                          const std::vector<WrongPair>& wrong, int ref_threads) {
  std::vector<std::string> found;
  if (double(pr.visible_pairs()) * pr.params.head_dim > kMaxDiagnosedWork) {
    return found;
  }
  const bool out_wrong =
      std::any_of(wrong.begin(), wrong.end(), [](const WrongPair& w) { return w.out_wrong; });
  const ReferenceOptions ro{.threads = ref_threads, .rows = {}};
  // The mask alternatives judge the output alone; with the output right (a wrong lse, or an
  // error in the norm only) an alternative that changes nothing in this problem (causal off in
  // decode) would "explain" it.
  // One copy of the problem serves every alternative, which changes its parameters alone: with a
  // copy of both caches per alternative, verify of a plugin whose every case failed (a planted
  // valid length one too long, quick, fp32) took 12.3 CPU-seconds instead of 9.5.
  std::optional<Problem> changed;
  for (const Alternative& alt : alternatives()) {
    if (!out_wrong || !alt.applies(pr.params)) {
      continue;
    }
    if (!changed) {
      changed = pr;
    }
    changed->params = pr.params;
    alt.change(changed->params);
    const ReferenceResult r = reference_attention(*changed, ro);
    if (check_output(got.out, nullptr, r, tol).pass) {
      found.emplace_back(alt.what);
      return found; // the most specific explanation that fits
    }
  }
  // An fp8 cache read with the scales or the format wrong.
  if (out_wrong && pr.params.fp8_cache()) {
    // A mistake that makes the scores far larger (a k_scale of 1/250 ignored) sharpens the
    // softmax, and a kernel computing it in fp32 rounds its weights further than the tolerance
    // allows attention; one that decodes bytes as NaN meets a kernel's own handling of NaN
    // scores (computes_mistake): such a mistake is named when no mistake fits element by
    // element, the output is within 1e-2 of it normwise and twenty times closer to it than to
    // attention.
    const char* closest = nullptr;
    double closest_err = 0.0;
    for (const CacheMistake& m : cache_mistakes()) {
      if (!m.applies(pr)) {
        continue;
      }
      Problem changed = pr;
      m.change(changed);
      const ReferenceResult r = reference_attention(changed, ro);
      if (computes_mistake(got.out, ref, r, tol)) {
        found.emplace_back(m.what);
        return found;
      }
      const double to_mistake = normwise_distance(got.out, r);
      if (to_mistake <= kMistakeNormwise && to_mistake * 20 <= normwise_distance(got.out, ref) &&
          (closest == nullptr || to_mistake < closest_err)) {
        closest = m.what;
        closest_err = to_mistake;
      }
    }
    if (closest != nullptr) {
      // One wording whatever the distance: verify's summary groups failures by it.
      found.emplace_back(std::string(closest) +
                         " (within 1e-2 normwise, not element by element: larger scores round "
                         "further in a kernel, and kernels meet NaN scores their own way)");
      return found;
    }
  }
  // The bugs engines' kernels have (split-KV boundaries and reductions, GQA mapping, the last
  // block's length, lse base), judged on the wrong rows alone.
  // The two diagnoses that rest on the slots past the lengths are tested with the kernel.
  const auto confirm = [&](const std::string& cause) {
    if (rests_on_nan_tails(cause)) {
      // Only if the kernel is right once those slots hold finite values: a kernel that reads
      // keys from wrong places (a layout misread) also meets NaN there, and stays wrong.
      const RunOutput finite = run_once(be, with_finite_tails(pr, 0.0f), cfg);
      return check_output(finite.out, nullptr, ref, tol).pass;
    }
    if (rests_on_reads_past_length(cause)) {
      // Only if the output of every wrong row depends on those slots: a kernel that reads no
      // cache at all can come out wrong in just those sequences too, and one that reads another
      // sequence's block-table row meets that sequence's slots past its length in some rows but
      // not in all (an outside audit's module, whose sequence of one key read the next
      // sequence's first key, was named a length one too long).
      const RunOutput zeros = run_once(be, with_finite_tails(pr, 0.0f), cfg);
      const RunOutput threes = run_once(be, with_finite_tails(pr, 3.0f), cfg);
      const int H = pr.params.num_heads;
      const int D = pr.params.head_dim;
      return std::all_of(wrong.begin(), wrong.end(), [&](const WrongPair& w) {
        if (!w.out_wrong) {
          return true;
        }
        const std::size_t at = (std::size_t(w.row) * H + w.head) * D;
        for (int d = 0; d < D; ++d) {
          const double x = zeros.out.get(at + d);
          const double y = threes.out.get(at + d);
          if (std::isnan(x) != std::isnan(y) ||
              (!std::isnan(x) && std::abs(x - y) > tol.atol + tol.rtol * std::abs(y))) {
            return true; // this pair changed with the slots
          }
        }
        return false;
      });
    }
    return true;
  };
  // The models read the caches as the kernel was handed them: in the family's declared layout
  // (a vllm-layout kernel's key packing can be misread), rearranged once as the run was.
  KvLayout handed = pr.kv_layout;
  for (const FamilyDecl& f : be.declaration().families) {
    if (f.family == cfg.family) {
      handed = f.layout;
    }
  }
  std::optional<Problem> as_handed;
  if (handed != pr.kv_layout) {
    as_handed = with_kv_layout(pr, handed);
  }
  found = explain_engine_bug(as_handed ? *as_handed : pr, cfg, got, ref, tol, wrong, confirm);
  if (!found.empty() || !any_visible(ref) || pr.num_blocks < 2) {
    return found;
  }
  // Does the kernel give this problem the same output twice? The questions below change the
  // problem and compare outputs, which a kernel that keeps state between calls (a plan cached by
  // a pointer an earlier call's buffers had) or races answers at random.
  const RunOutput twice = run_once(be, pr, cfg);
  if (!same_output(twice.out, got.out, tol)) {
    // A read past the tensors handed over (a block number past num_blocks, a row past the
    // sequence) meets whatever memory is there, which changes between calls too: an outside
    // audit's kernels that indexed blocks as if contiguous, with no state and no threads, got
    // only the first two causes named.
    found.emplace_back("the output changes from one call of the same problem to the next (state "
                       "kept between calls, such as a plan cached by a pointer or a length, a "
                       "race between threads, or a read outside the tensors handed over, such as "
                       "a block past num_blocks)");
    return found;
  }
  // Does the kernel read the cache at all?
  const Problem fresh = with_new_cache_values(pr);
  const RunOutput again = run_once(be, fresh, cfg);
  if (same_output(again.out, got.out, tol)) {
    found.emplace_back("the KV cache is not read (the output stays the same when every cached "
                       "key and value changes)");
    return found;
  }
  // Does it follow the block table?
  const Problem moved = with_blocks_moved(pr);
  const RunOutput elsewhere = run_once(be, moved, cfg);
  if (!same_output(elsewhere.out, got.out, tol)) {
    found.emplace_back("the block table is not followed (the same keys stored in other "
                       "physical blocks give another output)");
  }
  return found;
}

} // namespace attn
