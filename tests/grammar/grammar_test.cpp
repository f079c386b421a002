#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "grammar/json_schema.h"
#include "grammar/mask_store.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace graft {
namespace {

using json = nlohmann::ordered_json;

bool Whole(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.Accept(text) && m.CanStop();
}

std::shared_ptr<const Grammar> Schema(const std::string& s) {
  auto g = JsonSchemaGrammar(json::parse(s));
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

TEST(Grammar, RepetitionBoundsAndChoices) {
  Grammar g;
  const int ab = g.Choice({g.Literal("ab"), g.Literal("a")});
  const int r = g.Repeat(Grammar::Ref(ab), 1, 3);
  g.set_root(r);
  auto gp = std::make_shared<const Grammar>(std::move(g));
  for (const char* ok : {"a", "ab", "aab", "abab", "aaa", "ababab"}) EXPECT_TRUE(Whole(gp, ok)) << ok;
  for (const char* bad : {"", "b", "aaaa", "abababa", "abb"}) EXPECT_FALSE(Whole(gp, bad)) << bad;
  GrammarMatcher m(gp);
  EXPECT_FALSE(m.Accept("ax"));  // refused bytes leave the state as it was
  EXPECT_TRUE(m.Accept("a"));
  EXPECT_TRUE(m.CanStop());
  EXPECT_TRUE(m.CanContinue());
}

TEST(JsonSchema, ObjectsWithRequiredAndOptionalPropertiesInOrder) {
  auto g = Schema(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
                      "tags":{"type":"array","items":{"type":"string"},"maxItems":2}},
                      "required":["name"],"additionalProperties":false})");
  for (const char* ok : {R"({"name":"x"})", R"({"name": "x", "age": 3})", R"({"name":"x","tags":["a","b"]})",
                         "{\n  \"name\": \"a\\\"b\",\n  \"age\": -12,\n  \"tags\": []\n}\n", R"( {"name":"\u00e9"})"}) {
    EXPECT_TRUE(Whole(g, ok)) << ok;
  }
  for (const char* bad : {R"({})", R"({"age":3})", R"({"age":3,"name":"x"})", R"({"name":"x","extra":1})",
                          R"({"name":3})", R"({"name":"x","age":1.5})", R"({"name":"x","tags":["a","b","c"]})",
                          R"({"name":"x",})", R"({"name":"x"} x)", "{\"name\":\"a\nb\"}"}) {
    EXPECT_FALSE(Whole(g, bad)) << bad;
  }
}

TEST(JsonSchema, EnumsConstsUnionsRefsAndBounds) {
  auto g = Schema(R"({"$defs":{"color":{"enum":["red","green",3,null]}},
                      "type":"object","properties":{
                        "c":{"$ref":"#/$defs/color"},
                        "k":{"const":"fixed"},
                        "v":{"anyOf":[{"type":"number"},{"type":"boolean"}]},
                        "n":{"type":["string","null"],"minLength":2,"maxLength":3},
                        "list":{"type":"array","items":{"$ref":"#/$defs/color"},"minItems":1}},
                      "required":["c","k","v","n","list"]})");
  EXPECT_TRUE(Whole(g, R"({"c":"red","k":"fixed","v":1e5,"n":"ab","list":[3,null]})"));
  EXPECT_TRUE(Whole(g, R"({"c":3,"k":"fixed","v":true,"n":null,"list":["green"]})"));
  EXPECT_FALSE(Whole(g, R"({"c":"blue","k":"fixed","v":1,"n":"ab","list":[3]})"));
  EXPECT_FALSE(Whole(g, R"({"c":"red","k":"other","v":1,"n":"ab","list":[3]})"));
  EXPECT_FALSE(Whole(g, R"({"c":"red","k":"fixed","v":"1","n":"ab","list":[3]})"));
  EXPECT_FALSE(Whole(g, R"({"c":"red","k":"fixed","v":1,"n":"a","list":[3]})"));
  EXPECT_FALSE(Whole(g, R"({"c":"red","k":"fixed","v":1,"n":"abcd","list":[3]})"));
  EXPECT_FALSE(Whole(g, R"({"c":"red","k":"fixed","v":1,"n":"ab","list":[]})"));
  // OpenAPI's nullable, as zod writes it.
  auto nullable = Schema(R"({"type":"object","properties":{"a":{"type":"string","nullable":true}},"required":["a"]})");
  EXPECT_TRUE(Whole(nullable, R"({"a":null})"));
  EXPECT_TRUE(Whole(nullable, R"({"a":"x"})"));
  EXPECT_FALSE(Whole(nullable, R"({"a":1})"));
  // A recursive schema through "#".
  auto tree = Schema(R"({"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#"}}},"required":["kids"]})");
  EXPECT_TRUE(Whole(tree, R"({"kids":[{"kids":[]},{"kids":[{"kids":[]}]}]})"));
  EXPECT_FALSE(Whole(tree, R"({"kids":[{}]})"));
}

