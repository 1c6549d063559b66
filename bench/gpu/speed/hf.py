"""Hugging Face's side of the GPU speed comparison, and the table: the same GPT-2 124M checkpoint
(seeded weights, written by chorus.ts), fp16, eager attention, greedy generate with 128 new tokens
(min_new_tokens = max_new_tokens: no early stop) on prompts of 128 tokens, batch 1, 8, 32, 64 (or sampled
with chorus.ts's settings when it ran with SPEED_DECODE=sample, or 4 beams with SPEED_DECODE=beam4); then
the table of Chorus's rows (each path and flavor) beside transformers' row of the same batch.
Usage: python3 bench/gpu/speed/hf.py <work-dir> <out-dir>
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM

from hf_common import beside, seeded_rows, timed, write_results

PROMPT, NEW = 128, 128


def main():
    work, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    chorus = json.load(open(os.path.join(work, "chorus.json")))
    model = AutoModelForCausalLM.from_pretrained(chorus["checkpoint"], dtype=torch.float16, attn_implementation="eager").cuda().eval()
    hf = {}
    for batch in sorted({row["batch"] for row in chorus["rows"]}):
        ids = torch.tensor(seeded_rows(batch, PROMPT, 50000), device="cuda")
        if chorus.get("decode") == "sample":
            s = chorus["sampling"]
            options = dict(do_sample=True, temperature=s["temperature"], top_k=s["runtime_top_k"], top_p=s["runtime_top_p"], repetition_penalty=s["repetition_penalty"])
        elif chorus.get("decode") == "beam4":
            options = dict(do_sample=False, num_beams=4, early_stopping=False)
        else:
            options = dict(do_sample=False)
        hf[batch] = timed(lambda: model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0, **options), batch, NEW)
        print(f"hf batch {batch}: {hf[batch]}")
    rows = []
    for row in chorus["rows"]:
        if "error" in row:
            print(f"{row['flavor']} {row['path']} {row['setting']}: {row['error']}")
            continue
        rows.append(beside(row, hf[row["batch"]]))
    write_results(os.path.join(out_dir, "speed.json"), rows, prompt=PROMPT, new_tokens=NEW, decode=chorus.get("decode", "greedy"), sampling=chorus.get("sampling"))
    # in run: the share of the time inside ONNX Runtime's runs; addon: the native engine's share inside
    # the addon in all (runs, device argmax, copies); same ids: rows equal to the step loop's.
    print(f"{'flavor':9} {'path':12} {'setting':22} {'tokens':>7} {'chorus tok/s':>12} {'hf tok/s':>10} {'ratio':>6} {'ms/step':>8} {'hf ms/step':>10} {'ttft ms':>8} {'in run':>7} {'addon':>6} {'same ids':>8}")
    for r in rows:
        addon = f"{r['native_call_share']:6.0%}" if "native_call_share" in r else f"{'':6}"
        same = f"{r['rows_identical_to_loop']}/{r['batch']}" if "rows_identical_to_loop" in r else ""
        print(f"{r['flavor']:9} {r['path']:12} {r['setting']:22} {r['tokens']:7d} {r['tokens_per_s']:12.0f} {r['hf_tokens_per_s']:10.0f} {r['ratio_tokens_per_s']:6.2f} {r['ms_per_step']:8.2f} {r['hf_ms_per_step']:10.2f} {(r['ttft_ms_median'] if r['ttft_ms_median'] is not None else float('nan')):8.1f} {r['session_run_share']:7.0%} {addon} {same:>8}")


if __name__ == "__main__":
    main()
