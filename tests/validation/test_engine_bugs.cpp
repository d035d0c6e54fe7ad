// The models of engines' bugs (engine_bugs.h) and the failure map (failure_map.h): each model
// computes attention where it changes nothing, an output made by a model is diagnosed as that
// model and no earlier one, an lse in base 2 is named, and failure lines locate rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "reference/reference.h"
#include "src/validation/engine_bugs.h"
#include "src/validation/failure_map.h"
#include "tests/support/problems.h"

using namespace attn;

namespace {

// A decode batch around partition 256 and block 16, with GQA groups of 4.
Problem around_partition() {
  return make_decode_problem(test::params(8, 2, 32, 16, DType::f32),
                             {255, 256, 257, 511, 512, 513, 17, 100}, test::gen(11));
}

// The output `m` computes for every row and head, as a kernel would hand it back.
RunOutput output_of(const Problem& pr, const BugModel& m, const ReferenceResult& ref) {
  RunOutput o;
  const int H = pr.params.num_heads;
  const int D = pr.params.head_dim;
  o.out = HostTensor(pr.params.dtype, {pr.num_rows(), H, D});
  o.lse.assign(std::size_t(pr.num_rows()) * H, 0.0f);
  for (int r = 0; r < pr.num_rows(); ++r) {
    for (int h = 0; h < H; ++h) {
      const std::vector<double> v = model_output(pr, m, r, h);
      EXPECT_EQ(v.size(), std::size_t(D));
      for (int d = 0; d < D; ++d) {
        o.out.set((std::size_t(r) * H + h) * D + d, float(v[std::size_t(d)]));
      }
      o.lse[std::size_t(r) * H + h] = float(ref.lse[std::size_t(r) * H + h]);
    }
  }
  return o;
}

// The output a model per (row, head) computes, the lse the reference's.
RunOutput output_with(const Problem& pr, const ReferenceResult& ref,
                      const std::function<BugModel(int row, int head)>& model_at) {
  RunOutput o = output_of(pr, BugModel{"exact"}, ref);
  const int H = pr.params.num_heads;
  const int D = pr.params.head_dim;
  for (int r = 0; r < pr.num_rows(); ++r) {
    for (int h = 0; h < H; ++h) {
      const std::vector<double> v = model_output(pr, model_at(r, h), r, h);
      for (int d = 0; d < D; ++d) {
        o.out.set((std::size_t(r) * H + h) * D + d, float(v[std::size_t(d)]));
      }
    }
  }
  return o;
}

// What explain_engine_bug says of `o` (one phrase, or "").
std::string diagnosis(const Problem& pr, const RunOutput& o, const ReferenceResult& ref) {
  const Tolerance tol = tolerance_for(pr.params.dtype);
  KernelConfig cfg;
  cfg.family = Family::decode_v1;
  const auto wrong = wrong_pairs(o.out, nullptr, ref, tol);
  EXPECT_FALSE(wrong.empty());
  const auto found = explain_engine_bug(pr, cfg, o, ref, tol, wrong);
  return found.empty() ? "" : found.front();
}

} // namespace

TEST(EngineBugs, AModelWithoutItsMistakeIsAttention) {
  const Problem pr = around_partition();
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const RunOutput exact = output_of(pr, BugModel{"exact", 256}, ref);
  EXPECT_TRUE(check_output(exact.out, &exact.lse, ref, tolerance_for(DType::f32)).pass);
  // With one partition, every reduction is exact.
  for (Combine c : {Combine::maxima_not_rescaled, Combine::lse_in_base_2,
                    Combine::lse_read_as_base_2}) {
    BugModel m{"one partition", 1 << 20, c};
    const RunOutput o = output_of(pr, m, ref);
    EXPECT_TRUE(check_output(o.out, &o.lse, ref, tolerance_for(DType::f32)).pass);
  }
}

// Each model applies to the batch around partition 256, changes the output, and an output it made
// is diagnosed as itself: no model tried before it explains it too.
TEST(EngineBugs, EachModelIsDiagnosedAsItself) {
  const Problem pr = around_partition();
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  KernelConfig cfg;
  cfg.family = Family::decode_v2;
  cfg.params["partition"] = 256;
  const std::vector<BugModel> models = engine_bug_models(pr, cfg);
  ASSERT_GE(models.size(), 13u);
  for (const BugModel& m : models) {
    const RunOutput o = output_of(pr, m, ref);
    const std::vector<WrongPair> wrong = wrong_pairs(o.out, &o.lse, ref, tol);
    ASSERT_FALSE(wrong.empty()) << m.what << " changes nothing";
    const std::vector<std::string> found = explain_engine_bug(pr, cfg, o, ref, tol, wrong);
    ASSERT_EQ(found.size(), 1u) << m.what;
    EXPECT_EQ(found[0], m.what);
  }
}

// A correct output with a wrong lse: base 2, or -inf where keys are seen.
TEST(EngineBugs, LseMistakesAreNamed) {
  const Problem pr = around_partition();
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  const KernelConfig cfg;
  RunOutput o = output_of(pr, BugModel{"exact"}, ref);
  for (std::size_t i = 0; i < o.lse.size(); ++i) {
    o.lse[i] = float(ref.lse[i] / std::log(2.0));
  }
  auto found = explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "lse is written in base 2 (log2) instead of the natural log");
  for (std::size_t i = 0; i < o.lse.size(); ++i) {
    o.lse[i] = i == 3 ? -INFINITY : float(ref.lse[i]);
  }
  found = explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "lse is -inf for rows that see keys");
  // The check says the error is infinite, not zero.
  EXPECT_TRUE(std::isinf(check_output(o.out, &o.lse, ref, tol).max_lse_err));
}