TEST(JsonSchema, WhitespaceIsBoundedAndAnyJsonObjectParses) {
  auto g = JsonObjectGrammar();
  EXPECT_TRUE(Whole(g, R"({"a":[1,2,{"b":null}],"c":"d","e":-0.5e-3,"f":true})"));
  EXPECT_TRUE(Whole(g, "{ }"));
  EXPECT_FALSE(Whole(g, "[1]"));
  EXPECT_FALSE(Whole(g, R"({"a":01})"));
  EXPECT_FALSE(Whole(g, R"({'a':1})"));
  EXPECT_TRUE(Whole(g, "{" + std::string(kMaxWhitespace, ' ') + "}"));
  EXPECT_FALSE(Whole(g, "{" + std::string(kMaxWhitespace + 1, ' ') + "}"));
}

TEST(JsonSchema, KeywordsItCannotHonourAreErrorsNamingThem) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"string","pattern":"^a"})", "json_schema: the schema at '#' uses 'pattern'"},
      {R"({"type":"object","properties":{"d":{"type":"string","format":"date"}}})", "the schema at '/properties/d' uses 'format'"},
      {R"({"type":"integer","minimum":3})", "uses 'minimum'"},
      {R"({"type":"array","uniqueItems":true})", "uses 'uniqueItems'"},
      {R"({"type":"bogus"})", "names the unknown type 'bogus'"},
      {R"({"$ref":"#/$defs/missing"})", "points at nothing in the document"},
      {R"({"$ref":"http://x/y"})", "points outside the document"},
      {R"({"type":"object","required":["a"],"properties":{"b":{}}})", "names 'a', which properties does not describe"},
      {R"({"type":"array","maxItems":100000})", "the largest bound graft writes out"},
      {R"(false)", "no value satisfies it"},
      {R"(3)", "is not a schema"},
  };
  for (const auto& [schema, want] : cases) {
    auto g = JsonSchemaGrammar(json::parse(schema));
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_NE(g.status().message().find(want), std::string::npos) << schema << ": " << g.status().message();
  }
  EXPECT_FALSE(ChoiceGrammar({}).ok());
  EXPECT_FALSE(ChoiceGrammar({"a", ""}).ok());
}

