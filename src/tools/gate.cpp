#include "tools/gate.h"
#include "util/json_depth.h"
#include "util/json_field.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace graft {
namespace {

using json = nlohmann::json;

Result<std::vector<json>> ReadJsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::vector<json> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    GRAFT_RETURN_IF_ERROR(CheckJsonDepth(line, fmt::format("{}:{}", path, n)));
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return InvalidArgument(fmt::format("{}:{}: not a JSON object", path, n));
    if (j.contains("error")) return InvalidArgument(fmt::format("{}:{}: holds an error, not decisions: {}", path, n, j["error"].dump()));
    if (!j.contains("decisions") || !j["decisions"].is_array()) return InvalidArgument(fmt::format("{}:{}: no \"decisions\" array", path, n));
    out.push_back(std::move(j));
  }
  return out;
}

std::string Bucket(int64_t tokens) {
  if (tokens <= 1000) return "<=1K";
  if (tokens <= 4000) return "1K-4K";
  if (tokens <= 10000) return "4K-10K";
  return ">10K";
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

GateStats Summarise(const std::string& name, std::vector<double> kls, int agree) {
  GateStats s;
  s.bucket = name;
  s.questions = static_cast<int>(kls.size());
  if (kls.empty()) return s;
  double sum = 0;
  for (double k : kls) sum += k;
  s.mean_kl = sum / static_cast<double>(kls.size());
  double var = 0;
  for (double k : kls) var += (k - s.mean_kl) * (k - s.mean_kl);
  s.stderr_kl = kls.size() > 1 ? std::sqrt(var / static_cast<double>(kls.size() - 1) / static_cast<double>(kls.size())) : 0;
  std::sort(kls.begin(), kls.end());
  s.p50 = Percentile(kls, 50);
  s.p90 = Percentile(kls, 90);
  s.p99 = Percentile(kls, 99);
  s.max_kl = kls.back();
  s.top_agreement = 100.0 * agree / static_cast<double>(kls.size());
  return s;
}

}  // namespace

Result<GateReport> RunGate(const std::string& reference, const std::string& candidate, double max_kl, double min_top) {
  GRAFT_ASSIGN_OR_RETURN(std::vector<json> ref, ReadJsonl(reference));
  GRAFT_ASSIGN_OR_RETURN(std::vector<json> cand, ReadJsonl(candidate));
  if (ref.size() != cand.size()) {
    return InvalidArgument(fmt::format("{} holds {} records but {} holds {}", reference, ref.size(), candidate, cand.size()));
  }
  if (ref.empty()) return InvalidArgument(reference + ": no records");
  std::vector<double> all;
  int all_agree = 0;
  std::map<std::string, std::pair<std::vector<double>, int>> buckets;
  for (size_t r = 0; r < ref.size(); ++r) {
    const json& rd = ref[r]["decisions"];
    const json& cd = cand[r]["decisions"];
    const std::string where = fmt::format("record {}", r + 1);
    if (rd.size() != cd.size()) return InvalidArgument(fmt::format("{}: {} questions vs {}", where, rd.size(), cd.size()));
    int64_t tokens = 0;  // the record's length bucket: the reference's "usage.record_tokens", if it says
    if (const auto u = ref[r].find("usage"); u != ref[r].end() && !u->is_null()) {
      GRAFT_ASSIGN_OR_RETURN(tokens, Int64Field(*u, "record_tokens", 0, fmt::format("{}: {} \"usage\"", reference, where)));
    }
    auto& bucket = buckets[Bucket(tokens)];
    for (size_t q = 0; q < rd.size(); ++q) {
      const json &a = rd[q], &b = cd[q];
      GRAFT_ASSIGN_OR_RETURN(const std::string qid,
                             StringField(a, "id", "", fmt::format("{}: {}, question {}", reference, where, q + 1)));
      GRAFT_ASSIGN_OR_RETURN(const std::string cid,
                             StringField(b, "id", "", fmt::format("{}: {}, question {}", candidate, where, q + 1)));
      if (qid != cid) {
        return InvalidArgument(fmt::format("{}: question {} is '{}' in the reference but '{}' in the candidate", where, q + 1,
                                           qid, cid));
      }
      if (!a.contains("probabilities") || !b.contains("probabilities") || !a["probabilities"].is_object() ||
          !b["probabilities"].is_object()) {
        return InvalidArgument(fmt::format("{}, question '{}': missing probabilities", where, qid));
      }
      const json &pa = a["probabilities"], &pb = b["probabilities"];
      if (pa.size() != pb.size()) return InvalidArgument(fmt::format("{}, question '{}': the choices differ", where, qid));
      double kl = 0;
      std::string top_a, top_b;
      double best_a = -1, best_b = -1;
      for (const auto& [choice, va] : pa.items()) {
        if (!pb.contains(choice)) {
          return InvalidArgument(fmt::format("{}, question '{}': choice '{}' is missing from the candidate", where, qid, choice));
        }
        const json& vb = pb[choice];
        if (!va.is_number() || !vb.is_number()) {
          return InvalidArgument(fmt::format("{}, question '{}': the probability of '{}' is not a number ({} vs {})", where,
                                             qid, choice, va.dump(), vb.dump()));
        }
        const double p = va.get<double>(), q2 = vb.get<double>();
        if (!(p >= 0 && p <= 1 && q2 >= 0 && q2 <= 1)) {
          return InvalidArgument(fmt::format("{}, question '{}': probability of '{}' outside [0, 1]", where, qid, choice));
        }
        if (p > 0) kl += p * (std::log(p) - std::log(std::max(q2, 1e-300)));
        if (p > best_a) best_a = p, top_a = choice;
        if (q2 > best_b) best_b = q2, top_b = choice;
      }
      kl = std::max(kl, 0.0);
      const bool agree = top_a == top_b;
      all.push_back(kl);
      all_agree += agree;
      bucket.first.push_back(kl);
      bucket.second += agree;
    }
  }
  GateReport rep;
  rep.rows.push_back(Summarise("all", all, all_agree));
  for (const char* b : {"<=1K", "1K-4K", "4K-10K", ">10K"}) {
    auto it = buckets.find(b);
    if (it != buckets.end() && !it->second.first.empty()) rep.rows.push_back(Summarise(b, it->second.first, it->second.second));
  }
  rep.passed = rep.rows[0].mean_kl <= max_kl && rep.rows[0].top_agreement >= min_top;
  return rep;
}

std::string GateReport::Table() const {
  std::string out = fmt::format("{:<8} {:>9} {:>22} {:>10} {:>10} {:>10} {:>10} {:>9}\n", "records", "questions", "mean KL ± s.e.",
                                "p50", "p90", "p99", "max", "top-1");
  for (const auto& r : rows) {
    out += fmt::format("{:<8} {:>9} {:>22} {:>10.3g} {:>10.3g} {:>10.3g} {:>10.3g} {:>8.2f}%\n", r.bucket, r.questions,
                       fmt::format("{:.3g} ± {:.2g}", r.mean_kl, r.stderr_kl), r.p50, r.p90, r.p99, r.max_kl, r.top_agreement);
  }
  out += passed ? "gate: pass\n" : "gate: FAIL\n";
  return out;
}

}  // namespace graft