// The lse mistakes a planted-bug audit found told as "wrong output": the largest score alone (the
// log of the weights' sum left out), and any other lse-only error said as lse-only.
TEST(EngineBugs, AnLseThatIsTheLargestScoreOrOtherwiseWrongIsNamed) {
  const Problem pr = around_partition();
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  const KernelConfig cfg;
  RunOutput o = output_of(pr, BugModel{"exact"}, ref);
  const int H = pr.params.num_heads;
  const int D = pr.params.head_dim;
  for (int h = 0; h < H; ++h) { // row 6 (ctx 17): its largest score, key by key
    double top = -INFINITY;
    for (int j = 0; j < pr.k_len(6); ++j) {
      double dot = 0.0;
      for (int d = 0; d < D; ++d) {
        dot += double(pr.query.get((std::size_t(6) * H + h) * D + d)) *
               pr.key_cache.get(std::size_t(pr.key_index(6, h / pr.params.group_size(), j, d)));
      }
      top = std::max(top, pr.params.effective_scale() * dot);
    }
    o.lse[std::size_t(6) * H + h] = float(top);
  }
  auto found = explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "lse is the row's largest score: the log of the weights' sum is left out "
                      "(lse = m + log l)");
  o.lse[std::size_t(6) * H] += 0.5f;
  found = explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("the lse alone is wrong (the output is right)", 0), 0u) << found[0];
}

// What explain_engine_bug says of a decode_v2 answer (partition `partition`) that is right but
// for `rows`, every element of which is NaN.
std::vector<std::string> explained_with_nan_rows(const Problem& pr, std::initializer_list<int> rows,
                                                 int partition) {
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  KernelConfig cfg;
  cfg.family = Family::decode_v2;
  cfg.params["partition"] = partition;
  RunOutput o = output_of(pr, BugModel{"exact"}, ref);
  const int H = pr.params.num_heads;
  const int D = pr.params.head_dim;
  for (int r : rows) {
    for (int i = 0; i < H * D; ++i) {
      o.out.set(std::size_t(r) * H * D + i, NAN);
    }
  }
  return explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
}

// Rows whose window leaves a whole partition without a key come out NaN: the empty partition's
// partial was folded in (the audit's b03). Told as such, not left unexplained.
TEST(EngineBugs, NanWhereAPartitionIsMaskedIsNamed) {
  AttnParams a = test::params(8, 2, 32, 16, DType::f32);
  a.window_left = 100;
  const Problem pr = make_decode_problem(a, {255, 256, 257, 511, 512, 513, 17, 100}, test::gen(11));
  // Contexts 511 to 513: keys 0 to 255 lie outside the window.
  const auto found = explained_with_nan_rows(pr, {3, 4, 5}, 256);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("split-KV: rows with a partition (256) in which the mask leaves them "
                           "no key come out NaN",
                           0),
            0u)
      << found[0];
}

// Rows that see keys but come out as rows that see none (zeros, lse -inf): a mask that hides
// every key (the audit's b20, told "the KV cache is not read" before).
TEST(EngineBugs, RowsThatSeeNoKeyAreNamed) {
  const Problem pr = around_partition();
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  const KernelConfig cfg;
  RunOutput o = output_of(pr, BugModel{"exact"}, ref);
  const int H = pr.params.num_heads;
  const int D = pr.params.head_dim;
  for (int r : {0, 6}) {
    for (int h = 0; h < H; ++h) {
      for (int d = 0; d < D; ++d) {
        o.out.set((std::size_t(r) * H + h) * D + d, 0.0f);
      }
      o.lse[std::size_t(r) * H + h] = -INFINITY;
    }
  }
  const auto found = explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("rows that see keys come out as rows that see none (zeros)", 0), 0u)
      << found[0];
}

// Attention for prefill row r, head h over keys 0..e of its sequence (none when e < 0), as a
// kernel with a misplaced causal limit computes it.
std::vector<double> attend_up_to(const Problem& pr, int r, int h, int e) {
  const AttnParams& a = pr.params;
  const int D = a.head_dim;
  const int b = sequence_of_row(pr, r);
  const int kvh = h / a.group_size();
  std::vector<double> s;
  for (int j = 0; j <= e; ++j) {
    double dot = 0.0;
    for (int d = 0; d < D; ++d) {
      dot += double(pr.query.get((std::size_t(r) * a.num_heads + h) * D + d)) *
             pr.key_cache.get(std::size_t(pr.key_index(b, kvh, j, d)));
    }
    s.push_back(a.effective_scale() * dot);
  }
  std::vector<double> out(std::size_t(D), 0.0);
  if (s.empty()) {
    return out;
  }
  const double m = *std::max_element(s.begin(), s.end());
  double l = 0.0;
  for (int j = 0; j <= e; ++j) {
    const double w = std::exp(s[std::size_t(j)] - m);
    l += w;
    for (int d = 0; d < D; ++d) {
      out[std::size_t(d)] += w * pr.value_cache.get(std::size_t(pr.value_index(b, kvh, j, d)));
    }
  }
  for (double& o : out) {
    o /= l;
  }
  return out;
}

// What explain_engine_bug says of a prefill answer in which row i of sequence b attends over
// that sequence's keys 0 .. end(b, i): an upper limit placed as `end` says.
std::vector<std::string> explained_with_ends(const Problem& pr,
                                             const std::function<int(int b, int i)>& end) {
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  const int H = pr.params.num_heads;
  const int D = pr.params.head_dim;
  RunOutput o = output_of(pr, BugModel{"exact"}, ref);
  for (int r = 0; r < pr.num_rows(); ++r) {
    const int b = sequence_of_row(pr, r);
    const int i = r - pr.q_start(b);
    for (int h = 0; h < H; ++h) {
      const std::vector<double> v = attend_up_to(pr, r, h, end(b, i));
      for (int d = 0; d < D; ++d) {
        o.out.set((std::size_t(r) * H + h) * D + d, float(v[std::size_t(d)]));
      }
    }
  }
  return explain_engine_bug(pr, KernelConfig{}, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
}

// A causal limit placed wrong in prefill: aligned top-left (row i sees keys up to i, the
// cached prefix left out of its position), or early by a different count per row (the audit's
// b20, a last query tile's offset taken as if the tile were full). Both named, as the shift.
TEST(EngineBugs, AMisplacedCausalLimitIsNamed) {
  const Problem pr =
      make_prefill_problem(test::params(4, 2, 32, 16, DType::f32), {5, 7}, {40, 9}, test::gen(5));
  const auto with_ends = [&](const std::function<int(int b, int i)>& end) {
    return explained_with_ends(pr, end);
  };
  // Top-left: sequence 0 (5 queries over 40 keys) sees keys up to i; sequence 1 (7 over 9) too.
  auto found = with_ends([](int, int i) { return i; });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("the causal mask is aligned top-left", 0), 0u) << found[0];
  // Early by 2 keys in every row of sequence 0 (each stops at another key), right in 1.
  found = with_ends([&](int b, int i) {
    const int last = pr.k_len(b) - pr.q_len(b) + i;
    return b == 0 ? last - 2 : last;
  });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("the causal limit is early", 0), 0u) << found[0];
  // Every row of sequence 0 stopping at key 20 whatever its position: a bound, named with it.
  found = with_ends([&](int b, int i) { return b == 0 ? 20 : pr.k_len(b) - pr.q_len(b) + i; });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("no key past key 20 is read", 0), 0u) << found[0];
}

