"""Transformers' own multi-GPU run beside Chorus's tensor parallelism: the checkpoint speed.ts ran,
loaded with device_map="auto" over GPUs 0 and 1 (max_memory lets each hold about half the layers, so
that both take part: accelerate's pipeline of layers, one GPU busy at a time), greedy generate of the
same prompts and new tokens at each batch speed.ts ran; then the table of TP=1, TP=2 and transformers.
Usage: python3 bench/gpu/tensor-parallel/hf.py <work-dir>/<name>-<dtype>-tp.json <out-dir>
"""
import json
import math
import os
import sys

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "speed"))
from hf_common import seeded_rows, timed, write_results  # noqa: E402


def main():
    chorus_file, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    chorus = json.load(open(chorus_file))
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}.get(chorus["dtype"], torch.float16)
    config = json.load(open(os.path.join(chorus["checkpoint"], "config.json")))
    size = 2 if dtype != torch.float32 else 4
    params = config["num_hidden_layers"] * (4 * config["hidden_size"] ** 2 + 3 * config["hidden_size"] * config["intermediate_size"]) + 2 * config["vocab_size"] * config["hidden_size"]
    half_gib = math.ceil(params * size / 2 / 2**30) + 2
    model = AutoModelForCausalLM.from_pretrained(chorus["checkpoint"], dtype=dtype, device_map="auto", max_memory={0: f"{half_gib}GiB", 1: f"{half_gib + 8}GiB"}).eval()
    placed = sorted({str(d) for d in model.hf_device_map.values()})
    rows = []
    new = chorus["new_tokens"]
    for batch in sorted({r["batch"] for r in chorus["speed"]}):
        ids = torch.tensor(seeded_rows(batch, chorus["prompt"], 32000), device="cuda:0")
        ref = timed(lambda: model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0), batch, new)
        one = next(r for r in chorus["speed"] if r["tp"] == 1 and r["batch"] == batch)
        two = next(r for r in chorus["speed"] if r["tp"] == 2 and r["batch"] == batch)
        rows.append({"batch": batch, "tp1_tokens_per_s": one["tokens_per_s"], "tp2_tokens_per_s": two["tokens_per_s"], "tp2_over_tp1": two["tokens_per_s"] / one["tokens_per_s"],
                     "hf_auto_tokens_per_s": ref["tokens_per_s"], "tp2_over_hf_auto": two["tokens_per_s"] / ref["tokens_per_s"], "tp1_ms_per_step": one["ms_per_step"],
                     "tp2_ms_per_step": two["ms_per_step"], "hf_auto_ms_per_step": ref["ms_per_step"]})
        torch.cuda.empty_cache()
    name = f"{chorus['name']}-{chorus['dtype']}-tp"
    write_results(os.path.join(out_dir, f"{name}.json"), rows, model=chorus["name"], dtype=chorus["dtype"], prompt=chorus["prompt"], new_tokens=new, hf_devices=placed,
                  parity=chorus.get("parity"), memory=chorus.get("memory"), load=chorus.get("load"), build=chorus.get("build"))
    print(f"{name}: transformers device_map=auto over {', '.join(placed)}")
    if chorus.get("parity"):
        p = chorus["parity"]
        print(f"greedy parity TP=2 vs TP=1: {p['same']}/{p['tokens']} ({100 * p['share']:.1f}%)")
    print(f"{'batch':>5} {'TP=1 tok/s':>11} {'TP=2 tok/s':>11} {'TP=2/TP=1':>10} {'hf auto tok/s':>14} {'TP=2/hf':>8}")
    for r in rows:
        print(f"{r['batch']:5d} {r['tp1_tokens_per_s']:11.0f} {r['tp2_tokens_per_s']:11.0f} {r['tp2_over_tp1']:10.2f} {r['hf_auto_tokens_per_s']:14.0f} {r['tp2_over_hf_auto']:8.2f}")


if __name__ == "__main__":
    main()
