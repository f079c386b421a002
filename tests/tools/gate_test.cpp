#include "tools/gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace graft {
namespace {

using json = nlohmann::json;

std::string Line(int record_tokens, const std::vector<std::pair<std::string, std::vector<double>>>& qs,
                 const std::vector<std::string>& choices = {"yes", "no"}) {
  json d = json::array();
  for (const auto& [id, probs] : qs) {
    json p = json::object();
    for (size_t c = 0; c < probs.size(); ++c) p[choices[c]] = probs[c];
    d.push_back({{"id", id}, {"probabilities", p}});
  }
  return json{{"decisions", d}, {"usage", {{"record_tokens", record_tokens}}}}.dump() + "\n";
}

TEST(Gate, KlAgreementBucketsAndVerdict) {
  test::TempDir dir;
  test::WriteText(dir.File("ref.jsonl"), Line(500, {{"a", {0.9, 0.1}}, {"b", {0.2, 0.8}}}) + Line(5000, {{"a", {0.6, 0.4}}}));
  test::WriteText(dir.File("same.jsonl"), Line(500, {{"a", {0.9, 0.1}}, {"b", {0.2, 0.8}}}) + Line(5000, {{"a", {0.6, 0.4}}}));
  test::WriteText(dir.File("off.jsonl"), Line(500, {{"a", {0.8, 0.2}}, {"b", {0.2, 0.8}}}) + Line(5000, {{"a", {0.4, 0.6}}}));
  auto same = RunGate(dir.File("ref.jsonl"), dir.File("same.jsonl"), 0.05, 95);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_TRUE(same->passed);
  EXPECT_EQ(same->rows[0].mean_kl, 0.0);
  EXPECT_EQ(same->rows[0].top_agreement, 100.0);
  auto off = RunGate(dir.File("ref.jsonl"), dir.File("off.jsonl"), 0.05, 95);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->passed);
  const double kl_a = 0.9 * std::log(0.9 / 0.8) + 0.1 * std::log(0.1 / 0.2);
  const double kl_c = 0.6 * std::log(0.6 / 0.4) + 0.4 * std::log(0.4 / 0.6);
  EXPECT_NEAR(off->rows[0].mean_kl, (kl_a + kl_c) / 3, 1e-12);
  EXPECT_NEAR(off->rows[0].max_kl, std::max(kl_a, kl_c), 1e-12);
  EXPECT_NEAR(off->rows[0].top_agreement, 200.0 / 3, 1e-9);
  ASSERT_EQ(off->rows.size(), 3u);  // all, <=1K, 4K-10K
  EXPECT_EQ(off->rows[1].bucket, "<=1K");
  EXPECT_EQ(off->rows[1].questions, 2);
  EXPECT_EQ(off->rows[2].bucket, "4K-10K");
  EXPECT_EQ(off->rows[2].top_agreement, 0.0);
  EXPECT_NE(off->Table().find("gate: FAIL"), std::string::npos);
}

TEST(Gate, MismatchedFilesAreErrors) {
  test::TempDir dir;
  test::WriteText(dir.File("ref.jsonl"), Line(10, {{"a", {0.5, 0.5}}}));
  struct Case {
    std::string text, expect;
  };
  const std::vector<Case> cases = {
      {Line(10, {{"a", {0.5, 0.5}}}) + Line(10, {{"a", {0.5, 0.5}}}), "holds 1 records but"},
      {Line(10, {{"b", {0.5, 0.5}}}), "question 1 is 'a' in the reference but 'b'"},
      {Line(10, {{"a", {0.5, 0.5}}}, {"yes", "maybe"}), "choice 'no' is missing from the candidate"},
      {Line(10, {{"a", {0.3, 0.3, 0.4}}}, {"yes", "no", "x"}), "the choices differ"},
      {Line(10, {{"a", {0.5, 0.5}}, {"b", {0.5, 0.5}}}), "1 questions vs 2"},
      {"{\"error\": {\"message\": \"bad\"}}\n", "holds an error"},
      {"nope\n", "not a JSON object"},
  };
  for (const auto& c : cases) {
    test::WriteText(dir.File("cand.jsonl"), c.text);
    auto r = RunGate(dir.File("ref.jsonl"), dir.File("cand.jsonl"), 0.05, 95);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().ToString();
  }
}

// Fields of the wrong type in either file are named errors (they threw nlohmann's type_error out
// of graft gate, an abort, before).
TEST(Gate, FieldsOfTheWrongTypeAreNamedErrors) {
  test::TempDir dir;
  const std::string good = Line(10, {{"a", {0.5, 0.5}}});
  struct Case {
    std::string ref, cand, expect;
  };
  const std::vector<Case> cases = {
      {good, R"({"decisions": [{"id": 7, "probabilities": {"yes": 0.5, "no": 0.5}}]})", "\"id\" must be a string, not number"},
      {good, R"({"decisions": ["a"]})", "question 1: expected an object with \"id\", found a string"},
      {good, R"({"decisions": [{"id": "a", "probabilities": {"yes": "0.5", "no": 0.5}}]})",
       "the probability of 'yes' is not a number (0.5 vs \"0.5\")"},
      {R"({"decisions": [{"id": "a", "probabilities": {"yes": 0.5, "no": 0.5}}], "usage": 3})", good,
       "\"usage\": expected an object with \"record_tokens\", found a number"},
      {R"({"decisions": [{"id": "a", "probabilities": {"yes": 0.5, "no": 0.5}}], "usage": {"record_tokens": "9"}})", good,
       "\"record_tokens\" must be an integer, not string"},
  };
  for (const auto& c : cases) {
    test::WriteText(dir.File("ref.jsonl"), c.ref + "\n");
    test::WriteText(dir.File("cand.jsonl"), c.cand + "\n");
    auto r = RunGate(dir.File("ref.jsonl"), dir.File("cand.jsonl"), 0.05, 95);
    ASSERT_FALSE(r.ok()) << c.ref << " / " << c.cand;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().ToString();
  }
  // A null usage is "not given": the record counts in the shortest bucket.
  test::WriteText(dir.File("ref.jsonl"), R"({"decisions": [{"id": "a", "probabilities": {"yes": 1, "no": 0}}], "usage": null})"
                                         "\n");
  test::WriteText(dir.File("cand.jsonl"), good);
  auto ok = RunGate(dir.File("ref.jsonl"), dir.File("cand.jsonl"), 0.05, 95);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->rows.back().bucket, "<=1K");
}

}  // namespace
}  // namespace graft