// The same shifts on a non-causal call with a right window of 3 keys: its upper limit is the
// window's, and is named so (an outside audit's plugin was told "the causal limit is late" on a
// call with no causal mask).
TEST(EngineBugs, AMisplacedRightWindowOfANonCausalCallIsNamedAsSuch) {
  AttnParams a = test::params(4, 2, 32, 16, DType::f32);
  a.causal = false;
  a.window_right = 3;
  const Problem pr = make_prefill_problem(a, {5, 7}, {40, 12}, test::gen(5));
  const auto with_ends = [&](const std::function<int(int b, int i)>& end) {
    return explained_with_ends(pr, end);
  };
  // Top-left: row i sees keys up to i + 3.
  auto found = with_ends([](int, int i) { return i + 3; });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("window_right is aligned top-left", 0), 0u) << found[0];
  // Early by 2 keys in every row of sequence 0, right in sequence 1.
  found = with_ends([&](int b, int i) {
    const int last = std::min(pr.k_len(b) - 1, pr.k_len(b) - pr.q_len(b) + i + 3);
    return b == 0 ? last - 2 : last;
  });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("window_right's limit is early", 0), 0u) << found[0];
}

// Decode sequences read with another sequence's length (an audit's module, 2026-12-06): sequence
// 0's for all, or the one before each; with sequence 0 one key long, that was called "aligned
// top-left", which a decode row (one query) cannot be.
TEST(EngineBugs, LengthsTakenFromAnotherSequenceAreNamed) {
  const auto explain = [](const std::vector<int>& lens, const std::function<int(int)>& end) {
    const Problem pr =
        make_decode_problem(test::params(4, 2, 32, 16, DType::f32), lens, test::gen(7));
    const ReferenceResult ref = reference_attention(pr, {1, {}});
    const Tolerance tol = tolerance_for(DType::f32);
    RunOutput o = output_of(pr, BugModel{"exact"}, ref);
    const int H = pr.params.num_heads;
    const int D = pr.params.head_dim;
    for (int b = 0; b < pr.batch; ++b) {
      for (int h = 0; h < H; ++h) {
        const std::vector<double> v = attend_up_to(pr, b, h, std::min(end(b), pr.k_len(b) - 1));
        for (int d = 0; d < D; ++d) {
          o.out.set((std::size_t(b) * H + h) * D + d, float(v[std::size_t(d)]));
        }
      }
    }
    return explain_engine_bug(pr, KernelConfig{}, o, ref, tol,
                              wrong_pairs(o.out, &o.lse, ref, tol));
  };
  const std::vector<int> rising = {3, 20, 45, 70};
  auto found = explain(rising, [&](int) { return rising[0] - 1; });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("every wrong sequence is read only as far as the first sequence's", 0),
            0u)
      << found[0];
  // A first sequence of one key: its length read for every sequence and a decode query's causal
  // limit aligned top-left both leave key 0 alone (an outside audit's top-left module was told
  // the first), so both are named.
  found = explain({1, 20, 45, 70}, [](int) { return 0; });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "every wrong row reads key 0 alone: the causal mask aligned top-left (the "
                      "decode query's position taken as 0, not k_len - 1), or the first "
                      "sequence's length (1 key) used for every sequence, or a bound of one key");
  found = explain(rising,
                  [&](int b) { return b == 0 ? rising[0] - 1 : rising[std::size_t(b) - 1] - 1; });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("each wrong sequence is read only as far as the length of the sequence "
                           "before it",
                           0),
            0u)
      << found[0];
}

// Sequence 0's length taken for every sequence where it is not the shortest: the shorter
// sequences are read past their end, through the rest of their block-table rows (an outside
// audit's module was named only when sequence 0 was the shortest). Longest first, and in the
// middle (some sequences read short, some long); in prefill too, where the masks follow the
// length taken.
TEST(EngineBugs, SequenceZerosLengthIsNamedWhereOthersAreShorter) {
  BugModel first;
  first.length_of = 0;
  const auto explain = [&](const Problem& pr) {
    const ReferenceResult ref = reference_attention(pr, {1, {}});
    const Tolerance tol = tolerance_for(DType::f32);
    const RunOutput o = output_of(pr, first, ref);
    return explain_engine_bug(pr, KernelConfig{}, o, ref, tol,
                              wrong_pairs(o.out, &o.lse, ref, tol));
  };
  const std::string said = "every wrong sequence is read as far as the first sequence's length, "
                           "past its own end through the rest of its block-table row where it is "
                           "shorter: sequence 0's length used for every sequence";
  for (const std::vector<int>& lens :
       {std::vector<int>{70, 20, 45, 3}, std::vector<int>{45, 20, 70, 3}}) {
    const auto found =
        explain(make_decode_problem(test::params(4, 2, 32, 16, DType::f32), lens, test::gen(7)));
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0], said) << lens[0];
  }
  AttnParams p = test::params(4, 2, 32, 16, DType::f32);
  p.causal = true;
  const auto found = explain(make_prefill_problem(p, {4, 3, 5}, {60, 9, 33}, test::gen(8)));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], said);
  // Each sequence read as far as the one before it, longer than its own or shorter.
  const Problem pr =
      make_decode_problem(test::params(4, 2, 32, 16, DType::f32), {70, 20, 45, 3}, test::gen(9));
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  const RunOutput o = output_with(pr, ref, [](int row, int) {
    BugModel m;
    m.length_of = row - 1; // decode: row b is sequence b; -1 (sequence 0) is its own length
    return m;
  });
  const auto previous =
      explain_engine_bug(pr, KernelConfig{}, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  ASSERT_EQ(previous.size(), 1u);
  EXPECT_EQ(previous[0].rfind("some sequences are read as far as another sequence's length", 0), 0u)
      << previous[0];
}

