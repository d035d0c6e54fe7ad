#include "reference/reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <thread>

#include "src/model/errors.h"

namespace attn {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
}

bool reference_visible(const AttnParams& p, int q_len, int k_len, int i, int j) {
  const long pos = long(k_len) - q_len + i; // bottom-right aligned absolute position
  if (p.causal && j > pos) {
    return false;
  }
  if (p.window_left >= 0 && j < pos - p.window_left) {
    return false;
  }
  if (p.window_right >= 0 && j > pos + p.window_right) {
    return false;
  }
  return true;
}

ReferenceResult reference_attention(const Problem& pr, const ReferenceOptions& opt) {
  pr.validate(); // block ids and shapes are trusted below: never read outside the cache
  const AttnParams& p = pr.params;
  const int H = p.num_heads;
  const int D = p.head_dim;
  const int G = p.group_size();
  const double scale = p.effective_scale();
  const KvCacheGeometry kv = pr.kv_geometry();
  ReferenceResult res;
  res.rows = pr.num_rows();
  res.heads = H;
  res.head_dim = D;
  res.out.assign(std::size_t(res.rows) * H * D, std::numeric_limits<double>::quiet_NaN());
  res.lse.assign(std::size_t(res.rows) * H, std::numeric_limits<double>::quiet_NaN());
  res.out_size.assign(res.out.size(), std::numeric_limits<double>::quiet_NaN());
  res.computed.assign(std::size_t(res.rows), opt.rows.empty() ? 1 : 0);
  for (int r : opt.rows) {
    // Dropping such a row silently would leave nothing computed, and a check over nothing passes.
    if (r < 0 || r >= res.rows) {
      throw InputError("reference row " + std::to_string(r) + " is outside the problem's " +
                       std::to_string(res.rows) + " query rows");
    }
    res.computed[std::size_t(r)] = 1;
  }

  // One task per (sequence, kv head): gather its keys and values once, serve the group's heads.
  struct Task {
    int b, kvh;
  };
  std::vector<Task> tasks;
  for (int b = 0; b < pr.batch; ++b) {
    bool any = false;
    for (int i = 0; i < pr.q_len(b) && !any; ++i) {
      any = res.computed[std::size_t(pr.q_start(b) + i)] != 0;
    }
    if (any) {
      for (int kvh = 0; kvh < p.num_kv_heads; ++kvh) {
        tasks.push_back({b, kvh});
      }
    }
  }

  auto run_task = [&](const Task& t) {
    const int ql = pr.q_len(t.b);
    const int kl = pr.k_len(t.b);
    // Row-major: the gather writes each key's row side by side (column-major, its stores landed
    // kl doubles apart and took most of a long decode's reference), and so do the products read
    // them: K q as a dot product per key, V's rows summed with their weights.
    using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    RowMajor K(kl, D);
    RowMajor V(kl, D);
    // The oracle reads the paged cache element by element through the layout's offsets
    // (SPEC.md "KV-cache layouts", src/model/kv_layout.h) rather than with the kernels'
    // attn_math::paged_kv_offset, so an addressing bug there shows as a mismatch instead of
    // agreeing with itself. Every layout yields the same K and V, hence identical results.
    // An fp8 cache's elements stand for float(element) * scale (SPEC.md "fp8 KV caches"): exact
    // in double. Other caches have scale 1.
    const int32_t* table = &pr.block_tables[std::size_t(t.b) * std::size_t(pr.max_blocks_per_seq)];
    const double ks = pr.key_scale(t.kvh);
    const double vs = pr.value_scale(t.kvh);
    for (int j = 0; j < kl; ++j) {
      const int64_t page = table[j / p.block_size];
      const int slot = j % p.block_size;
      for (int d = 0; d < D; ++d) {
        K(j, d) = ks * pr.key_cache.get(std::size_t(kv.key_index(page, t.kvh, slot, d)));
        V(j, d) = vs * pr.value_cache.get(std::size_t(kv.value_index(page, t.kvh, slot, d)));
      }
    }
    const RowMajor absV = V.cwiseAbs();
    Eigen::VectorXd q(D);
    Eigen::VectorXd s(kl);
    for (int h = t.kvh * G; h < (t.kvh + 1) * G; ++h) {
      for (int i = 0; i < ql; ++i) {
        const int row = pr.q_start(t.b) + i;
        if (!res.computed[std::size_t(row)]) {
          continue;
        }
        const std::size_t qoff = (std::size_t(row) * H + h) * D;
        for (int d = 0; d < D; ++d) {
          q(d) = pr.query.get(qoff + d);
        }
        s.noalias() = K * q;
        double m = kNegInf;
        int lo = kl; // the visible keys, an interval: [lo, hi)
        int hi = 0;
        for (int j = 0; j < kl; ++j) {
          if (!reference_visible(p, ql, kl, i, j)) {
            s(j) = kNegInf;
            continue;
          }
          lo = std::min(lo, j);
          hi = j + 1;
          double x = scale * s(j);
          if (p.softcap > 0) {
            x = p.softcap * std::tanh(x / p.softcap);
          }
          s(j) = x;
          // A NaN score makes the row NaN (as in any kernel's softmax); std::max would pass over
          // it, and a row whose every score is NaN would come out as one that sees no key. Only
          // a diagnosis meets one: its changed problems (bytes read in the wrong fp8 format)
          // hold what the checked inputs never do.
          m = std::isnan(x) || x > m ? x : m;
        }
        double* out = &res.out[qoff];
        double* size = &res.out_size[qoff];
        double& lse = res.lse[std::size_t(row) * H + h];
        if (hi == 0) { // no visible key
          std::fill(out, out + D, 0.0);
          std::fill(size, size + D, 0.0);
          lse = kNegInf;
          continue;
        }
        double sum = 0.0;
        for (int j = 0; j < kl; ++j) {
          s(j) = s(j) == kNegInf ? 0.0 : std::exp(s(j) - m);
          sum += s(j);
        }
        // Over the visible keys only (SPEC.md): a NaN or an infinity in the value of a key the
        // row does not see stays out of it (its zero weight times NaN would be NaN).
        Eigen::VectorXd o = V.middleRows(lo, hi - lo).transpose() * s.segment(lo, hi - lo) / sum;
        std::copy(o.data(), o.data() + D, out);
        const Eigen::VectorXd a =
            absV.middleRows(lo, hi - lo).transpose() * s.segment(lo, hi - lo) / sum;
        std::copy(a.data(), a.data() + D, size);
        lse = m + std::log(sum);
      }
    }
  };

  int threads =
      opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min<int>(threads, int(tasks.size()));
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t k; (k = next.fetch_add(1)) < tasks.size();) {
      run_task(tasks[k]);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back(worker);
  }
  worker();
  for (auto& th : pool) {
    th.join();
  }
  return res;
}

