#!/usr/bin/env python3
"""Trains graft's demo models on the GPU machine: a small Qwen3.5-architecture base language
model and its "release", a LoRA fine-tune of the upper layers on the decision task, merged
into a bf16 checkpoint the way vendors publish.

Usage (from the repository root, with torch, transformers >= 5, peft and tokenizers):
  scripts/train-demo-model.py CORPUS.txt[.xz] OUTDIR [--pretrain-steps 700] [--finetune-steps 900]
      [--time-budget 470] [--lr 1e-3]
  scripts/train-demo-model.py --continue MODELS OUTDIR [--finetune-steps N] [--time-budget S] [--lr LR]
      continues the fine-tune: loads MODELS/base (tokenizer and weights, no pretraining) and the
      adapter MODELS/release-lora, trains it further, and writes release-lora/ and release/
      (the base is unchanged).

CORPUS is plain text to pretrain on (graft uses Debian's package documentation); the decision
task comes from scripts/make-decision-task.py (its records are pretraining text too).
OUTDIR receives base/, release/, release-lora/ (the PEFT adapter before merging), (config, bf16 safetensors, tokenizer.json, tokenizer_config.json
with the Qwen3.5 chat template) and report.json (accuracy of base and release on the splits).

Timings measured on the H200 are in bench/results/ (the first attempt fine-tuned one
sequence at a time at ~2 s per step and did not fit a 10-minute call; the fine-tune now runs
8 right-padded sequences in one forward pass). `--time-budget S` ends the fine-tune early
(cosine schedule cut short) so that a run always saves its checkpoints inside a device call.

The fine-tuning prompts are exactly graft's decision layout (src/engine/decision.h): the chat
template applied to [system: instructions, user: "Record:\\n" + record + "\\n\\n" + question block],
with the assistant generation prompt and thinking off; the token sequence is the encoded
prefix (up to the end of the record block) followed by the encoded rest, then the answer.
"""
import json
import lzma
import math
import os
import random
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from transformers.models.qwen3_5 import Qwen3_5ForCausalLM, Qwen3_5TextConfig

HERE = os.path.dirname(os.path.abspath(__file__))
SENTINEL = "\x01GRAFT-QUESTION\x01"
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
              r"\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MAX_TRAIN_TOKENS = 12288  # longest fine-tuning prompt
BATCH_TOKENS = 24576      # padded tokens per fine-tuning step (at most 8 rows)


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def read_corpus(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        return f.read()


def train_tokenizer(texts, vocab):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab - len(SPECIALS) - 2, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens(SPECIALS)
    tok.add_tokens(["<think>", "</think>"])
    return tok


def question_block(q):
    return ("Question: " + q["question"] + "\nChoices: " + " | ".join(q["choices"]) +
            "\nAnswer with exactly one of the choices.")


def layout(hf_tok, ex, q, cache=None):
    """graft's DecisionLayout for one independent question: (prefix ids, rest ids)."""
    messages = []
    if ex.get("instructions"):
        messages.append({"role": "system", "content": ex["instructions"]})
    messages.append({"role": "user", "content": "Record:\n" + ex["record"] + "\n\n" + SENTINEL + question_block(q)})
    text = hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    at = text.index(SENTINEL)
    key = text[:at]
    if cache is None or key not in cache:
        ids = hf_tok.backend_tokenizer.encode(key, add_special_tokens=False).ids
        if cache is None:
            return ids, hf_tok.backend_tokenizer.encode(text[at + len(SENTINEL):], add_special_tokens=False).ids
        cache.clear()
        cache[key] = ids
    rest = hf_tok.backend_tokenizer.encode(text[at + len(SENTINEL):], add_special_tokens=False).ids
    return cache[key], rest


def choice_ids(hf_tok, c):
    return hf_tok.backend_tokenizer.encode(c, add_special_tokens=False).ids


def examples(hf_tok, split, limit_tokens):
    out = []
    for ex in split:
        if len(ex["record"]) > limit_tokens * 6:  # far too long: skip before tokenizing
            continue
        cache = {}  # the record's prefix is the same for all its questions: encode it once
        for q in ex["questions"]:
            prefix, rest = layout(hf_tok, ex, q, cache)
            if len(prefix) + len(rest) + 8 > limit_tokens:
                continue
            out.append((prefix + rest, [choice_ids(hf_tok, c) for c in q["choices"]], q["choices"].index(ex["answers"][q["id"]])))
    return out


@torch.no_grad()
def accuracy(model, items, device, max_items=100):
    model.eval()
    right = 0
    items = items[:max_items]
    for prompt, choices, answer in items:
        scores = []
        head = F.log_softmax(model(input_ids=torch.tensor([prompt], device=device)).logits[0, -1].float(), -1)
        for c in choices:
            if len(c) == 1:
                scores.append(float(head[c[0]]))
                continue
            ids = torch.tensor([prompt + c], device=device)
            logp = F.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1:-1].float(), -1)
            scores.append(sum(float(logp[j, t]) for j, t in enumerate(c)))
        right += int(max(range(len(scores)), key=lambda i: scores[i]) == answer)
    model.train()
    return right / max(len(items), 1)