// NaN exactly in the rows whose context is a multiple of the partition.
TEST(EngineBugs, NanOnPartitionMultiplesIsAnEmptyLastPartition) {
  const Problem pr = around_partition();
  const auto found = explained_with_nan_rows(pr, {1, 4}, 256); // contexts 256 and 512
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("multiple of the partition (256) come out NaN"), std::string::npos);
}

// NaN in exactly the sequences with fewer partitions than the batch's longest (the first here):
// partitions launched for the longest, past a shorter sequence's end, folded in. Not "a launch
// grid that covers 1 sequence", which the same rows also fit (an outside audit's plugin).
TEST(EngineBugs, NanInTheSequencesWithFewerPartitionsThanTheLongestIsNamed) {
  const Problem pr = make_decode_problem(test::params(4, 2, 32, 16, DType::f32),
                                         {600, 100, 300, 520}, test::gen(23));
  // Sequences 1 and 2: 1 and 2 partitions of 256 keys, against 3 for 600 and 520.
  const auto found = explained_with_nan_rows(pr, {1, 2}, 256);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("sequences with fewer partitions (256 keys) than the batch's longest "
                           "come out NaN",
                           0),
            0u)
      << found[0];
}

// Every sequence's keys read through sequence 0's block-table row, at its own length (a row
// pointer not offset by the sequence): named, where it failed unexplained in outside audits.
TEST(EngineBugs, KeysReadThroughSequenceZerosBlockTableRowAreNamed) {
  const Problem pr = make_decode_problem(test::params(4, 2, 32, 16, DType::f32), {300, 40, 17, 200},
                                         test::gen(24));
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  BugModel m;
  m.table_of = 0;
  const RunOutput o = output_of(pr, m, ref);
  const auto found =
      explain_engine_bug(pr, KernelConfig{}, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("wrong block table: every sequence reads its keys through sequence "
                           "0's block-table row",
                           0),
            0u)
      << found[0];
}

// A kernel that leaves part of its output unwritten is told so (not "the cache is not read", not
// NaN tails): its poison is a NaN pattern, which the NaN patterns must not take for computed NaN.
TEST(EngineBugs, UnwrittenOutputIsNamedAsSuch) {
  const Problem pr = around_partition();
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  KernelConfig cfg;
  cfg.family = Family::decode_v1;
  RunOutput o = output_of(pr, BugModel{"exact"}, ref);
  const int H = pr.params.num_heads;
  const int D = pr.params.head_dim;
  HostTensor fill(DType::f32, {1, 1, 1});
  poison(fill);
  for (int r : {0, 6}) { // the last element of every head of two rows
    for (int h = 0; h < H; ++h) {
      std::memcpy(static_cast<char*>(o.out.raw()) + ((std::size_t(r) * H + h) * D + D - 1) * 4,
                  fill.raw(), 4);
    }
  }
  const auto found = explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("output left unwritten"), std::string::npos) << found[0];
  // Written wrong values beside the unwritten ones are another mistake's to explain.
  o.out.set(1, 7.0f);
  const auto other = explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  for (const std::string& f : other) {
    EXPECT_EQ(f.find("output left unwritten"), std::string::npos) << f;
  }
  // Nothing written at all: said so, not "what it wrote is right".
  RunOutput none = output_of(pr, BugModel{"exact"}, ref);
  poison(none.out);
  const auto never =
      explain_engine_bug(pr, cfg, none, ref, tol, wrong_pairs(none.out, nullptr, ref, tol));
  ASSERT_EQ(never.size(), 1u);
  EXPECT_NE(never[0].find("output never written"), std::string::npos) << never[0];
}

// A GQA mapping bug in a failure line: heads 1 and 2 of 4 wrong, 0 and 3 right; the sequence of
// ctx 257 under partition 256 has one key in its last partition and block.
TEST(FailureMap, LocatesRowsAndSpreadsOverHeadsAndSequences) {
  const Problem pr = make_decode_problem(test::params(4, 2, 16, 16, DType::f32), {5, 257},
                                         test::gen(2));
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  BugModel gqa{"gqa"};
  gqa.gqa_modulo = true;
  const RunOutput o = output_of(pr, gqa, ref);
  const CheckReport rep = check_output(o.out, &o.lse, ref, tol);
  KernelConfig cfg;
  cfg.family = Family::decode_v2;
  cfg.params["partition"] = 256;
  const FailureMap map = map_failures(pr, cfg, rep, wrong_pairs(o.out, &o.lse, ref, tol));
  ASSERT_EQ(map.where.size(), rep.first.size());
  EXPECT_NE(map.spread.find("heads 1 (2 rows), 2 (2 rows) of 4 (0, 3 right)"), std::string::npos)
      << map.spread;
  EXPECT_NE(map.spread.find("sequences #0 (ctx 5, 2 heads), #1 (ctx 257, 2 heads) of 2"),
            std::string::npos)
      << map.spread;
  bool seen257 = false;
  for (const std::string& w : map.where) {
    if (w.rfind("seq 1,", 0) == 0) {
      seen257 = true;
      EXPECT_EQ(w, "seq 1, ctx 257: 17 blocks of 16, the last holding 1; 2 partitions of 256, "
                   "the last holding 1");
    }
  }
  EXPECT_TRUE(seen257 || rep.first.size() == std::size_t(kMaxListedMismatches));
}

TEST(FailureMap, PrefillRowsBelongToTheirSequence) {
  const Problem pr = make_prefill_problem(test::params(4, 2, 16, 16, DType::f32), {3, 0, 5},
                                          {3, 4, 40}, test::gen(3));
  EXPECT_EQ(sequence_of_row(pr, 0), 0);
  EXPECT_EQ(sequence_of_row(pr, 2), 0);
  EXPECT_EQ(sequence_of_row(pr, 3), 2); // sequence 1 has no query row
  EXPECT_EQ(sequence_of_row(pr, 7), 2);
}

