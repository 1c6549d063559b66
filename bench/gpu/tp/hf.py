"""Transformers' own multi-GPU run beside Chorus's tensor parallelism: the same checkpoint loaded with
device_map="auto" (its layers spread over every visible GPU, run one GPU after the other), greedy
generate of TP_NEW new tokens (min_new_tokens too) on speed.ts's seeded prompts, at batch 1 and 64.
Usage: python3 bench/gpu/tp/hf.py <checkpoint> <out.json>
Knobs: TP_BATCHES=1,64  TP_PROMPT=128  TP_NEW=128  TP_HF_ATTENTION=sdpa (eager, ...)
"""
import json
import os
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "speed"))
from hf_common import seeded_rows, timed  # noqa: E402


def main():
    checkpoint, out = sys.argv[1], sys.argv[2]
    batches = [int(b) for b in os.environ.get("TP_BATCHES", "1,64").split(",")]
    prompt, new = int(os.environ.get("TP_PROMPT", 128)), int(os.environ.get("TP_NEW", 128))
    attention = os.environ.get("TP_HF_ATTENTION", "sdpa")
    started = time.time()
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float16, device_map="auto", attn_implementation=attention).eval()
    load_seconds = time.time() - started
    devices = sorted({str(d) for d in model.hf_device_map.values()})
    vocab = model.config.vocab_size
    first = next(model.parameters()).device
    rows = []
    for batch in batches:
        ids = torch.tensor(seeded_rows(batch, prompt, vocab), device=first)
        run = lambda: model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)  # noqa: E731
        row = {"setting": f"batch {batch}", "batch": batch, **timed(run, batch, new)}
        rows.append(row)
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    memory = [torch.cuda.max_memory_allocated(i) / 2**20 for i in range(torch.cuda.device_count())]
    result = {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(), "torch": torch.__version__, "transformers": transformers.__version__, "attention": attention, "devices": devices, "load_seconds": load_seconds, "max_memory_allocated_mib": memory, "rows": rows}
    json.dump(result, open(out, "w"), indent=2)
    print(f"transformers device_map=auto over {devices}: loaded in {load_seconds:.0f} s", flush=True)


if __name__ == "__main__":
    main()
