#!/usr/bin/env python3
"""Reference token ids from Hugging Face `tokenizers`, and small tokenizers for the fixture models.

Runs where `tokenizers` and `transformers` are installed (the GPU machine).
Usage: scripts/make-tokenizer-refs.py QWEN3_TOKENIZER_JSON OUTDIR

Writes OUTDIR/qwen3_ids.json: for every string of fixtures/tokenizer/corpus.json, the ids of
`encode(s, add_special_tokens=False)` and `decode(ids, skip_special_tokens=False)`.
Trains OUTDIR/small/{tokenizer.json, ...}: a 500-token byte-level BPE with Qwen's normalizer,
pre-tokenizer and special tokens (for the 512-token fixture models), saves its merges in the
legacy "a b" form too (small_legacy/), checks that both load to the same ids, and writes
their reference ids for the corpus.
"""
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers, Regex

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>"]


def refs(tok, corpus):
    out = []
    for s in corpus:
        ids = tok.encode(s, add_special_tokens=False).ids
        out.append({"text": s, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    return out


def train_small(qwen, corpus):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    pattern = json.loads(qwen.to_str())["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500 - len(SPECIALS) - len(ADDED), special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    text = corpus * 20 + [open(__file__).read()] * 5
    tok.train_from_iterator(text, trainer)
    tok.add_special_tokens(SPECIALS)
    tok.add_tokens(ADDED)
    return tok


def main():
    qwen_path, out = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    corpus = json.load(open(os.path.join(here, "..", "fixtures", "tokenizer", "corpus.json")))
    os.makedirs(out, exist_ok=True)
    qwen = Tokenizer.from_file(qwen_path)
    json.dump(refs(qwen, corpus), open(os.path.join(out, "qwen3_ids.json"), "w"), ensure_ascii=False)

    small = train_small(qwen, corpus)
    os.makedirs(os.path.join(out, "small"), exist_ok=True)
    small.save(os.path.join(out, "small", "tokenizer.json"))
    j = json.loads(small.to_str())
    merges = j["model"]["merges"]
    if merges and isinstance(merges[0], list):
        j["model"]["merges"] = [" ".join(m) for m in merges]
    os.makedirs(os.path.join(out, "small_legacy"), exist_ok=True)
    with open(os.path.join(out, "small_legacy", "tokenizer.json"), "w") as f:
        json.dump(j, f, ensure_ascii=False)
    legacy = Tokenizer.from_file(os.path.join(out, "small_legacy", "tokenizer.json"))
    r_small, r_legacy = refs(small, corpus), refs(legacy, corpus)
    assert [r["ids"] for r in r_small] == [r["ids"] for r in r_legacy], "legacy merges load differently"
    json.dump(r_small, open(os.path.join(out, "small", "ids.json"), "w"), ensure_ascii=False)
    print("vocab", small.get_vocab_size(), "strings", len(corpus),
          "qwen3 tokens", sum(len(r["ids"]) for r in refs(qwen, corpus)))


if __name__ == "__main__":
    main()