// Mistakes a planted-bug audit found unexplained: the KV head a query head reads (a shift where
// the group is not a power of two), the sequence whose keys are read (a batch launched in
// chunks), a q.k product with no tail loop, a block's slot found with a mask for smaller blocks,
// and the soft cap applied before the scale.
TEST(EngineBugs, WrongHeadsSequencesTailsAndCapOrderAreNamed) {
  {
    const Problem pr = make_decode_problem(test::params(12, 4, 32, 16, DType::f32),
                                           {40, 7, 100, 16}, test::gen(3));
    const ReferenceResult ref = reference_attention(pr, {1, {}});
    const RunOutput o = output_with(pr, ref, [](int, int h) {
      BugModel m;
      m.kv_head = std::min(h >> 1, 3); // group 3, shifted by floor(log2(3)) = 1
      return m;
    });
    EXPECT_NE(diagnosis(pr, o, ref).find("h >> floor(log2(group))"), std::string::npos)
        << diagnosis(pr, o, ref);
    const RunOutput zero = output_with(pr, ref, [](int, int) {
      BugModel m;
      m.kv_head = 0;
      return m;
    });
    EXPECT_EQ(diagnosis(pr, zero, ref), "GQA head mapping: every query head reads KV head 0");
  }
  {
    std::vector<int> lens;
    for (int b = 0; b < 19; ++b) {
      lens.push_back(20 + 13 * b);
    }
    const Problem pr =
        make_decode_problem(test::params(4, 2, 32, 16, DType::f32), lens, test::gen(4));
    const ReferenceResult ref = reference_attention(pr, {1, {}});
    const RunOutput o = output_with(pr, ref, [&](int row, int) {
      BugModel m;
      m.keys_of = sequence_of_row(pr, row) % 16;
      return m;
    });
    EXPECT_NE(diagnosis(pr, o, ref).find("sequence b attends over the keys of sequence b % 16"),
              std::string::npos)
        << diagnosis(pr, o, ref);
  }
  {
    const Problem pr =
        make_decode_problem(test::params(4, 2, 80, 16, DType::f32), {33, 90}, test::gen(5));
    const ReferenceResult ref = reference_attention(pr, {1, {}});
    const RunOutput o = output_with(pr, ref, [](int, int) {
      BugModel m;
      m.score_dims = 64;
      return m;
    });
    EXPECT_EQ(diagnosis(pr, o, ref), "head_dim tail: the q.k product leaves out the last 16 "
                                     "dimensions (chunks of 32 with no tail loop)");
  }
  {
    const Problem pr =
        make_decode_problem(test::params(4, 2, 32, 32, DType::f32), {70, 33}, test::gen(11));
    const ReferenceResult ref = reference_attention(pr, {1, {}});
    const RunOutput o = output_with(pr, ref, [](int, int) {
      BugModel m;
      m.slot_mask = 16;
      return m;
    });
    EXPECT_EQ(diagnosis(pr, o, ref), "block slots: key j is read from slot j & 15 of its block (a "
                                     "slot mask for blocks of 16 where a block holds 32)");
  }
  {
    AttnParams a = test::params(4, 2, 32, 16, DType::f32);
    a.softcap = 5.0;
    a.scale = 0.3;
    const Problem pr = make_decode_problem(a, {33, 90}, test::gen(6));
    const ReferenceResult ref = reference_attention(pr, {1, {}});
    const RunOutput o = output_with(pr, ref, [](int, int) {
      BugModel m;
      m.softcap_first = true;
      return m;
    });
    EXPECT_NE(diagnosis(pr, o, ref).find("soft cap before the scale"), std::string::npos)
        << diagnosis(pr, o, ref);
  }
}

// NaN written past a launch grid's reach (heads from 32 on, say), and sequences after an empty one
// that read the keys of the one before (a compacted work list indexed by its own position).
TEST(EngineBugs, NanPastAGridAndSequencesShiftedByAnEmptyOneAreNamed) {
  const Problem pr =
      make_decode_problem(test::params(8, 2, 32, 16, DType::f32), {40, 0, 70, 90}, test::gen(7));
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  RunOutput o = output_of(pr, BugModel{"exact"}, ref);
  const int H = pr.params.num_heads;
  const int D = pr.params.head_dim;
  for (int r = 0; r < pr.num_rows(); ++r) {
    for (int h = 5; h < H; ++h) {
      for (int d = 0; d < D; ++d) {
        o.out.set((std::size_t(r) * H + h) * D + d, NAN);
      }
    }
  }
  EXPECT_NE(diagnosis(pr, o, ref).find("query heads from 5 on come out NaN"), std::string::npos)
      << diagnosis(pr, o, ref);
  const RunOutput shifted = output_with(pr, ref, [&](int row, int) {
    BugModel m;
    const int b = sequence_of_row(pr, row);
    m.keys_of = b > 1 ? b - 1 : b;
    return m;
  });
  EXPECT_NE(diagnosis(pr, shifted, ref)
                .find("each sequence after an empty one attends over the "
                      "keys of an earlier one"),
            std::string::npos)
      << diagnosis(pr, shifted, ref);
}

// A sliding window whose start is one key late (window_left one short) or several keys early.
TEST(EngineBugs, AMisplacedWindowStartIsNamed) {
  AttnParams a = test::params(4, 2, 32, 16, DType::f32);
  a.window_left = 20;
  const Problem pr = make_decode_problem(a, {70, 33, 100}, test::gen(8));
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const auto as_if = [&](int window_left) {
    Problem other = pr;
    other.params.window_left = window_left;
    const ReferenceResult r = reference_attention(other, {1, {}});
    RunOutput o = output_of(pr, BugModel{"exact"}, ref);
    for (std::size_t i = 0; i < r.out.size(); ++i) {
      o.out.set(i, float(r.out[i]));
    }
    return o;
  };
  EXPECT_NE(diagnosis(pr, as_if(19), ref).find("the sliding window starts one key late"),
            std::string::npos)
      << diagnosis(pr, as_if(19), ref);
  EXPECT_NE(diagnosis(pr, as_if(26), ref).find("the sliding window starts early"),
            std::string::npos)
      << diagnosis(pr, as_if(26), ref);
}

