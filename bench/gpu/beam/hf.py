"""transformers' beam search on the cases bench/gpu/beam/cases.ts wrote: the golden fixtures for
Chorus's beam search. Runs on the CPU in float32 (the tiny models need nothing more).
Usage: python3 bench/gpu/beam/hf.py <work-dir> <out-dir>   -> <out-dir>/<name>-beam.json
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM


def main():
    work, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    for spec in json.load(open(os.path.join(work, "specs.json"))):
        cls = AutoModelForSeq2SeqLM if spec["kind"] == "seq2seq" else AutoModelForCausalLM
        model = cls.from_pretrained(os.path.join(work, spec["checkpoint"]), dtype=torch.float32, attn_implementation="eager").eval()
        results = []
        for case in spec["cases"]:
            ids = torch.tensor([case["prompt"]])
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     num_beams=case["num_beams"], num_return_sequences=case["num_return_sequences"],
                                     length_penalty=case["length_penalty"], early_stopping=case["early_stopping"],
                                     repetition_penalty=case["repetition_penalty"], eos_token_id=case["eos_token_id"],
                                     pad_token_id=case["eos_token_id"], max_new_tokens=case["max_new_tokens"],
                                     output_scores=True, return_dict_in_generate=True)
            skip = 1 if spec["kind"] == "seq2seq" else len(case["prompt"])
            sequences = []
            for row in out.sequences[:, skip:].tolist():
                # Up to and including the end id; what follows it is padding.
                if case["eos_token_id"] in row:
                    row = row[: row.index(case["eos_token_id"]) + 1]
                sequences.append(row)
            results.append({**case, "sequences": sequences, "scores": [float(f"{s:.7g}") for s in out.sequences_scores.tolist()]})
            print(spec["name"], case["num_beams"], case["length_penalty"], case["early_stopping"], [len(s) for s in sequences])
        golden = {"generated_by": f"bench/gpu/beam (transformers {transformers.__version__}, torch {torch.__version__}, CPU float32)",
                  "kind": spec["kind"], "arch": spec["arch"], "seed": spec["seed"], "cases": results}
        with open(os.path.join(out_dir, f"{spec['name']}-beam.json"), "w") as f:
            json.dump(golden, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
