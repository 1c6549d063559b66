"""transformers' side of the 512-token parity check: greedy decoding of a make.py checkpoint, eager
attention, fp16 and fp32 (TF32 off), on speed.ts's seeded prompts, with each step's 8 best ids and
their scores (after the processors: the end id is held off by min_new_tokens, as Chorus's min_length
does), for parity.ts to count Chorus's ids against and to show how close each divergence was.
Usage: python3 bench/gpu/llama/parity.py <checkpoint> <reference.json> [--dtypes fp16,fp32]
       [--prompts 4] [--prompt-len 64] [--new 512]
"""
import argparse
import json
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "speed"))
from hf_common import seeded_rows  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

TOP = 8


def reference(checkpoint, dtype, prompts, new):
    """Greedy ids of every prompt (one batch, no padding) and each step's TOP best ids and scores."""
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype, attn_implementation="eager").cuda().eval()
    ids = torch.tensor(prompts, device="cuda")
    started = time.time()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0,
                             output_scores=True, return_dict_in_generate=True)
    seconds = time.time() - started
    # scores: one [prompts, vocab] tensor a step, as greedy search compared them.
    top = [s.float().topk(TOP) for s in out.scores]
    rows = []
    for r in range(len(prompts)):
        rows.append({
            "ids": out.sequences[r, len(prompts[r]):].tolist(),
            "top_ids": [t.indices[r].tolist() for t in top],
            "top_scores": [t.values[r].tolist() for t in top],
        })
    del model, out
    torch.cuda.empty_cache()
    return {"seconds": seconds, "rows": rows}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("out")
    parser.add_argument("--dtypes", default="fp16,fp32")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new", type=int, default=512)
    args = parser.parse_args()
    config = json.load(open(os.path.join(args.checkpoint, "config.json")))
    prompts = seeded_rows(args.prompts, args.prompt_len, config["vocab_size"])
    result = {"checkpoint": args.checkpoint, "prompts": prompts, "new_tokens": args.new, "top": TOP, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "dtypes": {}}
    for name in args.dtypes.split(","):
        dtype = {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}[name]
        result["dtypes"][name] = reference(args.checkpoint, dtype, prompts, args.new)
        print(f"transformers {name}: {args.prompts} x {args.new} greedy tokens in {result['dtypes'][name]['seconds']:.1f} s", flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