// One key left out of every row that reaches it (the last key of the second partition alone),
// and a P.V product whose second chunk reads V from offset 0.
TEST(EngineBugs, ALoneDroppedKeyAndAValueTailReadFromZeroAreNamed) {
  {
    const Problem pr =
        make_decode_problem(test::params(4, 2, 32, 16, DType::f32), {800, 900, 100}, test::gen(9));
    const ReferenceResult ref = reference_attention(pr, {1, {}});
    BugModel m{"drop 767"};
    m.count = [](int j, int, int) { return j == 767 ? 0 : 1; };
    const RunOutput o = output_of(pr, m, ref);
    const Tolerance tol = tolerance_for(DType::f32);
    KernelConfig cfg;
    cfg.family = Family::decode_v2;
    cfg.params["partition"] = 384;
    const auto found =
        explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, nullptr, ref, tol));
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0], "key 767 (2 x 384 - 1: the last key of partition 2 alone) is left out: "
                        "every wrong row misses that one key, whatever its length");
  }
  {
    const Problem pr =
        make_decode_problem(test::params(4, 2, 80, 16, DType::f32), {33, 90}, test::gen(10));
    const ReferenceResult ref = reference_attention(pr, {1, {}});
    RunOutput o = output_of(pr, BugModel{"exact"}, ref);
    const int D = pr.params.head_dim;
    for (std::size_t i = 0; i < ref.out.size(); ++i) {
      const int d = int(i % std::size_t(D));
      if (d >= 64) {
        o.out.set(i, float(ref.out[i - 64]));
      }
    }
    EXPECT_NE(diagnosis(pr, o, ref)
                  .find("output dimensions from 64 on hold the result's "
                        "dimensions from 0"),
              std::string::npos)
        << diagnosis(pr, o, ref);
  }
}

// Block tables indexed wrongly: the kernel's output is the reference's answer on a copy of the
// problem whose table says what the kernel read (independent of the models).
TEST(EngineBugs, PagesReadThroughTheWrongBlockTableEntryAreNamed) {
  const Problem pr =
      make_decode_problem(test::params(4, 2, 32, 16, DType::f32), {70, 33, 100}, test::gen(12));
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const auto answer_with_table = [&](const auto& rewrite) {
    Problem misread = pr;
    rewrite(misread);
    RunOutput o = output_of(pr, BugModel{"exact"}, ref);
    const ReferenceResult r = reference_attention(misread, {1, {}});
    for (std::size_t i = 0; i < r.out.size(); ++i) {
      o.out.set(i, float(r.out[i]));
    }
    return o;
  };
  const auto entry = [](auto& p, int b, int e) -> auto& {
    return p.block_tables[std::size_t(b) * std::size_t(p.max_blocks_per_seq) + std::size_t(e)];
  };
  // The second page through the first entry.
  RunOutput o = answer_with_table([&](Problem& p) {
    for (int b = 0; b < p.batch; ++b) {
      entry(p, b, 1) = entry(pr, b, 0);
    }
  });
  EXPECT_EQ(diagnosis(pr, o, ref), "block table: the second page (keys 16 to 31) is read through "
                                   "the first entry of the row instead of the second");
  // Every page after the first through the entry before it.
  o = answer_with_table([&](Problem& p) {
    for (int b = 0; b < p.batch; ++b) {
      for (int e = 1; e < p.max_blocks_per_seq; ++e) {
        entry(p, b, e) = entry(pr, b, e - 1);
      }
    }
  });
  EXPECT_EQ(diagnosis(pr, o, ref), "block table: every page after the first is read through the "
                                   "entry before its own (page p through entry p - 1)");
  // Rows found with a stride one short: sequence b reads flat entries b * (max - 1) + page.
  o = answer_with_table([&](Problem& p) {
    const int rows = p.max_blocks_per_seq;
    for (int b = 0; b < p.batch; ++b) {
      for (int e = 0; e < rows; ++e) {
        entry(p, b, e) = pr.block_tables[std::size_t(b * (rows - 1) + e)];
      }
    }
  });
  EXPECT_EQ(diagnosis(pr, o, ref), "block table: sequence b's row is found at b * " +
                                       std::to_string(pr.max_blocks_per_seq - 1) +
                                       " entries, where the rows hold " +
                                       std::to_string(pr.max_blocks_per_seq) +
                                       " (max_blocks_per_seq one short as the "
                                       "row stride)");
}

// A vllm-layout E4M3 key cache under fp16 queries read with x = 8 (the query's) instead of 16:
// the kernel's output is the reference's on a cache rearranged so that reading it right gives
// what the x = 8 reading gives.
TEST(EngineBugs, AnFp8VllmKeyCacheReadWithTheQuerysXIsNamed) {
  AttnParams prm = test::params(4, 2, 64, 16, DType::f16);
  prm.kv_dtype = DType::fp8_e4m3;
  GenOptions g = test::gen(13);
  test::far_fp8_scales(g, false, prm.num_kv_heads);
  const Problem pr = with_kv_layout(make_decode_problem(prm, {40, 70}, g), KvLayout::vllm);
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  Problem misread = pr;
  KvCacheGeometry right = pr.kv_geometry();
  KvCacheGeometry wrong = right;
  wrong.x = 8;
  ASSERT_EQ(right.x, 16);
  for (int64_t blk = 0; blk < pr.num_blocks; ++blk) {
    for (int h = 0; h < prm.num_kv_heads; ++h) {
      for (int s = 0; s < prm.block_size; ++s) {
        for (int d = 0; d < prm.head_dim; ++d) {
          std::memcpy(misread.key_cache.data.data() + right.key_index(blk, h, s, d),
                      pr.key_cache.data.data() + wrong.key_index(blk, h, s, d), 1);
        }
      }
    }
  }
  const ReferenceResult r = reference_attention(misread, {1, {}});
  RunOutput o = output_of(pr, BugModel{"exact"}, ref);
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    o.out.set(i, float(r.out[i]));
  }
  EXPECT_EQ(diagnosis(pr, o, ref), "vllm key layout: the fp8_e4m3 key cache is read as packed by "
                                   "x = 8 (16 / the query's element size) where its 1-byte "
                                   "elements pack x = 16");
}

