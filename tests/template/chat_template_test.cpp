// Chat templates rendered by graft against @huggingface/jinja's renderings
// (oracle/render-templates.mjs) of the Qwen3 and Qwen3.5 templates, byte for byte.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include "template/interpreter.h"
#include "template/parser.h"
#include "test_util.h"

namespace graft {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const ChatTemplate> LoadTemplate(const std::string& name) {
  const std::string path = test::Fixture("templates/" + name + ".jinja");
  auto t = ChatTemplate::FromText(test::ReadText(path), path);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(ChatTemplate, MatchesHuggingFaceJinjaByteForByte) {
  const json cases = json::parse(test::ReadText(test::Fixture("templates/conversations.json")));
  const json renders = json::parse(test::ReadText(test::Fixture("templates/renders.json")));
  ASSERT_GT(renders.size(), 25u);
  std::map<std::string, std::shared_ptr<const ChatTemplate>> templates = {{"qwen3", LoadTemplate("qwen3")},
                                                                          {"qwen3_5", LoadTemplate("qwen3_5")}};
  size_t compared = 0;
  for (const auto& r : renders) {
    const std::string tname = r["template"], cname = r["case"];
    const json* c = nullptr;
    for (const auto& x : cases) if (x["name"] == cname) c = &x;
    ASSERT_NE(c, nullptr) << cname;
    ChatOptions opt;
    opt.add_generation_prompt = c->value("add_generation_prompt", true);
    if (c->contains("enable_thinking")) opt.enable_thinking = (*c)["enable_thinking"].get<bool>();
    if (c->contains("tools")) opt.tools = (*c)["tools"];
    opt.extra = c->value("extra", json::object());
    opt.extra["bos_token"] = "";
    opt.extra["eos_token"] = "<|im_end|>";
    auto got = templates[tname]->Render((*c)["messages"], opt);
    if (r.contains("error")) {
      ASSERT_FALSE(got.ok()) << tname << "/" << cname;
      EXPECT_NE(got.status().message().find(r["error"].get<std::string>()), std::string::npos) << got.status().ToString();
      continue;
    }
    ASSERT_TRUE(got.ok()) << tname << "/" << cname << ": " << got.status().ToString();
    EXPECT_EQ(got.value(), r["rendered"].get<std::string>()) << tname << "/" << cname;
    ++compared;
  }
  EXPECT_EQ(compared, 29u);  // every rendering but the three expected errors
}

std::string RenderText(const std::string& tmpl, const std::string& vars_json = "{}") {
  auto t = jinja::Parse(tmpl);
  if (!t.ok()) return "PARSE ERROR: " + t.status().message();
  jinja::Value v = jinja::Value::FromJson(json::parse(vars_json));
  auto out = jinja::Render(**t, v.as_dict());
  return out.ok() ? out.value() : "RENDER ERROR: " + out.status().message();
}

TEST(Jinja, WhitespaceControlTrimAndLstripBlocks) {
  EXPECT_EQ(RenderText("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(RenderText("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(RenderText("{{ 'x' }}\n{{ 'y' }}"), "x\ny");  // expression tags keep their newline
  EXPECT_EQ(RenderText("a {# comment #}\nb"), "a b");
}

TEST(Jinja, ExpressionsFiltersTestsAndMethods) {
  EXPECT_EQ(RenderText("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}"), "7 3 3.5 2 1024");
  EXPECT_EQ(RenderText("{{ [1, 2, 3][::-1] }} {{ 'abcdef'[1:4] }} {{ [1,2,3][-1] }}"), "[3, 2, 1] bcd 3");
  EXPECT_EQ(RenderText("{{ 'a' ~ 1 ~ none ~ true }}"), "a1NoneTrue");
  EXPECT_EQ(RenderText("{{ '  x  '|trim }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}"), "x|['a', 'b', '', 'c']|['a', 'b']");
  EXPECT_EQ(RenderText("{{ 'Hello'.startswith('He') }} {{ 'xyz'.rstrip('z') }} {{ 'abc'|upper }}"), "True xy ABC");
  EXPECT_EQ(RenderText("{{ x|tojson }}", R"({"x": {"a": [1, 2.5, "é\n"], "b": null}})"), R"({"a": [1, 2.5, "é\n"], "b": null})");
  EXPECT_EQ(RenderText("{{ x|tojson(indent=2) }}", R"({"x": {"a": [1]}})"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(RenderText("{{ y is defined }} {{ x is mapping }} {{ x.k is none }} {{ 3 is odd }} {{ 'a' is not string }}",
                       R"({"x": {"k": null}})"),
            "False True True True False");
  EXPECT_EQ(RenderText("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in x }} {{ 'z' not in x }}", R"({"x": {"k": 1}})"),
            "True True True True");
  EXPECT_EQ(RenderText("{{ 'yes' if x else 'no' }} {{ x or 'fallback' }} {{ undefined_thing|default('d') }}", R"({"x": 0})"),
            "no fallback d");
  EXPECT_EQ(RenderText("{% for k, v in x|items %}{{ k }}={{ v }};{% endfor %}", R"({"x": {"a": 1, "b": 2}})"), "a=1;b=2;");
  EXPECT_EQ(RenderText("{{ x|selectattr('r', 'equalto', 'u')|map(attribute='c')|join(',') }}",
                       R"({"x": [{"r": "u", "c": "1"}, {"r": "s", "c": "2"}, {"r": "u", "c": "3"}]})"),
            "1,3");
}

TEST(Jinja, LoopsScopesMacrosAndNamespaces) {
  EXPECT_EQ(RenderText("{% for x in [1,2,3] %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{% if not loop.last %},{% endif %}{% endfor %}"),
            "0TrueFalse,1FalseFalse,2FalseTrue");
  EXPECT_EQ(RenderText("{% set n = 1 %}{% for x in [1] %}{% set n = 5 %}{% endfor %}{{ n }}"), "1");
  EXPECT_EQ(RenderText("{% set ns = namespace(n=1) %}{% for x in [1] %}{% set ns.n = 5 %}{% endfor %}{{ ns.n }}"), "5");
  EXPECT_EQ(RenderText("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "13");
  EXPECT_EQ(RenderText("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(RenderText("{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}"), "2242");
  EXPECT_EQ(RenderText("{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}{{ m('x')|length }}"), "[1B][23]4");
  EXPECT_EQ(RenderText("{% for x in [1,2] %}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}"), "2|1|");
  EXPECT_EQ(RenderText("{% set s %}in{{ 1 }}{% endset %}{{ s }}"), "in1");
}

TEST(Jinja, UnsupportedConstructsAreNamed) {
  EXPECT_EQ(RenderText("x\n{% include 'other' %}"), "PARSE ERROR: line 2: unsupported tag 'include'");
  EXPECT_EQ(RenderText("{{ 1|wordwrap }}"), "RENDER ERROR: line 1: unsupported filter 'wordwrap'");
  EXPECT_EQ(RenderText("{{ 1 is prime }}"), "RENDER ERROR: line 1: unsupported test 'prime'");
  EXPECT_EQ(RenderText("{{ 'a'.expandtabs(3) }}"), "RENDER ERROR: line 1: unsupported method 'expandtabs' on a string");
  EXPECT_EQ(RenderText("{% if x %}never closed"), "PARSE ERROR: line 1: missing '{% endif %}' before the end of the template");
  EXPECT_EQ(RenderText("{{ 'unterminated }}"), "PARSE ERROR: line 1: '{{' is never closed");
  EXPECT_EQ(RenderText("{{ 1 + }}"), "PARSE ERROR: line 1: unexpected 'end of tag' in an expression");
  EXPECT_EQ(RenderText("{{ 'a' + 1 }}"), "RENDER ERROR: line 1: unsupported operands for '+': string and int");
  EXPECT_EQ(RenderText("{{ raise_exception('boom') }}"), "RENDER ERROR: line 1: template raised: boom");
  EXPECT_EQ(RenderText("{{ nothing() }}"), "RENDER ERROR: line 1: 'nothing' is not a function (it is undefined)");
}

// Numbers where an integer belongs (the fuzzer's find: a float slice index threw out of the
// renderer and took the process down) are render errors naming the rule, as Python's TypeErrors.
TEST(Jinja, FloatsWhereIntegersBelongAreErrorsNotCrashes) {
  EXPECT_EQ(RenderText("{{ 'abcdef'[1.5:] }}"), "RENDER ERROR: line 1: slice indices must be integers or none, not float");
  EXPECT_EQ(RenderText("{{ [1, 2, 3][:2.0] }}"), "RENDER ERROR: line 1: slice indices must be integers or none, not float");
  EXPECT_EQ(RenderText("{{ 'abc'[::0.5] }}"), "RENDER ERROR: line 1: slice indices must be integers or none, not float");
  EXPECT_EQ(RenderText("{{ 'abc'[:'x'] }}"), "RENDER ERROR: line 1: slice indices must be integers or none, not string");
  // The fuzzer's input: an integer literal past int64 is a float, and so is the index it makes.
  EXPECT_EQ(RenderText("{{ [1, 2][1 % 22222222222222222222222:2] }}"),
            "RENDER ERROR: line 1: slice indices must be integers or none, not float");
  EXPECT_NE(RenderText("{% for i in range(2.5) %}{% endfor %}").find("range() needs integers"), std::string::npos);
  EXPECT_NE(RenderText("{{ 'a-b-c'.split('-', 1.0) }}").find("split(): maxsplit must be an integer"), std::string::npos);
  EXPECT_NE(RenderText("{{ 'aaa'.replace('a', 'b', 1.0) }}").find("replace(): count must be an integer"), std::string::npos);
  EXPECT_NE(RenderText("{{ 'aaa' | replace('a', 'b', 2.0) }}").find("count must be an integer"), std::string::npos);
  EXPECT_NE(RenderText("{{ {'a': 1} | tojson(indent=1000000000) }}").find("indent must be an integer in 0..64"),
            std::string::npos);
  EXPECT_NE(RenderText("{{ {'a': 1} | tojson(indent=2.0) }}").find("indent must be an integer in 0..64"), std::string::npos);
  // Integers still work.
  EXPECT_EQ(RenderText("{{ 'abcdef'[1:4] }}|{{ 'abcdef'[::-2] }}|{{ [1, 2, 3][-2:] }}"), "bcd|fdb|[2, 3]");
  EXPECT_EQ(RenderText("{{ 'a-b-c'.split('-', 1) }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ range(3) | list }}"),
            "['a', 'b-c']|bba|[0, 1, 2]");
}

// replace is Python's str.replace (Jinja's filter and the string method both call it): an empty
// pattern matches before every character and at the end, a count bounds the hits and a negative
// one means all. count agrees.
TEST(Jinja, ReplaceAndCountArePythons) {
  EXPECT_EQ(RenderText("{{ 'abc'.replace('', '-') }}|{{ 'abc' | replace('', '-', 2) }}|{{ ''.replace('', 'x') }}|"
                       "{{ 'abc'.replace('', '-', 0) }}|{{ 'aaaa'.replace('aa', 'b') }}|{{ 'abab' | replace('ab', '', -1) }}|"
                       "{{ 'a.b.c'.replace('.', '::', 1) }}|{{ 'xyz'.replace('q', 'r') }}"),
            "-a-b-c-|-a-bc|x|abc|bb||a::b.c|xyz");
  // count as Python's: an empty substring counts once before each character and once at the end.
  EXPECT_EQ(RenderText("{{ 'abc'.count('') }}|{{ ''.count('') }}|{{ 'aaaa'.count('aa') }}|{{ 'abc'.count('d') }}"), "4|1|2|0");
}

// Jinja's sort, dictsort, unique, min, max, sum, round and map(filter) as Jinja2 computes them
// (case-insensitive by default, stable, attribute= paths), and what cannot be ordered is a named
// error.
TEST(Jinja, SortingAndAggregateFiltersAreJinjas) {
  EXPECT_EQ(RenderText("{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'a'] | sort }}|{{ ['b', 'B', 'a'] | sort(case_sensitive=true) }}|"
                       "{{ [3, 1, 2] | sort(reverse=true) }}|{{ [2, 1.5, true] | sort }}|{{ 'cab' | sort | join }}"),
            "[1, 2, 3]|['A', 'a', 'b']|['B', 'a', 'b']|[3, 2, 1]|[True, 1.5, 2]|abc");
  EXPECT_EQ(RenderText("{{ tools | sort(attribute='function.name') | map(attribute='function.name') | join(',') }}",
                       R"({"tools": [{"function": {"name": "zeta"}}, {"function": {"name": "Alpha"}}, {"function": {"name": "beta"}}]})"),
            "Alpha,beta,zeta");
  EXPECT_EQ(RenderText("{% for k, v in d | dictsort %}{{ k }}={{ v }};{% endfor %}|{{ d | dictsort(by='value', reverse=true) }}",
                       R"({"d": {"b": 1, "a": 3, "C": 2}})"),
            "a=3;b=1;C=2;|[('a', 3), ('C', 2), ('b', 1)]");
  EXPECT_EQ(RenderText("{{ [1, 1, 2, 'A', 'a'] | unique | list }}|{{ [1, true, 1.0, 2] | unique | list }}|"
                       "{{ ['b', 'C', 'a'] | min }}|{{ [1, 3, 2] | max }}|{{ [] | max }}|{{ [{'a': 2}, {'a': 5}] | max(attribute='a') }}"),
            "[1, 2, 'A']|[1, 2]|a|3||{'a': 5}");
  EXPECT_EQ(RenderText("{{ [1, 2, 3] | sum }}|{{ [1, 2.5] | sum }}|{{ [] | sum }}|{{ [{'a': 2}, {'a': 3}] | sum(attribute='a') }}|"
                       "{{ [1] | sum(start=10) }}"),
            "6|3.5|0|5|11");
  // round: Python's round (ties to even on the exact binary value; floats stay floats), or ceil / floor.
  EXPECT_EQ(RenderText("{{ 2.5 | round }}|{{ 0.5 | round }}|{{ 1.25 | round(1) }}|{{ 2.675 | round(2) }}|{{ 3 | round }}|"
                       "{{ 25 | round(-1) }}|{{ 1.21 | round(1, 'ceil') }}|{{ 1.29 | round(1, 'floor') }}"),
            "2.0|0.0|1.2|2.67|3|20|1.3|1.2");
  EXPECT_EQ(RenderText("{{ [1, 2, 3] | map('string') | join('-') }}|{{ ['a', 'B'] | map('upper') | list }}|"
                       "{{ [[1, 2], [3]] | map('length') | list }}|{{ [{'a': 1}, {}] | map(attribute='a', default=0) | list }}"),
            "1-2-3|['A', 'B']|[2, 1]|[1, 0]");
  EXPECT_EQ(RenderText("{{ [1, 'a'] | sort }}"), "RENDER ERROR: line 1: filter 'sort': cannot order int and string values");
  EXPECT_EQ(RenderText("{{ [[1], [2]] | unique | list }}"),
            "RENDER ERROR: line 1: filter 'unique': a list value cannot be compared for uniqueness");
  EXPECT_EQ(RenderText("{{ ['a'] | sum }}"), "RENDER ERROR: line 1: filter 'sum': cannot add int and string values");
  EXPECT_EQ(RenderText("{{ 1.5 | round(1, 'up') }}"),
            "RENDER ERROR: line 1: filter 'round': method must be 'common', 'ceil' or 'floor'");
  EXPECT_EQ(RenderText("{{ [1] | map('nope') | list }}"), "RENDER ERROR: line 1: unsupported filter 'nope'");
}

// select / reject test items (or their truth), selectattr reads dotted attributes, loop.cycle
// alternates its values: as Jinja2.
TEST(Jinja, SelectRejectAndLoopCycleAreJinjas) {
  EXPECT_EQ(RenderText("{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('odd') | list }}|"
                       "{{ [0, 1, '', 'a', none] | select | list }}|{{ [1, 5, 10] | select('ge', 5) | list }}"),
            "[1, 3]|[2, 4]|[1, 'a']|[5, 10]");
  EXPECT_EQ(RenderText("{{ tools | selectattr('function.name', 'equalto', 'b') | map(attribute='type') | list }}",
                       R"({"tools": [{"type": "x", "function": {"name": "a"}}, {"type": "y", "function": {"name": "b"}}]})"),
            "['y']");
  EXPECT_EQ(RenderText("{{ [3, 'b'] | select('lt', 5) | list }}"), "RENDER ERROR: line 1: test 'lt': cannot compare string and int");
  EXPECT_EQ(RenderText("{{ 6 is divisibleby(3) }}|{{ 7 is divisibleby(3) }}|{{ 'a' is lt('b') }}|{{ 2 is le(2) }}|{{ 2 is gt(2.5) }}"),
            "True|False|True|True|False");
  EXPECT_EQ(RenderText("{% for i in range(5) %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}"), "abcab");
  EXPECT_EQ(RenderText("{% for i in [1] %}{{ loop.cycle() }}{% endfor %}"),
            "RENDER ERROR: line 1: loop.cycle needs at least one value");
}

// indent and str.splitlines as Jinja2 and Python (expected texts from jinja2 3.1.6).
TEST(Jinja, IndentAndSplitlinesAreJinjas) {
  EXPECT_EQ(RenderText("{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb\\n\\nc' | indent(2, true) }}|{{ 'a\\n' | indent(blank=true) }}|"
                       "{{ 'x\\r\\ny' | indent('> ') }}|{{ '' | indent(2, first=true) }}"),
            "a\n    b\n\n    c|  a\n  b\n\n  c|a\n    |x\n> y|  ");
  EXPECT_EQ(RenderText("{{ 'a\\nb\\r\\nc\\rd\\x0be\\x1cf\u2028g\\n'.splitlines() }}|{{ 'a\\nb\\n'.splitlines(true) }}"),
            "['a', 'b', 'c', 'd', 'e', 'f', 'g']|['a\\n', 'b\\n']");
  // String literals decode Python's escapes, as Jinja's lexer does.
  EXPECT_EQ(RenderText("{{ '\\x41\\u00e9\\U0001F600\\101\\q\\v' | tojson }}"), "\"Aé😀A\\\\q\\u000b\"");
  EXPECT_EQ(RenderText("{{ '\\xZZ' }}"), "PARSE ERROR: line 1: a string's \\x escape needs 2 hex digits (at most U+10FFFF)");
  EXPECT_EQ(RenderText("{{ 'a' | indent(5000) }}"), "RENDER ERROR: line 1: filter 'indent': width must be a string or an integer in 0..1024");
}

// Python's printf-style formatting: the '%' operator on a string and the format filter
// (expected texts from Python 3 / jinja2 3.1.6).
TEST(Jinja, PercentFormattingIsPythons) {
  EXPECT_EQ(RenderText("{{ '%s: %d' % (name, n) }}|{{ '%05.1f|%-4s|%+d|%#x' % (3.14159, 'ab', 7, 255) }}|{{ '%s' % [1, 2] }}",
                       R"({"name": "turn", "n": 3})"),
            "turn: 3|003.1|ab  |+7|0xff|[1, 2]");
  EXPECT_EQ(RenderText("{{ '%(role)s said %(n)d' % m }}|{{ '%s=%s' | format('a', 1) }}|{{ '%(k)s' | format(k='v') }}|{{ '100%%' % () }}",
                       R"({"m": {"role": "user", "n": 2}})"),
            "user said 2|a=1|v|100%");
  EXPECT_EQ(RenderText("{{ '%s %s' % ('a',) }}"), "RENDER ERROR: line 1: '%' formatting: not enough arguments for the format string");
  EXPECT_EQ(RenderText("{{ 'abc' % 5 }}"), "RENDER ERROR: line 1: '%' formatting: not all arguments converted during string formatting");
  EXPECT_EQ(RenderText("{{ '%d' % 'x' }}"), "RENDER ERROR: line 1: '%' formatting: %d format: a real number is required, not str");
  EXPECT_EQ(RenderText("{{ '%q' % 1 }}"), "RENDER ERROR: line 1: '%' formatting: unsupported format character 'q'");
  EXPECT_EQ(RenderText("{{ 'ab%' % () }}"), "RENDER ERROR: line 1: '%' formatting: incomplete format");
  EXPECT_EQ(RenderText("{{ '%2000d' % 1 }}"), "RENDER ERROR: line 1: '%' formatting: width and precision stop at 1024");
  EXPECT_EQ(RenderText("{{ '%s' | format(1, k=2) }}"),
            "RENDER ERROR: line 1: filter 'format': positional and keyword arguments at once");
}

// str.format as Jinja's sandbox runs it (expected texts from jinja2 3.1.6).
TEST(Jinja, StrFormatIsPythons) {
  EXPECT_EQ(RenderText("{{ '<{}> {role}: {0!r}'.format(x, role='tool') }}|{{ '{:>6.2f}|{:^7}|{:,}|{:#06x}'.format(3.14159, 'ab', 1234567, 255) }}",
                       R"({"x": "hi"})"),
            "RENDER ERROR: line 1: str.format: cannot switch from automatic field numbering to manual field specification");
  EXPECT_EQ(RenderText("{{ '<{}> {role}: {!r}'.format(x, x, role='tool') }}|{{ '{:>6.2f}|{:^7}|{:,}|{:#06x}'.format(3.14159, 'ab', 1234567, 255) }}",
                       R"({"x": "hi"})"),
            "<hi> tool: 'hi'|  3.14|  ab   |1,234,567|0x00ff");
  EXPECT_EQ(RenderText("{{ '{m[role]}/{m.content}|{{}}|{0:{1}}|'.format('ab', 4, m=msg) }}", R"({"msg": {"role": "user", "content": "c"}})"),
            "user/c|{}|ab  |");
  EXPECT_EQ(RenderText("{{ '{:.3}|{:.3}|{}|{:.1%}'.format(100.0, 3.0, 0.5, 0.256) }}"), "1e+02|3.0|0.5|25.6%");
  EXPECT_EQ(RenderText("{{ '{}{}'.format(1) }}"), "RENDER ERROR: line 1: str.format: replacement index 1 out of range for 1 positional arguments");
  EXPECT_EQ(RenderText("{{ 'a}'.format() }}"), "RENDER ERROR: line 1: str.format: Single '}' encountered in format string");
  EXPECT_EQ(RenderText("{{ '{y}'.format() }}"), "RENDER ERROR: line 1: str.format: no keyword argument 'y'");
  EXPECT_EQ(RenderText("{{ '{:d}'.format('x') }}"), "RENDER ERROR: line 1: str.format: Unknown format code 'd' for object of type 'str'");
  EXPECT_EQ(RenderText("{{ '{:5}'.format(none) }}"), "RENDER ERROR: line 1: str.format: unsupported format string passed to NoneType.__format__");
}

// Tuples: literals and a dict's items print as Python's and never equal a list (jinja2 3.1.6).
TEST(Jinja, TuplesArePythons) {
  EXPECT_EQ(RenderText("{{ (1, 'a') }}|{{ (1,) }}|{{ () }}|{{ d | items | list }}|{{ (1, 2) == [1, 2] }}|{{ (1, 2) + (3,) }}|"
                       "{{ (1, 2, 3)[1:] }}|{{ (1, 2) | tojson }}|{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}",
                       R"({"d": {"a": 1}})"),
            "(1, 'a')|(1,)|()|[('a', 1)]|False|(1, 2, 3)|(2, 3)|[1, 2]|a1");
  EXPECT_EQ(RenderText("{{ [1] + (2,) }}"), "RENDER ERROR: line 1: unsupported operands for '+': list and tuple");
}

// Case and character classes are Python's, Unicode included; Jinja's title filter is its own
// (expected texts from Python 3 / jinja2 3.1.6).
TEST(Jinja, CaseAndClassesAreUnicodes) {
  EXPECT_EQ(RenderText("{{ 'straße' | upper }}|{{ 'ÉCOLE' | lower }}|{{ 'élan vital' | capitalize }}|{{ \"they're 1st\" | title }}|"
                       "{{ \"they're 1st\".title() }}|{{ 'ÀB'.isupper() }}{{ 'é1'.isalpha() }}{{ '²'.isdigit() }}{{ '²'.isdecimal() }}"
                       "{{ '' is upper }}{{ 'Ab Cd'.istitle() }}"),
            "STRASSE|école|Élan vital|They're 1st|They'Re 1St|TrueFalseTrueFalseFalseTrue");
}

// int and float as Jinja's filters define them: Python's int(s, base) / float(s), else the
// default (expected texts from jinja2 3.1.6).
TEST(Jinja, IntAndFloatFiltersArePythons) {
  EXPECT_EQ(RenderText("{{ '12abc' | int }}|{{ 'x' | int(7) }}|{{ '0x1A' | int(0, 16) }}|{{ '1_000' | int }}|{{ '3.7' | int }}|"
                       "{{ true | int }}|{{ '010' | int(base=0) }}|{{ 'a' | float(1.5) }}|{{ ' 1e3 ' | float }}|{{ true | float }}"),  // '010': int() refuses it, float() reads 10
            "0|7|26|1000|3|1|10|1.5|1000.0|1.0");
  EXPECT_EQ(RenderText("{{ '1' | int(0, 1) }}"), "RENDER ERROR: line 1: filter 'int': base must be 0 or 2..36");
}

// groupby (sorted, runs of equal keys, each a (grouper, list) pair that also answers .grouper
// and .list) and truncate as Jinja defines them (expected texts from jinja2 3.1.6).
TEST(Jinja, GroupbyAndTruncateAreJinjas) {
  EXPECT_EQ(RenderText("{% for g in messages | groupby('role') %}{{ g.grouper }}:{{ g.list | length }};{% endfor %}|"
                       "{% for role, ms in messages | groupby('role') %}{{ role }}{{ ms | map(attribute='n') | list }}{% endfor %}",
                       R"({"messages": [{"role": "user", "n": 1}, {"role": "Assistant", "n": 2}, {"role": "User", "n": 3}]})"),
            "Assistant:1;user:2;|Assistant[2]user[1, 3]");
  EXPECT_EQ(RenderText("{{ 'abcdefghijkl mno' | truncate(9) }}|{{ 'hello world foo' | truncate(11, true) }}|"
                       "{{ 'ab cd ef gh ij' | truncate(6, leeway=0) }}"),
            "abcdef...|hello world foo|ab...");
  EXPECT_EQ(RenderText("{{ [{'a': 1}, {'a': 'x'}] | groupby('a') | list }}"),
            "RENDER ERROR: line 1: filter 'groupby': cannot order int and string values");
  EXPECT_EQ(RenderText("{{ 'abc' | truncate(2) }}"),
            "RENDER ERROR: line 1: filter 'truncate': length must be an integer at least as long as end, leeway an integer >= 0");
}

// A bare tuple in set, loop.changed, and the rest of Python's str methods templates reach for
// (expected texts from jinja2 3.1.6).
TEST(Jinja, SetTuplesLoopChangedAndStrMethodsArePythons) {
  EXPECT_EQ(RenderText("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% for m in ms %}{% if loop.changed(m.r) %}[{{ m.r }}]{% endif %}{% endfor %}",
                       R"({"ms": [{"r": "user"}, {"r": "user"}, {"r": "tool"}, {"r": "user"}]})"),
            "12|[user][tool][user]");
  EXPECT_EQ(RenderText("{{ 'éa'.find('a') }}|{{ 'a-b-c'.rpartition('-') }}|{{ '-7'.zfill(4) }}|{{ 'ab'.center(6, '*') }}|"
                       "{{ 'Straße'.casefold() }}|{{ 'Hi'.swapcase() }}|{{ 'abc'.removeprefix('a') }}"),
            "1|('a-b', '-', 'c')|-007|**ab**|strasse|hI|bc");
  EXPECT_EQ(RenderText("{{ 'abc'.index('x') }}"), "RENDER ERROR: line 1: index(): substring not found");
  EXPECT_EQ(RenderText("{{ 'abc'.partition('') }}"), "RENDER ERROR: line 1: partition(): empty separator");
  EXPECT_EQ(RenderText("{{ 'abc'.ljust(5, '**') }}"),
            "RENDER ERROR: line 1: ljust(): the fill character must be exactly one character long");
}

// {% raw %}, {% with %} and Python's ordering of lists and tuples (expected texts from
// jinja2 3.1.6 with transformers' trim_blocks / lstrip_blocks).
TEST(Jinja, RawWithAndSequenceOrderAreJinjas) {
  EXPECT_EQ(RenderText("a\n  {% raw %}\n{{ x }}{% if %}\n  {% endraw %}\nb|{% raw -%}  {{ y }}  {%- endraw %}|"),
            "a\n\n{{ x }}{% if %}\nb|{{ y }}|");
  EXPECT_EQ(RenderText("{% set a = 5 %}{% with a = 1, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}|"
                       "{% with %}{% set q = 2 %}{{ q }}{% endwith %}[{{ q }}]"),
            "155|2[]");
  EXPECT_EQ(RenderText("{{ [1, 2] < [1, 3] }}|{{ (1, 2) < (1, 3) }}|{{ [1] < [1, 0] }}|{{ true < 2 }}"), "True|True|True|True");
  EXPECT_EQ(RenderText("{{ [1] < (1,) }}"), "RENDER ERROR: line 1: cannot compare list and tuple with '<'");
  EXPECT_EQ(RenderText("{{ [1, 'a'] < [1, 2] }}"), "RENDER ERROR: line 1: cannot compare list and list with '<'");
  EXPECT_EQ(RenderText("x\n{% raw %}never closed"), "PARSE ERROR: line 2: '{% raw %}' is never closed by '{% endraw %}'");
}

// Bad arguments to this session's filters, methods and tags are errors that name them.
TEST(Jinja, FormattingAndSequenceHelpersNameTheirBadArguments) {
  EXPECT_EQ(RenderText("{{ 'a b'.rsplit('') }}"), "RENDER ERROR: line 1: rsplit(): empty separator");
  EXPECT_EQ(RenderText("{{ [1, 2] | batch(0) | list }}"), "RENDER ERROR: line 1: filter 'batch': the count must be an integer from 1");
  EXPECT_EQ(RenderText("{{ [1, 2] | slice('x') | list }}"), "RENDER ERROR: line 1: filter 'slice': the count must be an integer from 1");
  EXPECT_EQ(RenderText("{{ 'ab' | center('x') }}"), "RENDER ERROR: line 1: filter 'center': width must be an integer up to 1048576");
  EXPECT_EQ(RenderText("{{ [{'a': 1}] | groupby | list }}"),
            "RENDER ERROR: line 1: filter 'groupby' needs an attribute (a name or an index)");
  EXPECT_EQ(RenderText("{{ '%(a)s' % 'x' }}"), "RENDER ERROR: line 1: '%' formatting: format requires a mapping (a dict) for %(a)");
  EXPECT_EQ(RenderText("{{ '%(b)s' % {'a': 1} }}"), "RENDER ERROR: line 1: '%' formatting: no key 'b' in the mapping");
  EXPECT_EQ(RenderText("{{ '{0[5]}'.format([1]) }}"), "RENDER ERROR: line 1: str.format: index 5 out of range");
  EXPECT_EQ(RenderText("{{ '{:q}'.format(1.5) }}"), "RENDER ERROR: line 1: str.format: Unknown format code 'q' for object of type 'float'");
  EXPECT_EQ(RenderText("{% with a %}x{% endwith %}"), "PARSE ERROR: line 1: expected '=' but found 'end of tag'");
  EXPECT_EQ(RenderText("{% with a = 1 %}x"), "PARSE ERROR: line 1: missing '{% endwith %}' before the end of the template");
}

// Every line of fixtures/templates/jinja2-cases.txt renders as Jinja2 renders it in transformers'
// chat-template environment (scripts/make-jinja2-cases.py wrote the expected texts), or is refused
// where Jinja2 refuses it.
TEST(Jinja, MatchesJinja2OnTheCases) {
  const json fixture = json::parse(test::ReadText(test::Fixture("templates/jinja2-cases.json")));
  ASSERT_GE(fixture["cases"].size(), 80u);
  for (const auto& c : fixture["cases"]) {
    const std::string got = RenderText(c["template"].get<std::string>());
    if (c["render"].is_null()) {
      EXPECT_TRUE(got.rfind("RENDER ERROR", 0) == 0 || got.rfind("PARSE ERROR", 0) == 0) << c["template"] << " -> " << got;
    } else {
      EXPECT_EQ(got, c["render"].get<std::string>()) << c["template"];
    }
  }
}

// tojson is transformers' filter: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False), its arguments in that order (expected texts from Python).
TEST(Jinja, TojsonTakesTransformersOptions) {
  const std::string x = R"({"x": {"b": [1, "é😀"], "a": {"c": null}}})";
  EXPECT_EQ(RenderText("{{ x | tojson }}", x), R"({"b": [1, "é😀"], "a": {"c": null}})");
  EXPECT_EQ(RenderText("{{ x | tojson(sort_keys=true) }}", x), R"({"a": {"c": null}, "b": [1, "é😀"]})");
  EXPECT_EQ(RenderText("{{ x | tojson(separators=(',', ':')) }}", x), R"({"b":[1,"é😀"],"a":{"c":null}})");
  EXPECT_EQ(RenderText("{{ x | tojson(ensure_ascii=true) }}", x), R"({"b": [1, "\u00e9\ud83d\ude00"], "a": {"c": null}})");
  EXPECT_EQ(RenderText("{{ x | tojson(false, 1, none, true) }}", x),
            "{\n \"a\": {\n  \"c\": null\n },\n \"b\": [\n  1,\n  \"é😀\"\n ]\n}");
  EXPECT_EQ(RenderText("{{ x | tojson(indent=2, separators=[', ', ' = ']) }}", x),
            "{\n  \"b\" = [\n    1, \n    \"é😀\"\n  ], \n  \"a\" = {\n    \"c\" = null\n  }\n}");
  EXPECT_EQ(RenderText("{{ x | tojson(separators=',') }}", x),
            "RENDER ERROR: line 1: filter 'tojson': separators must be two strings (item, key) of up to 64 bytes");
}

// Sequences repeat as Python's do ('ab' * 2, 3 * [0]), bounded like every value; floats take
// exponents.
TEST(Jinja, RepetitionAndExponentsArePythons) {
  EXPECT_EQ(RenderText("{{ 'ab' * 3 }}|{{ 2 * [0, 1] }}|{{ 'ab' * 0 }}|{{ [1] * -2 }}|{{ '' * 1000000000000 }}|{{ '=' * 3 ~ '>' }}"),
            "ababab|[0, 1, 0, 1]||[]||===>");
  EXPECT_EQ(RenderText("{{ 'ab' * 100000000 }}"), "RENDER ERROR: line 1: '*' would make a string of more than 16777216 bytes");
  EXPECT_EQ(RenderText("{{ ([1, 2] * 600000) | length }}"),
            "RENDER ERROR: line 1: '*' would make a list of more than 1000000 items");
  EXPECT_EQ(RenderText("{{ 1e20 }}|{{ 2.5E-3 }}|{{ 1_000.5e1_0 }}|{{ 3e }}"), "PARSE ERROR: line 1: unexpected 'e' at the end of a tag");
  EXPECT_EQ(RenderText("{{ 1e20 }}|{{ 2.5E-3 }}|{{ 1_000.5e1_0 }}|{{ 1e+2 }}"), "1e+20|0.0025|10005000000000.0|100.0");
}

// A chat template is a file from the checkpoint: one nested without bound, or a macro that
// calls itself, is a named error, never a stack overflow.
const std::string kBudget =
    "RENDER ERROR: line 1: the template took more than 100000 steps (a step: a loop iteration, a macro call or 512 "
    "bytes of text made)";

TEST(Jinja, HostileNestingIsANamedErrorNotACrash) {
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  const std::string nested = "PARSE ERROR: line 1: expressions and blocks nested deeper than 200 levels";
  EXPECT_EQ(RenderText("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}"), nested);
  EXPECT_EQ(RenderText("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}"), nested);
  EXPECT_EQ(RenderText("{{ " + repeat("not ", 100000) + "1 }}"), nested);
  EXPECT_EQ(RenderText("{{ " + repeat("- ", 100000) + "1 }}"), nested);
  EXPECT_EQ(RenderText(repeat("{% if 1 %}", 100000) + repeat("{% endif %}", 100000)), nested);
  // Chains the parser builds in a loop.
  const std::string chain = "PARSE ERROR: line 1: an expression nested deeper than 200 levels";
  EXPECT_EQ(RenderText("{{ 1" + repeat(" + 1", 100000) + " }}"), chain);
  EXPECT_EQ(RenderText("{{ x" + repeat(".a", 100000) + " }}"), chain);
  EXPECT_EQ(RenderText("{{ 'a'" + repeat("|upper", 100000) + " }}"), chain);
  // A chain freed after a syntax error later in the same tag.
  EXPECT_EQ(RenderText("{{ 1" + repeat(" + 1", 100000) + " + }}"), "PARSE ERROR: line 1: unexpected 'end of tag' in an expression");
  // Within the bounds, the same constructs still work.
  EXPECT_EQ(RenderText("{{ " + std::string(150, '(') + "1" + std::string(150, ')') + " }}"), "1");
  EXPECT_EQ(RenderText("{{ 0" + repeat(" + 1", 150) + " }}"), "150");
  EXPECT_EQ(RenderText("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
            "RENDER ERROR: line 1: macro 'f': calls nested deeper than 64");
  EXPECT_EQ(RenderText("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}done{% endif %}{% endmacro %}{{ f(50) }}"), "done");
  // Work is bounded too: loops nested without end are a render error, not a hung request.
  EXPECT_EQ(RenderText("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}"
                       "{% endfor %}"),
            kBudget);
  EXPECT_EQ(RenderText("{% for i in range(100000) %}{% endfor %}ok"), "ok");
  // Macros that call themselves twice each, 60 deep (2^60 calls, no loop): bounded the same way.
  EXPECT_EQ(RenderText("{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}"),
            kBudget);
  EXPECT_EQ(RenderText("{% macro f(n) %}{% if n < 12 %}{{ f(n + 1) }}{{ f(n + 1) }}{% else %}.{% endif %}{% endmacro %}"
                       "{{ f(0) | length }}"),
            "4096");
}

// Values that grow without end (doubled in a loop, a namespace that holds itself, shared lists
// nested in each other) are named errors within the work budget, never an exhausted memory or
// an overflowed stack.
TEST(Jinja, HostileGrowthIsANamedErrorNotACrash) {
  const auto doubled = [](const std::string& init, const std::string& step, int times, const std::string& use) {
    return "{% set ns = namespace(v=" + init + ") %}{% for i in range(" + std::to_string(times) + ") %}{% set ns.v = " + step +
           " %}{% endfor %}{{ " + use + " }}";
  };
  // A string doubled 60 times would be 2^61 bytes: it stops at the 16 MB bound on a value (each
  // doubling also pays its text into the work budget: 100 such strings would exhaust it).
  EXPECT_EQ(RenderText(doubled("'ab'", "ns.v ~ ns.v", 60, "ns.v | length")),
            "RENDER ERROR: line 1: '~' would make a string of more than 16777216 bytes");
  EXPECT_EQ(RenderText(doubled("'x'", "ns.v | replace('x', 'xx')", 60, "ns.v | length")),
            "RENDER ERROR: line 1: replace: the result passes 16777216 bytes");
  EXPECT_EQ(RenderText(doubled("'x'", "ns.v.replace('x', 'xxx')", 60, "ns.v | length")),
            "RENDER ERROR: line 1: replace: the result passes 16777216 bytes");
  EXPECT_EQ(RenderText(doubled("'x'", "ns.v | replace('', 'x')", 60, "ns.v | length")),
            "RENDER ERROR: line 1: replace: the result passes 16777216 bytes");
  // Text made counts: 8 MB strings made over and over run out of steps.
  EXPECT_EQ(RenderText("{% set ns = namespace(v='ab') %}{% for i in range(22) %}{% set ns.v = ns.v ~ ns.v %}{% endfor %}"
                       "{% for i in range(20) %}{% set x = ns.v ~ '' %}{% endfor %}"),
            kBudget);
  // One operation past the bound on a value, named.
  EXPECT_EQ(RenderText("{% set s = range(20000) | join('') %}{{ (s | replace('1', '" + std::string(2000, 'y') + "')) | length }}"),
            "RENDER ERROR: line 1: replace: the result passes 16777216 bytes");
  // Lists: doubled by '+', listed or split out of a long string.
  EXPECT_EQ(RenderText(doubled("[1]", "ns.v + ns.v", 30, "ns.v | length")),
            "RENDER ERROR: line 1: '+' would make a list of more than 1000000 items");
  EXPECT_EQ(RenderText(doubled("'a,'", "ns.v ~ ns.v", 20, "ns.v.split(',') | length")),
            "RENDER ERROR: line 1: split(): more than 1000000 parts");
  EXPECT_EQ(RenderText(doubled("'a,'", "ns.v ~ ns.v", 19, "ns.v.split(',') | length")), "524289");
  EXPECT_EQ(RenderText(doubled("'ab'", "ns.v ~ ns.v", 19, "ns.v | list | length")),
            "RENDER ERROR: line 1: filter 'list': a string of more than 1000000 characters");
  // A shared list nested in itself 40 deep prints 2^40 items: stopped at the bound on a value.
  EXPECT_EQ(RenderText(doubled("[1]", "[ns.v, ns.v]", 40, "ns.v")),
            "RENDER ERROR: line 1: a value of more than 16777216 bytes");
  EXPECT_EQ(RenderText(doubled("[1]", "[ns.v, ns.v]", 40, "ns.v | tojson")),
            "RENDER ERROR: line 1: tojson: the text passed 16777216 bytes");
  // A namespace that holds itself prints as Python prints it, compares equal to itself, and is
  // no JSON.
  const std::string self = "{% set ns = namespace(a=1) %}{% set ns.a = ns %}";
  EXPECT_EQ(RenderText(self + "{{ ns }}"), "{'a': {...}}");
  EXPECT_EQ(RenderText(self + "{{ ns == ns }}"), "True");
  EXPECT_NE(RenderText(self + "{{ ns | tojson }}").find("circular reference"), std::string::npos);
  // Within the bounds the same constructs work: a 1 MB record through a filter and out.
  EXPECT_EQ(RenderText("{% set s = range(100000) | join('') %}{{ (s ~ s) | trim | length }}"), "977780");
  EXPECT_EQ(RenderText(doubled("'ab'", "ns.v ~ ns.v", 10, "ns.v | length")), "2048");
}

// Integers that leave int64 become floats (printed as Python prints floats; the JavaScript
// reference's numbers are floats throughout) instead of wrapping, which C++ leaves undefined;
// the modulo takes the divisor's sign, as Python's.
TEST(Jinja, IntegerArithmeticNeverOverflows) {
  EXPECT_EQ(RenderText("{{ 9223372036854775807 + 1 }}|{{ -9223372036854775807 - 10 }}|{{ 4294967296 * 4294967296 }}|{{ 2 ** 70 }}"),
            "9.223372036854776e+18|-9.223372036854776e+18|1.8446744073709552e+19|1.1805916207174113e+21");
  EXPECT_EQ(RenderText("{{ 2 ** 10 }} {{ 7 // 2 }} {{ -7 // 2 }}"), "1024 3 -4");
  EXPECT_EQ(RenderText("{{ -7 % 3 }} {{ 7 % -3 }} {{ 6 % -3 }} {{ 5 % -1 }}"), "2 -2 0 0");
  // Found by the fuzzer (fuzz/jinja_fuzz.cpp): a literal past int64 threw out of the parser.
  EXPECT_EQ(RenderText("{{ 55555555555555555555555 > 1 }}"), "True");
  EXPECT_EQ(RenderText("{{ 3.9|int }} {{ -3.9|int }} {{ '12'|int }} {{ 'x'|int }}"), "3 -3 12 0");
  EXPECT_EQ(RenderText("{{ (2 ** 70)|int }}"), "RENDER ERROR: line 1: int(): 1.1805916207174113e+21 is out of range");
}

TEST(ChatTemplate, LoadsFromTokenizerConfigAndOverride) {
  test::TempDir d;
  test::WriteText(d.File("tokenizer_config.json"),
                  R"({"eos_token": "<|im_end|>", "bos_token": null, "chat_template": "{{ eos_token }}|{{ messages[0].content }}"})");
  auto t = ChatTemplate::Load(d.path(), "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->eos_token(), "<|im_end|>");
  EXPECT_EQ((*t)->Render(json::parse(R"([{"role":"user","content":"hi"}])"), {}).value(), "<|im_end|>|hi");
  test::WriteText(d.File("override.jinja"), "override {{ messages|length }}");
  auto o = ChatTemplate::Load(d.path(), d.File("override.jinja"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ((*o)->Render(json::parse(R"([{"role":"user","content":"hi"}])"), {}).value(), "override 1");
  test::TempDir empty;
  auto none = ChatTemplate::Load(empty.path(), "");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("pass --chat-template FILE"), std::string::npos);
  auto bad = ChatTemplate::FromText("{% for %}", "bad.jinja");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("chat template bad.jinja: line 1"), std::string::npos);
  auto msgs = ChatTemplate::FromText("x", "t");
  EXPECT_FALSE((*msgs)->Render(json::parse(R"([{"content":"no role"}])"), {}).ok());
}

}  // namespace
}  // namespace graft