int64_t reference_peak_bytes(const Problem& pr, int threads) {
  const AttnParams& p = pr.params;
  const int64_t tasks = int64_t(pr.batch) * p.num_kv_heads;
  const int64_t workers = std::min<int64_t>(
      tasks, threads > 0 ? threads : int64_t(std::max(1u, std::thread::hardware_concurrency())));
  std::vector<int64_t> lens;
  for (int b = 0; b < pr.batch; ++b) {
    lens.push_back(pr.k_len(b));
  }
  // The longest sequences, one per concurrent task (a sequence's KV heads count as tasks too).
  std::sort(lens.rbegin(), lens.rend());
  int64_t keys = 0;
  for (int64_t w = 0; w < workers && !lens.empty(); ++w) {
    keys += lens[std::size_t(w / p.num_kv_heads) % lens.size()];
  }
  const int64_t outputs = int64_t(pr.num_rows()) * p.num_heads;
  return keys * p.head_dim * 3 * int64_t(sizeof(double)) +
         outputs * (2 * int64_t(p.head_dim) + 1) * int64_t(sizeof(double));
}

Partial reference_partial(const Eigen::VectorXd& scores, const Eigen::MatrixXd& v, int begin,
                          int end) {
  Partial part;
  part.o = Eigen::VectorXd::Zero(v.cols());
  for (int j = begin; j < end; ++j) {
    part.m = std::max(part.m, scores(j));
  }
  if (part.m == kNegInf) {
    return part; // l = 0: contributes nothing
  }
  for (int j = begin; j < end; ++j) {
    if (scores(j) != kNegInf) {
      const double w = std::exp(scores(j) - part.m);
      part.l += w;
      part.o += w * v.row(j).transpose();
    }
  }
  part.o /= part.l;
  return part;
}

Combined reference_combine(const std::vector<Partial>& parts, int head_dim) {
  Combined c;
  c.out = Eigen::VectorXd::Zero(head_dim);
  double m = kNegInf;
  for (const auto& t : parts) {
    if (t.l > 0) {
      m = std::max(m, t.m);
    }
  }
  if (m == kNegInf) {
    return c; // out = 0, lse = -inf
  }
  double wsum = 0.0;
  for (const auto& t : parts) {
    if (t.l > 0) {
      const double w = t.l * std::exp(t.m - m);
      wsum += w;
      c.out += w * t.o;
    }
  }
  c.out /= wsum;
  c.lse = m + std::log(wsum);
  return c;
}

} // namespace attn