TEST(RegexGrammar, FullMatchesOfTheCommonDialect) {
  auto g = [](const std::string& p) {
    auto r = RegexGrammar(p);
    EXPECT_TRUE(r.ok()) << p << ": " << r.status().ToString();
    return r.ok() ? *r : nullptr;
  };
  const auto date = g(R"(^\d{4}-\d{2}-\d{2}$)");
  EXPECT_TRUE(Whole(date, "2026-12-04"));
  EXPECT_FALSE(Whole(date, "2026-12-4"));
  EXPECT_FALSE(Whole(date, "2026-12-045"));
  const auto words = g(R"((?:yes|no)( [a-z]+)*\.?)");
  for (const char* ok : {"yes", "no.", "yes it is", "no way."}) EXPECT_TRUE(Whole(words, ok)) << ok;
  for (const char* bad : {"", "maybe", "yes  it", "yes It", "no.."}) EXPECT_FALSE(Whole(words, bad)) << bad;
  const auto cls = g(R"([^a-c\n]x{2,3}[A-F0-9_-]+\w?)");
  EXPECT_TRUE(Whole(cls, "dxx-"));
  EXPECT_TRUE(Whole(cls, "\txxxF_9z"));
  EXPECT_FALSE(Whole(cls, "axx-"));
  EXPECT_FALSE(Whole(cls, "dx-"));
  EXPECT_FALSE(Whole(cls, "dxxxx-"));
  const auto dot = g("a.c");
  EXPECT_TRUE(Whole(dot, "abc"));
  EXPECT_FALSE(Whole(dot, "a\nc"));
  EXPECT_TRUE(Whole(g(R"(\$\(x\))"), "$(x)"));
  EXPECT_TRUE(Whole(g("é+"), "éé"));
  const std::pair<const char*, const char*> refused[] = {
      {R"((a)\1)", "the escape \\1"},       {"(?=a)a", "a group other than"}, {"a*?", "a lazy or possessive quantifier"},
      {"(a*)*", "a repeated part that can match nothing"}, {"[é]", "a non-ASCII character in a class"},
      {"a{300}", "a bound over 256"},        {"a{3,2}", "n < m"},              {"(ab", "an unclosed '('"},
      {"ab)", "an unmatched ')'"},           {"*a", "a quantifier with nothing before it"}, {R"(\bword)", "the escape \\b"},
      {"a^b", "an anchor inside the pattern"}, {"[z-a]", "a reversed range"},  {"[ab", "an unclosed '['"}};
  for (const auto& [p, want] : refused) {
    auto r = RegexGrammar(p);
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << p << ": " << r.status().message();
  }
}

// The vocabulary-wide mask equals asking token by token, on random states of a JSON grammar.
TEST(TokenMask, EqualsTheMatcherTokenByToken) {
  std::vector<std::string> vocab = {"{", "}", "\"", "\"a", "a", "ab", "abc", "\":", ":", " ", "  ", "1", "12", "-",
                                    ",", "\"b\"", "\"name\"", "true", "tr", "null", "[", "]", "x", "", "{\"", "\"}"};
  for (int c = 0; c < 256; ++c) vocab.push_back(std::string(1, static_cast<char>(c)));
  TokenTrie trie(vocab);
  auto g = Schema(R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"array","items":{"type":"integer"}}},"required":["name"]})");
  std::mt19937 rng(7);
  const std::string text = R"({"name": "ab\"c", "n": [1, -12, 3]})";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    GrammarMatcher m(g);
    ASSERT_TRUE(m.Accept(text.substr(0, cut))) << cut;
    std::vector<uint8_t> mask;
    MaskCache cache;
    TokenMask(m, trie, mask, cache);
    ASSERT_EQ(mask.size(), vocab.size());
    for (size_t t = 0; t < vocab.size(); ++t) {
      EXPECT_EQ(mask[t] != 0, !vocab[t].empty() && m.Allows(vocab[t])) << "cut " << cut << " token '" << vocab[t] << "'";
    }
  }
  (void)rng;
}

// A vocabulary whose tokens share long prefixes and whose refused prefixes cover long runs (the
// walk bisects past them and resumes from the states of the shortest shared prefix): the mask
// equals asking token by token, at every cut of a conforming text.
TEST(TokenMask, BisectedRunsEqualTheMatcher) {
  std::vector<std::string> vocab;
  std::mt19937 rng(11);
  const std::string alphabet = "{}\":, ab1-\\ntrue";
  for (int i = 0; i < 3000; ++i) {
    std::string t;
    const int len = 1 + static_cast<int>(rng() % 7);
    for (int k = 0; k < len; ++k) t += alphabet[rng() % alphabet.size()];
    vocab.push_back(t);
  }
  vocab.push_back("\"");
  vocab.push_back("{\"a\": \"");
  TokenTrie trie(vocab);
  auto g = Schema(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"boolean"}},"required":["a","b"]})");
  const std::string text = R"({"a": "b\\n1-", "b": true})";
  MaskCache cache;  // one cache across cuts, as a sequence keeps it
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    GrammarMatcher m(g);
    ASSERT_TRUE(m.Accept(text.substr(0, cut))) << cut;
    std::vector<uint8_t> mask;
    TokenMask(m, trie, mask, cache);
    for (size_t t = 0; t < vocab.size(); ++t) {
      ASSERT_EQ(mask[t] != 0, m.Allows(vocab[t])) << "cut " << cut << " token '" << vocab[t] << "'";
    }
  }
}

