"""transformers' greedy ids for the newer families' golden fixtures (test/fixtures/arch) in fp16 and bf16 on
CUDA (eager attention, each prompt alone, 64 steps through the cache, plain argmax): the same-precision
reference that bench/gpu/arch/parity.ts counts Chorus's 16-bit builds against (its fp32 rows are counted
against the fixtures' float32 ids).
Usage: python3 bench/gpu/arch/hf16.py <out.json> [family ...]   (default: every fixture)
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")


def greedy(model, prompt, steps):
    ids = torch.tensor([prompt], device="cuda")
    out = model(input_ids=ids, use_cache=True)
    tokens = []
    for _ in range(steps):
        token = int(out.logits[0, -1].float().argmax())
        tokens.append(token)
        out = model(input_ids=torch.tensor([[token]], device="cuda"), past_key_values=out.past_key_values, use_cache=True)
    return tokens


def main():
    out_file, families = sys.argv[1], sys.argv[2:] or sorted(
        f for f in os.listdir(os.path.join(ROOT, "test", "fixtures", "arch")) if os.path.exists(os.path.join(ROOT, "test", "fixtures", "arch", f, "golden.json")))
    result = {}
    for family in families:
        fixture = os.path.join(ROOT, "test", "fixtures", "arch", family)
        golden = json.load(open(os.path.join(fixture, "golden.json")))
        result[family] = {}
        for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            model = AutoModelForCausalLM.from_pretrained(fixture, dtype=dtype, attn_implementation="eager").cuda().eval()
            with torch.no_grad():
                result[family][name] = [greedy(model, p, len(g)) for p, g in zip(golden["prompts"], golden["greedy"])]
            same = sum(a == b for row, ref in zip(result[family][name], golden["greedy"]) for a, b in zip(row, ref))
            print(f"{family} {name}: transformers' own ids equal its float32 ones at {same}/{sum(len(g) for g in golden['greedy'])}")
            del model
            torch.cuda.empty_cache()
    json.dump(result, open(out_file, "w"))


if __name__ == "__main__":
    main()