// bf16 with one key dropped per partition of 512: each element stays within bf16's tolerance, the
// normwise error does not. The models are judged by their normwise error over every row. (Each
// dropped key weighs about 1 / length; at 2049 keys two elements already fail by themselves.)
TEST(EngineBugs, AMistakeSeenOnlyInTheNormwiseErrorIsNamed) {
  const Problem pr =
      make_decode_problem(test::params(8, 2, 64, 16, DType::bf16), {3073, 2200}, test::gen(14));
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::bf16);
  KernelConfig cfg;
  cfg.family = Family::decode_v2;
  cfg.params["partition"] = 512;
  const std::vector<BugModel> models = engine_bug_models(pr, cfg);
  const auto drop = std::find_if(models.begin(), models.end(), [](const BugModel& m) {
    return m.what.find("the last key of each partition") != std::string::npos;
  });
  ASSERT_NE(drop, models.end());
  const RunOutput o = output_of(pr, *drop, ref);
  const CheckReport rep = check_output(o.out, nullptr, ref, tol);
  ASSERT_FALSE(rep.pass);
  ASSERT_EQ(rep.bad, 0) << "not a normwise-only failure: " << rep.summary();
  const std::vector<WrongPair> wrong = wrong_pairs(o.out, nullptr, ref, tol);
  EXPECT_TRUE(wrong.empty());
  const auto found = explain_engine_bug(pr, cfg, o, ref, tol, wrong);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], drop->what + " (seen in the normwise error: every element is within "
                                   "tolerance)");
  // The right output with noise that no model makes: said as a precision loss.
  RunOutput noisy = output_of(pr, BugModel{"exact"}, ref);
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    noisy.out.set(i, float(ref.out[i] * (i % 2 == 0 ? 1.03 : 0.97)));
  }
  const CheckReport nrep = check_output(noisy.out, nullptr, ref, tol);
  ASSERT_FALSE(nrep.pass);
  ASSERT_EQ(nrep.bad, 0) << nrep.summary();
  const auto said = explain_engine_bug(pr, cfg, noisy, ref, tol, {});
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("small errors everywhere"), std::string::npos) << said[0];
}

// Every output NaN: said as such, not "the rest right".
TEST(EngineBugs, AnOutputAllNanIsSaidToBeAllNan) {
  const Problem pr = around_partition();
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  RunOutput o = output_of(pr, BugModel{"exact"}, ref);
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    o.out.set(i, std::nanf(""));
  }
  KernelConfig cfg;
  cfg.family = Family::decode_v1;
  const auto found = explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("every output comes out NaN or infinite"), std::string::npos) << found[0];
}

// A prefill kernel's online softmax over key tiles of `tile` (from key 0) that raises its running
// maximum but never rescales what earlier tiles added (an outside audit's planted bug, which
// verify failed as "none of the usual mistakes"): row r, head h of a causal call, written here
// as such a loop, apart from the model in engine_bugs.cpp. `lse` gets its m + log l.
std::vector<double> tiles_without_rescale(const Problem& pr, int r, int h, int tile, double& lse) {
  const int D = pr.params.head_dim;
  const int b = sequence_of_row(pr, r);
  const int last = pr.k_len(b) - pr.q_len(b) + (r - pr.q_start(b)); // the causal limit
  std::vector<double> acc(std::size_t(D), 0.0);
  double m = -INFINITY;
  double l = 0.0;
  for (int t0 = 0; t0 <= last; t0 += tile) {
    const int t1 = std::min(t0 + tile - 1, last);
    std::vector<double> s;
    for (int j = t0; j <= t1; ++j) {
      double dot = 0.0;
      for (int d = 0; d < D; ++d) {
        dot += double(pr.query.get((std::size_t(r) * pr.params.num_heads + h) * D + d)) *
               pr.key_cache.get(std::size_t(pr.key_index(b, h / pr.params.group_size(), j, d)));
      }
      s.push_back(pr.params.effective_scale() * dot);
    }
    m = std::max(m, *std::max_element(s.begin(), s.end())); // (acc and l not rescaled)
    for (int j = t0; j <= t1; ++j) {
      const double w = std::exp(s[std::size_t(j - t0)] - m);
      l += w;
      for (int d = 0; d < D; ++d) {
        acc[std::size_t(d)] +=
            w *
            pr.value_cache.get(std::size_t(pr.value_index(b, h / pr.params.group_size(), j, d)));
      }
    }
  }
  lse = m + std::log(l);
  for (double& o : acc) {
    o /= l;
  }
  return acc;
}

// Every row and head of `pr` as tiles_without_rescale computes them, out and lse.
RunOutput tiled_output(const Problem& pr, const ReferenceResult& ref, int tile) {
  const int H = pr.params.num_heads;
  const int D = pr.params.head_dim;
  RunOutput o = output_of(pr, BugModel{"exact"}, ref);
  for (int r = 0; r < pr.num_rows(); ++r) {
    for (int h = 0; h < H; ++h) {
      double lse = 0.0;
      const std::vector<double> v = tiles_without_rescale(pr, r, h, tile, lse);
      for (int d = 0; d < D; ++d) {
        o.out.set((std::size_t(r) * H + h) * D + d, float(v[std::size_t(d)]));
      }
      o.lse[std::size_t(r) * H + h] = float(lse);
    }
  }
  return o;
}

TEST(EngineBugs, AnOnlineSoftmaxThatDoesNotRescaleEarlierTilesIsNamed) {
  const Problem pr = make_prefill_problem(test::params(4, 2, 32, 16, DType::f32), {40, 9},
                                          {100, 70}, test::gen(7));
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  KernelConfig cfg;
  cfg.family = Family::prefill;
  cfg.params["k_tile"] = 32;
  const RunOutput o = tiled_output(pr, ref, 32);
  RunOutput lse_only = output_of(pr, BugModel{"exact"}, ref); // right, with such a kernel's lse
  lse_only.lse = o.lse;
  const std::string what = "online softmax: what earlier key tiles added to the output and its "
                           "sum is not rescaled when a later tile raises the row's maximum (key "
                           "tiles of 32)";
  auto found = explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], what);
  found = explain_engine_bug(pr, cfg, lse_only, ref, tol,
                             wrong_pairs(lse_only.out, &lse_only.lse, ref, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], what + " (seen in the lse: the output is within tolerance)");
  // Tiles of 64 (another configuration's) do not explain it.
  cfg.params["k_tile"] = 64;
  found = explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  for (const std::string& f : found) {
    EXPECT_EQ(f.find("online softmax"), std::string::npos) << f;
  }
}

