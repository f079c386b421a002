// Tokenizer encode throughput on one core over a large mixed corpus.
//   graft_tokenizer_bench TOKENIZER_JSON CORPUS_FILE... [--mb N]
// The corpus files are concatenated, shuffled by line (fixed seed) and repeated to N MB
// (default 16), then encoded as 64 KiB documents. Prints MB/s and tokens/s.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "util/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "util/progress.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: {} TOKENIZER_JSON CORPUS_FILE... [--mb N]\n", argv[0]);
    return 2;
  }
  size_t target = 16u << 20;
  std::vector<std::string> lines;
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--mb" && i + 1 < argc) {
      target = std::stoul(argv[++i]) << 20;
      continue;
    }
    std::ifstream in(argv[i], std::ios::binary);
    std::string line;
    while (std::getline(in, line)) lines.push_back(line + "\n");
  }
  auto tok = graft::Tokenizer::FromFile(argv[1]);
  if (!tok.ok()) {
    fmt::print(stderr, "{}\n", tok.status().ToString());
    return 1;
  }
  std::mt19937 rng(42);
  std::string corpus;
  while (corpus.size() < target && !lines.empty()) {
    std::shuffle(lines.begin(), lines.end(), rng);
    for (const auto& l : lines) {
      if (graft::ValidUtf8Prefix(l) == l.size()) corpus += l;
    }
  }
  corpus.resize(graft::ValidUtf8Prefix(corpus.substr(0, target)));
  constexpr size_t kDoc = 64 << 10;
  size_t tokens = 0;
  graft::Progress bar("encoding", corpus.size(), true);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t at = 0; at < corpus.size();) {
    size_t n = std::min(kDoc, corpus.size() - at);
    n = graft::ValidUtf8Prefix(std::string_view(corpus).substr(at, n));
    if (n == 0) n = corpus.size() - at;
    auto ids = (*tok)->Encode(std::string_view(corpus).substr(at, n));
    if (!ids.ok()) {
      fmt::print(stderr, "{}\n", ids.status().ToString());
      return 1;
    }
    tokens += ids->size();
    bar.Add(n);
    at += n;
  }
  bar.Finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("{:.1f} MB in {:.2f} s: {:.1f} MB/s, {:.2f} M tokens/s, {:.2f} bytes/token\n", corpus.size() / 1e6, secs,
             corpus.size() / 1e6 / secs, tokens / 1e6 / secs, static_cast<double>(corpus.size()) / tokens);
  return 0;
}