TEST(MaskStore, EqualGrammarsShareMasksThatComeBackBitForBit) {
  const char* schema = R"({"type":"object","properties":{"x":{"type":"integer"}}})";
  auto g1 = Schema(schema), g2 = Schema(schema), other = Schema(R"({"type":"string"})");
  EXPECT_TRUE(SameGrammar(*g1, *g2));
  EXPECT_EQ(GrammarHash(*g1), GrammarHash(*g2));
  EXPECT_FALSE(SameGrammar(*g1, *other));
  MaskStore store(size_t{1} << 20);
  auto c1 = store.Canonical(g1);
  EXPECT_EQ(c1, g1);
  EXPECT_EQ(store.Canonical(g2), g1) << "an equal grammar compiled again maps to the first";
  EXPECT_EQ(store.Canonical(other), other);
  // Masks of every length around a byte and word boundary, random bits: stored and read back equal.
  std::mt19937 rng(3);
  GrammarMatcher m(c1);
  for (size_t n : {1u, 7u, 8u, 9u, 63u, 64u, 65u, 1001u}) {
    std::vector<uint8_t> mask(n), back;
    for (auto& b : mask) b = rng() % 2;
    GrammarMatcher::State s = {{static_cast<int32_t>(n)}};  // a distinct key a length
    EXPECT_FALSE(store.Get(c1.get(), s, back));
    store.Put(c1, s, mask);
    ASSERT_TRUE(store.Get(c1.get(), s, back)) << n;
    EXPECT_EQ(back, mask) << n;
    EXPECT_FALSE(store.Get(other.get(), s, back)) << "another grammar's state of the same numbers";
  }
  EXPECT_EQ(store.masks(), 8u);
}

TEST(MaskStore, EvictsTheLeastRecentlyUsedAndForgetsGrammarsWithNoMasks) {
  // Each mask of 8,000 tokens is 1,000 bytes of bits plus its state: three fit in 3,500 bytes.
  MaskStore store(3500);
  auto g = Schema(R"({"type":"boolean"})");
  ASSERT_EQ(store.Canonical(g), g);
  const std::vector<uint8_t> mask(8000, 1);
  auto key = [](int i) { return GrammarMatcher::State{{i}}; };
  std::vector<uint8_t> back;
  store.Put(g, key(1), mask);
  store.Put(g, key(2), mask);
  store.Put(g, key(3), mask);
  EXPECT_EQ(store.masks(), 3u);
  ASSERT_TRUE(store.Get(g.get(), key(1), back));  // 1 is now the most recent: 2 goes first
  store.Put(g, key(4), mask);
  EXPECT_EQ(store.masks(), 3u);
  EXPECT_LE(store.bytes(), 3500u);
  EXPECT_FALSE(store.Get(g.get(), key(2), back));
  EXPECT_TRUE(store.Get(g.get(), key(1), back));
  EXPECT_TRUE(store.Get(g.get(), key(4), back));
  // A mask bigger than the whole store is not kept.
  store.Put(g, key(5), std::vector<uint8_t>(40000, 1));
  EXPECT_FALSE(store.Get(g.get(), key(5), back));
  // Once every mask of a grammar is gone, an equal grammar compiled later becomes the canonical one.
  MaskStore small(1200);
  auto a = Schema(R"({"type":"integer"})"), b = Schema(R"({"type":"number"})");
  ASSERT_EQ(small.Canonical(a), a);
  small.Put(a, key(1), mask);
  small.Put(b, key(1), mask);  // evicts a's only mask
  EXPECT_FALSE(small.Get(a.get(), key(1), back));
  auto a2 = Schema(R"({"type":"integer"})");
  EXPECT_EQ(small.Canonical(a2), a2);
}

}  // namespace
}  // namespace graft