// A split-KV explanation tied to the row's length or mask shows in every row that has it: NaN in
// the row of context 256 while 512 (a multiple of 256 too) is right is no empty last partition,
// and NaN in one row whose window empties a partition while others with one are right is no
// masked partition.
TEST(EngineBugs, ASplitKvPatternIsRuledOutByARightRowThatHasItsCause) {
  const Problem pr = around_partition();
  auto found = explained_with_nan_rows(pr, {1}, 256);
  for (const std::string& f : found) {
    EXPECT_EQ(f.find("split-KV"), std::string::npos) << f;
  }
  AttnParams a = test::params(8, 2, 32, 16, DType::f32);
  a.window_left = 100;
  const Problem windowed =
      make_decode_problem(a, {255, 256, 257, 511, 512, 513, 17, 100}, test::gen(11));
  found = explained_with_nan_rows(windowed, {3}, 256);
  for (const std::string& f : found) {
    EXPECT_EQ(f.find("split-KV"), std::string::npos) << f;
  }
}

// A loop over the sequences one short leaves the last sequence unwritten (an outside audit's
// plugin, named "output left unwritten", and an empty last partition where that sequence's
// context was a multiple of the partition); the sequences from some index on are named too.
TEST(EngineBugs, TheLastSequenceLeftUnwrittenIsNamed) {
  const Problem pr = make_decode_problem(test::params(4, 2, 32, 16, DType::f32),
                                         {100, 256, 300, 512}, test::gen(25));
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  KernelConfig cfg;
  cfg.family = Family::decode_v2;
  cfg.params["partition"] = 256;
  const int H = pr.params.num_heads;
  const int D = pr.params.head_dim;
  const auto unwritten_from = [&](int s0) {
    RunOutput o = output_of(pr, BugModel{"exact"}, ref);
    HostTensor fill(DType::f32, {pr.num_rows() - s0, H, D});
    poison(fill);
    std::memcpy(static_cast<char*>(o.out.raw()) + std::size_t(s0) * H * D * 4, fill.raw(),
                std::size_t(fill.numel()) * 4);
    const auto found =
        explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
    return found.empty() ? std::string() : found.front();
  };
  EXPECT_EQ(unwritten_from(3).rfind("the last sequence's output left unwritten", 0), 0u)
      << unwritten_from(3);
  EXPECT_EQ(unwritten_from(2).rfind("the output of sequences from 2 on left unwritten", 0), 0u)
      << unwritten_from(2);
  // The last sequence alone a multiple of the partition (512): the empty-last-partition reading
  // fits too, and the unwritten last sequence is named first.
  const Problem alone =
      make_decode_problem(test::params(4, 2, 32, 16, DType::f32), {100, 300, 512}, test::gen(25));
  const ReferenceResult ref2 = reference_attention(alone, {1, {}});
  RunOutput o = output_of(alone, BugModel{"exact"}, ref2);
  HostTensor fill(DType::f32, {1, H, D});
  poison(fill);
  std::memcpy(static_cast<char*>(o.out.raw()) + std::size_t(2) * H * D * 4, fill.raw(),
              std::size_t(H) * D * 4);
  const auto found =
      explain_engine_bug(alone, cfg, o, ref2, tol, wrong_pairs(o.out, &o.lse, ref2, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("the last sequence's output left unwritten", 0), 0u) << found[0];
}

// Rows that see no key (an empty sequence, a query row whose window holds no key) come out NaN
// where SPEC.md makes them zeros: 0 / 0, named as such (an outside audit's plugin was told "a
// launch grid that covers 4 sequences", its empty sequences being last).
TEST(EngineBugs, RowsThatSeeNoKeyComingOutNanAreNamed) {
  const Problem pr =
      make_decode_problem(test::params(4, 2, 32, 16, DType::f32), {100, 0, 37, 0}, test::gen(26));
  const auto found = explained_with_nan_rows(pr, {1, 3}, 0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("rows that see no key", 0), 0u) << found[0];
  // NaN in a row that sees keys as well is not that.
  const auto other = explained_with_nan_rows(pr, {1, 2, 3}, 0);
  for (const std::string& f : other) {
    EXPECT_EQ(f.find("rows that see no key"), std::string::npos) << f;
  }
}

// A decode kernel whose tiles go undeclared (no k_tile) and that forgets the rescale: the usual
// tile sizes are tried (an outside audit's module with 64-key tiles went unexplained).
TEST(EngineBugs, AnUndeclaredTileWithoutRescaleIsFoundByTrying) {
  const Problem pr =
      make_decode_problem(test::params(4, 2, 32, 16, DType::f32), {300, 150, 90}, test::gen(27));
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  const RunOutput o = tiled_output(pr, ref, 64);
  KernelConfig cfg;
  cfg.family = Family::decode_v1;
  const auto found = explain_engine_bug(pr, cfg, o, ref, tol, wrong_pairs(o.out, &o.lse, ref, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "online softmax: what earlier key tiles added to the output and its sum is "
                      "not rescaled when a later tile raises the row's maximum (key tiles of 64; "
                      "the configuration declares no k_tile)");
}

// A full last block left out with the mask placed by the true length: under a sliding window of 8
// keys the rows whose length is a multiple of the block see nothing (zeros), which the model that
// moves the length (and the window with it) does not give; named as the last block all the same
// (an outside audit's module was told "the mask hides every key").
TEST(EngineBugs, AFullLastBlockLeftOutUnderAWindowIsNamed) {
  AttnParams a = test::params(4, 2, 32, 16, DType::f32);
  a.window_left = 7;
  const Problem pr = make_decode_problem(a, {64, 40, 32, 17}, test::gen(28));
  const ReferenceResult ref = reference_attention(pr, {1, {}});
  const Tolerance tol = tolerance_for(DType::f32);
  const int H = pr.params.num_heads;
  const int D = pr.params.head_dim;
  RunOutput o = output_of(pr, BugModel{"exact"}, ref);
  for (int b : {0, 2}) { // contexts 64 and 32: their last block holds the window's every key
    for (int h = 0; h < H; ++h) {
      for (int d = 0; d < D; ++d) {
        o.out.set((std::size_t(b) * H + h) * D + d, 0.0f);
      }
    }
  }
  const auto found =
      explain_engine_bug(pr, KernelConfig{}, o, ref, tol, wrong_pairs(o.out, nullptr, ref, tol));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "last block: a full last block is read as empty (its valid length taken as "
                      "k_len % block_size)");
}
