"""Hugging Face's side of the encoder-decoder speed comparison, and its table: the checkpoints
seq2seq.ts wrote (t5-small, t5-base, bart-large shapes), fp16, eager attention, generate with 64 new
tokens (min_new_tokens = max_new_tokens) from sources of the length seq2seq.ts used (256 unless
SEQ2SEQ_SOURCE said otherwise), for each model, search and batch that seq2seq.ts ran, greedy and beam 4
(length_penalty 1, early_stopping false, as Chorus's defaults). tokens/s counts the returned sequences.
Usage: python3 bench/gpu/speed/seq2seq_hf.py <work-dir> <out-dir>
"""
import json
import os
import sys

import torch
from transformers import AutoModelForSeq2SeqLM

from hf_common import beside, seeded_rows, timed, write_results

NEW = 64


def sources(count, length, eos):
    return [row + [eos] for row in seeded_rows(count, length - 1, 30000)]


def main():
    work, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    chorus = json.load(open(os.path.join(work, "seq2seq-chorus.json")))
    source = chorus.get("source", 256)
    hf = {}
    for name, checkpoint in chorus["checkpoints"].items():
        ran = {(row["search"], row["batch"]) for row in chorus["rows"] if row["model"] == name}
        if not ran:
            continue
        model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint, dtype=torch.float16, attn_implementation="eager").cuda().eval()
        eos = model.config.eos_token_id
        for search, beams in (("greedy", 1), ("beam 4", 4)):
            for batch in sorted(b for s, b in ran if s == search):
                ids = torch.tensor(sources(batch, source, eos), device="cuda")
                run = lambda: model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, num_beams=beams, length_penalty=1.0, early_stopping=False)
                hf[(name, search, batch)] = timed(run, batch, NEW)
                print(f"hf {name} {search} batch {batch}: {hf[(name, search, batch)]}")
        del model
        torch.cuda.empty_cache()
    rows = []
    for row in chorus["rows"]:
        rows.append(beside(row, hf[(row["model"], row["search"], row["batch"])]))
    write_results(os.path.join(out_dir, "seq2seq-speed.json"), rows, source=source, new_tokens=NEW)
    print(f"{'model':11} {'engine':12} {'search':7} {'batch':>5} {'chorus tok/s':>12} {'hf tok/s':>10} {'ratio':>6} {'ms/step':>8} {'hf ms/step':>10} {'ttft ms':>8} {'in run':>7}")
    for r in rows:
        print(f"{r['model']:11} {r.get('engine', 'ts'):12} {r['search']:7} {r['batch']:5d} {r['tokens_per_s']:12.0f} {r['hf_tokens_per_s']:10.0f} {r['ratio_tokens_per_s']:6.2f} {r['ms_per_step']:8.2f} {r['hf_ms_per_step']:10.2f} {(r['ttft_ms_median'] or float('nan')):8.1f} {r['session_run_share']:7.0%}")


if __name__ == "__main__":
    main()
