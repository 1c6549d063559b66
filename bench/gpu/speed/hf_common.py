"""What the transformers sides of the GPU speed comparisons share: the seeded ids common.ts makes, one
timed generate after a warm-up, and the results file with each Chorus row beside its reference."""
import json
import time

import torch
import transformers


def seeded_rows(count, length, modulo):
    """`count` rows of `length` ids below `modulo`: common.ts's seededRows (seed 777)."""
    state, rows = 777, []
    for _ in range(count):
        row = []
        for _ in range(length):
            state = (state * 1103515245 + 12345) & 0xFFFFFFFF
            row.append((state >> 8) % modulo)
        rows.append(row)
    return rows


def timed(run, batch, new_tokens):
    """Runs `run` once to warm up, then times a second run: tokens/s and ms per step."""
    with torch.no_grad():
        run()
        torch.cuda.synchronize()
        started = time.time()
        run()
        torch.cuda.synchronize()
    seconds = time.time() - started
    return {"tokens_per_s": batch * new_tokens / seconds, "ms_per_step": seconds * 1000 / new_tokens}


def beside(row, ref):
    """A Chorus row with transformers' reference figures and the ratio of tokens/s."""
    return {**row, "hf_tokens_per_s": ref["tokens_per_s"], "hf_ms_per_step": ref["ms_per_step"], "ratio_tokens_per_s": row["tokens_per_s"] / ref["tokens_per_s"]}


def write_results(path, rows, **fields):
    """The results file: the GPU, the versions, `fields` and the rows."""
    info = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "transformers": transformers.__version__, **fields, "rows": rows}
    json.dump(info, open(path, "w"), indent=2)