def save(model, hf_tok, d, template):
    os.makedirs(d, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(d)
    model.to(torch.float32)
    hf_tok.save_pretrained(d)
    cfg_path = os.path.join(d, "tokenizer_config.json")
    cfg = json.load(open(cfg_path))
    cfg.update({"chat_template": template, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None})
    json.dump(cfg, open(cfg_path, "w"), indent=2, ensure_ascii=False)
    for junk in ("generation_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if os.path.exists(os.path.join(d, junk)):
            os.remove(os.path.join(d, junk))


def main():
    resume = arg("--continue", "")
    if resume:
        corpus_path, out = None, sys.argv[sys.argv.index("--continue") + 2]
    else:
        corpus_path, out = sys.argv[1], sys.argv[2]
    pre_steps, ft_steps = arg("--pretrain-steps", 700), arg("--finetune-steps", 900)
    budget = arg("--time-budget", 470.0)
    lr_max = arg("--lr", 1e-3)
    torch.manual_seed(0)
    random.seed(1 if resume else 0)
    device = "cuda"
    t0 = time.time()
    task_dir = os.path.join(out, "task")
    subprocess.run([sys.executable, os.path.join(HERE, "make-decision-task.py"), task_dir, "--records", "1200", "--seed", "7"], check=True)
    split = {s: [json.loads(l) for l in open(os.path.join(task_dir, f"{s}.jsonl"))] for s in ("train", "validation", "test")}
    template = open(os.path.join(HERE, "..", "fixtures", "templates", "qwen3_5.jinja")).read()
    if resume:
        finetune(resume, out, split, template, ft_steps, budget, lr_max, t0, device)
        return
    docs = read_corpus(corpus_path)
    texts = [docs[i:i + 4000] for i in range(0, len(docs), 4000)] + [ex["record"] for ex in split["train"]]
    tok = train_tokenizer(texts, 8192)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf_tok.chat_template = template
    print(f"tokenizer: {tok.get_vocab_size()} tokens ({time.time() - t0:.0f} s)", flush=True)

    L, Fa = "linear_attention", "full_attention"
    cfg = Qwen3_5TextConfig(vocab_size=tok.get_vocab_size(), hidden_size=256, intermediate_size=640,
                            layer_types=[L, L, Fa, L, L, Fa], num_hidden_layers=6, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
                            linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4,
                            tie_word_embeddings=True, max_position_embeddings=32768, rms_norm_eps=1e-6,
                            rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                                             "mrope_section": [4, 2, 2], "mrope_interleaved": True},
                            eos_token_id=tok.token_to_id("<|im_end|>"), pad_token_id=tok.token_to_id("<|endoftext|>"))
    cfg._attn_implementation = "sdpa"
    model = Qwen3_5ForCausalLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f} M parameters", flush=True)

    # Pretraining: documentation and task records (no questions), packed into 1024-token rows.
    ids = []
    for t in texts:
        ids.extend(tok.encode(t).ids + [tok.token_to_id("<|endoftext|>")])
    data = torch.tensor(ids, dtype=torch.long)
    seq, batch = 1024, 32
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1, betas=(0.9, 0.95))
    model.train()
    for step in range(pre_steps):
        lr = 2e-3 * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / pre_steps))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(data) - seq - 1, (batch,))
        x = torch.stack([data[s:s + seq] for s in starts]).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 250 == 0 or step == pre_steps - 1:
            print(f"pretrain {step}: loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)
    train = sorted(examples(hf_tok, split["train"], MAX_TRAIN_TOKENS), key=lambda e: len(e[0]))
    print(f"finetune data: {len(train)} questions, prompts of {len(train[0][0])} to {len(train[-1][0])} tokens", flush=True)
    val = examples(hf_tok, split["validation"], 3072)
    base_val = accuracy(model, val, device)
    print(f"base: validation accuracy {base_val:.3f} on {min(len(val), 100)} questions", flush=True)
    save(model, hf_tok, os.path.join(out, "base"), template)
    pm = get_peft_model(model, LoraConfig(r=32, lora_alpha=64, layers_to_transform=[3, 4, 5],
                                          target_modules=["in_proj_qkv", "in_proj_z", "out_proj", "q_proj", "k_proj",
                                                          "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    done, rel_val = train_release(pm, hf_tok, train, val, out, template, ft_steps, budget, lr_max, t0, device)
    report = {"parameters": n_params, "vocab": tok.get_vocab_size(), "pretrain_steps": pre_steps, "finetune_steps": done,
              "base_validation_accuracy": base_val, "release_validation_accuracy": rel_val, "seconds": time.time() - t0,
              "torch": torch.__version__, "transformers": __import__("transformers").__version__}
    json.dump(report, open(os.path.join(out, "report.json"), "w"), indent=2)
    print(json.dumps(report), flush=True)


def finetune(models_dir, out, split, template, ft_steps, budget, lr_max, t0, device):
    """--continue: more fine-tuning of the committed adapter on the committed base."""
    from peft import PeftModel
    hf_tok = PreTrainedTokenizerFast.from_pretrained(os.path.join(models_dir, "base"))
    hf_tok.chat_template = template
    model = Qwen3_5ForCausalLM.from_pretrained(os.path.join(models_dir, "base"), dtype=torch.float32).to(device)
    model.config._attn_implementation = "sdpa"
    train = sorted(examples(hf_tok, split["train"], MAX_TRAIN_TOKENS), key=lambda e: len(e[0]))
    print(f"finetune data: {len(train)} questions, prompts of {len(train[0][0])} to {len(train[-1][0])} tokens", flush=True)
    val = examples(hf_tok, split["validation"], 3072)
    pm = PeftModel.from_pretrained(model, os.path.join(models_dir, "release-lora"), is_trainable=True)
    start_val = accuracy(pm, val, device)
    print(f"committed release: validation accuracy {start_val:.3f} ({time.time() - t0:.0f} s)", flush=True)
    done, rel_val = train_release(pm, hf_tok, train, val, out, template, ft_steps, budget, lr_max, t0, device)
    report = {"continued_from": models_dir, "finetune_steps_added": done, "lr": lr_max,
              "start_validation_accuracy": start_val, "release_validation_accuracy": rel_val,
              "seconds": time.time() - t0, "torch": torch.__version__,
              "transformers": __import__("transformers").__version__}
    json.dump(report, open(os.path.join(out, "report.json"), "w"), indent=2)
    print(json.dumps(report), flush=True)


def train_release(pm, hf_tok, train, val, out, template, ft_steps, budget, lr_max, t0, device):
    """The release: LoRA on the upper layers, trained on the answer tokens only, then merged."""

    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=lr_max, weight_decay=0.0)
    pm.train()
    pad = hf_tok.backend_tokenizer.token_to_id("<|endoftext|>")
    done = 0
    t_ft = time.time()
    for step in range(ft_steps):
        if time.time() - t0 > budget:
            print(f"finetune: time budget reached after {step} steps", flush=True)
            break
        # Cosine decay over the steps or over the time left, whichever ends first.
        progress = max(step / ft_steps, (time.time() - t_ft) / max(budget - (t_ft - t0), 1.0))
        lr = lr_max * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
        for g in opt.param_groups:
            g["lr"] = lr
        # Up to 8 single-question sequences of similar length (neighbours in length order),
        # right-padded into one batch of at most BATCH_TOKENS: padding sits after every real
        # token, so causal attention and the causal DeltaNet recurrence never see it.
        i = random.randrange(0, len(train) - 7)
        rows = train[i:i + 8]
        width = max(len(p) + len(c[a]) for p, c, a in rows)
        rows = random.sample(rows, max(1, min(8, BATCH_TOKENS // width)))
        x = torch.full((len(rows), width), pad, dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        for r, (prompt, choices, answer) in enumerate(rows):
            seq = prompt + choices[answer]
            x[r, :len(seq)] = torch.tensor(seq)
            labels[r, len(prompt):len(seq)] = torch.tensor(choices[answer])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = pm(input_ids=x.to(device), labels=labels.to(device)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(pm.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        done = step + 1
        if step % 50 == 0 or step == ft_steps - 1:
            print(f"finetune {step}: loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)
    pm.save_pretrained(os.path.join(out, "release-lora"))
    release = pm.merge_and_unload()
    save(release, hf_tok, os.path.join(out, "release"), template)
    rel_val = accuracy(release, val, device)
    print(f"release: validation accuracy {rel_val:.3f} on {min(len(val), 100)} questions", flush=True)
    return done, rel_val


if __name__ == "__main__":
    main()
