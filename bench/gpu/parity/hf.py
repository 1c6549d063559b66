"""The Hugging Face side of the parity check, and the comparison.

For each model chorus.ts ran: load the same checkpoint with transformers on the GPU (float32 with TF32
off, or float16), feed the same prompts and teacher-forced steps with the cache, greedy-decode the same
lengths, and compare with Chorus's logits and ids. Where transformers' top logits tie exactly, each of
the tied ids is its greedy choice: the greedy bound counts Chorus's ids against the decoding that takes
Chorus's id at such ties (greedy()), and the count against transformers' lowest-id decoding is reported
beside it. The TypeScript engine's ids, which it decodes as one left-padded batch, are also counted
against transformers run that way (causal_greedy_padded()). Prints a table, writes parity.json, and for
tiny models the golden fixtures the CPU test checks. Exits 1 when a bound is not met.
Usage: python3 bench/gpu/parity/hf.py <work-dir> <out-dir>
"""
import json
import os
import sys
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, T5EncoderModel

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

BOUNDS = {"fp32": {"logits": 1e-4, "greedy": 1.0}, "fp16": {"logits": 2e-2, "greedy": 0.95}}


def greedy(first, advance, steps, follow=None):
    """transformers' greedy ids for each row of the prefill's output `first`, each step's top-2 logit gap,
    and the steps where it took `follow`'s id over its own: one list per row.

    argmax over exactly tied logits is a set: transformers returns the lowest id of it, and every member is
    as much its greedy choice. Given `follow` (another decoder's ids for the same prompts), a row's step whose
    top logits tie exactly, in transformers' own precision, with follow's id among them takes follow's id.
    At the first step where follow's id is not among its maxima, that row stops following and decodes on its own.
    """
    rows = first.logits.shape[0]
    ids, gaps, taken = [[] for _ in range(rows)], [[] for _ in range(rows)], [[] for _ in range(rows)]
    out, following = first, [follow is not None] * rows
    for i in range(steps):
        logits = out.logits[:, -1].float()
        top = logits.topk(2)
        tokens = []
        for r in range(rows):
            token = int(top.indices[r, 0])
            if following[r] and i < len(follow[r]) and follow[r][i] != token:
                if bool(logits[r, follow[r][i]] == top.values[r, 0]):
                    token = follow[r][i]
                    taken[r].append(i)
                else:
                    following[r] = False
            ids[r].append(token)
            gaps[r].append(float(top.values[r, 0] - top.values[r, 1]))
            tokens.append(token)
        if i + 1 < steps:
            out = advance(out, tokens)
    return ids, gaps, taken


def one_row_each(runs):
    """greedy()'s answers for one-row batches (a prompt each) as one list of ids, gaps and tied steps taken."""
    return tuple([run[part][0] for run in runs] for part in range(3))


def causal_greedy(model, prompts, steps, device, follow=None):
    """greedy() for each prompt of a decoder-only model alone: ids, gaps and the tied steps taken, one list each."""
    def advance(out, tokens):
        return model(torch.tensor([tokens], device=device), past_key_values=out.past_key_values, use_cache=True)
    with torch.no_grad():
        runs = [greedy(model(torch.tensor([prompt], device=device), use_cache=True), advance, steps, [follow[n]] if follow else None)
                for n, prompt in enumerate(prompts)]
    return one_row_each(runs)


def causal_greedy_padded(model, prompts, steps, device, follow=None):
    """greedy() for all prompts of a decoder-only model in one left-padded batch, as Chorus's TypeScript
    engine runs them (padding masked out, positions counted from the mask, padding at position 1)."""
    length = max(len(p) for p in prompts)
    mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts], device=device)
    ids = torch.tensor([[0] * (length - len(p)) + p for p in prompts], device=device)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    state = {"mask": mask, "next": positions[:, -1:] + 1}

    def advance(out, tokens):
        state["mask"] = torch.cat([state["mask"], torch.ones_like(state["mask"][:, :1])], dim=1)
        position, state["next"] = state["next"], state["next"] + 1
        return model(torch.tensor(tokens, device=device)[:, None], attention_mask=state["mask"], position_ids=position,
                     past_key_values=out.past_key_values, use_cache=True)
    with torch.no_grad():
        return greedy(model(ids, attention_mask=mask, position_ids=positions, use_cache=True), advance, steps, follow)


def seq2seq_greedy(model, prompts, steps, device, follow=None):
    """greedy() for each source of an encoder-decoder, from its decoder start token."""
    start = model.config.decoder_start_token_id
    runs = []
    with torch.no_grad():
        for n, prompt in enumerate(prompts):
            encoded = model.get_encoder()(input_ids=torch.tensor([prompt], device=device))

            def advance(out, tokens, encoded=encoded):
                return model(encoder_outputs=encoded, decoder_input_ids=torch.tensor([tokens], device=device), past_key_values=out.past_key_values, use_cache=True)
            first = model(encoder_outputs=encoded, decoder_input_ids=torch.tensor([[start]], device=device), use_cache=True)
            runs.append(greedy(first, advance, steps, [follow[n]] if follow else None))
    return one_row_each(runs)


def run(model, prompts, forced, greedy_steps, device):
    """Logit rows (prefill's last, then teacher-forced steps), greedy ids, and each greedy step's top-2 gap."""
    rows = []
    with torch.no_grad():
        for prompt, steps in zip(prompts, forced):
            out = model(torch.tensor([prompt], device=device), use_cache=True)
            rows.append(out.logits[0, -1].float().cpu().numpy())
            past = out.past_key_values
            for token in steps:
                out = model(torch.tensor([[token]], device=device), past_key_values=past, use_cache=True)
                rows.append(out.logits[0, -1].float().cpu().numpy())
                past = out.past_key_values
    ids, gaps, _ = causal_greedy(model, prompts, greedy_steps, device)
    return np.stack(rows), ids, gaps


def run_seq2seq(model, spec, device):
    """Encoder-decoder rows: per prompt the start step's logits, then teacher-forced steps; greedy ids.
    With task encode, the encoder's hidden states (one row per prompt)."""
    rows = []
    start = model.config.decoder_start_token_id
    with torch.no_grad():
        for prompt, steps in zip(spec["prompts"], spec["forced"]):
            ids = torch.tensor([prompt], device=device)
            if spec.get("task") == "encode":
                rows.append(model(input_ids=ids).last_hidden_state[0].float().cpu().numpy().reshape(-1))
                continue
            encoder_outputs = model.get_encoder()(input_ids=ids)
            out = model(encoder_outputs=encoder_outputs, decoder_input_ids=torch.tensor([[start]], device=device), use_cache=True)
            rows.append(out.logits[0, -1].float().cpu().numpy())
            past = out.past_key_values
            for token in steps:
                out = model(encoder_outputs=encoder_outputs, decoder_input_ids=torch.tensor([[token]], device=device), past_key_values=past, use_cache=True)
                rows.append(out.logits[0, -1].float().cpu().numpy())
                past = out.past_key_values
    if spec.get("task") == "encode":
        return np.concatenate(rows), [], []
    greedy_ids, gaps, _ = seq2seq_greedy(model, spec["prompts"], spec["greedySteps"], device)
    # Logits: one row per step.
    return np.stack(rows), greedy_ids, gaps


def check_relative_buckets(work):
    """Chorus's bucket table against transformers' own function; returns the count of differing entries."""
    from transformers.models.t5.modeling_t5 import T5Attention
    tables = json.load(open(os.path.join(work, "relative-buckets.json")))
    relative = torch.arange(-tables["maxDistance"], tables["maxDistance"] + 1)
    wrong = 0
    for key, bidirectional in (("bidirectional", True), ("causal", False)):
        for dev in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
            theirs = T5Attention._relative_position_bucket(relative.to(dev), bidirectional=bidirectional, num_buckets=32, max_distance=128).cpu().tolist()
            wrong += sum(a != b for a, b in zip(theirs, tables[key]))
    return wrong


def first_divergences(ours, theirs, gaps):
    """For each sequence that diverges: the step, and transformers' top-2 logit gap there."""
    found = []
    for a, b, g in zip(ours, theirs, gaps):
        step = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if step is not None:
            found.append({"step": step, "hf_top2_gap": round(g[step], 6)})
    return found


def main():
    work, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results, failed = [], False
    for name in json.load(open(os.path.join(work, "models.json"))):
        spec = json.load(open(os.path.join(work, f"{name}.json")))
        dtype = torch.float16 if spec["dtype"] == "fp16" else torch.float32
        started = time.time()
        if spec["kind"] == "seq2seq":
            cls = T5EncoderModel if spec.get("task") == "encode" else AutoModelForSeq2SeqLM
            model = cls.from_pretrained(spec["checkpoint"], dtype=dtype, attn_implementation="eager").to(device).eval()
            hf_rows, hf_greedy, hf_gaps = run_seq2seq(model, spec, device)
        else:
            model = AutoModelForCausalLM.from_pretrained(spec["checkpoint"], dtype=dtype, attn_implementation="eager").to(device).eval()
            hf_rows, hf_greedy, hf_gaps = run(model, spec["prompts"], spec["forced"], spec["greedySteps"], device)
        chorus_rows = np.fromfile(os.path.join(work, f"{name}.logits"), dtype=np.float32).reshape(hf_rows.shape)
        diff = float(np.abs(chorus_rows - hf_rows).max())
        # Greedy decisions without the cascade: on the same context, is the top-1 token the same?
        argmax_same = int((chorus_rows.argmax(axis=1) == hf_rows.argmax(axis=1)).sum()) if chorus_rows.ndim == 2 else 0
        extra = {}
        pairs = lambda xs, ys: sum(a == b for x, y in zip(xs, ys) for a, b in zip(x, y))
        greedy_of = seq2seq_greedy if spec["kind"] == "seq2seq" else causal_greedy

        followed = {}  # (decoding, ids as JSON) -> ties_followed's answer: the runtime and the engines often give the same ids

        def ties_followed(ids, reference=None, decode=greedy_of):
            """Tokens of `ids` identical to a greedy decoding of transformers (`decode`, whose own ids are
            `reference`: by default its prompts run alone) that takes ids' member of each exact tie of its top
            logits (greedy()), how many ties it took so, and where ids then part from it."""
            reference = hf_greedy if reference is None else reference
            if pairs(ids, reference) == sum(len(x) for x in ids):
                return pairs(ids, reference), 0, []
            key = (decode.__name__, json.dumps(ids))
            if key not in followed:
                theirs, their_gaps, taken = decode(model, spec["prompts"], spec["greedySteps"], device, ids)
                followed[key] = (pairs(ids, theirs), sum(len(t) for t in taken), first_divergences(ids, theirs, their_gaps))
            return followed[key]
        if spec["dtype"] == "fp16":
            # How far transformers' own fp16 greedy strays from its fp32 greedy: the noise floor.
            if spec["kind"] == "seq2seq":
                reference = AutoModelForSeq2SeqLM.from_pretrained(spec["checkpoint"], dtype=torch.float32, attn_implementation="eager").to(device).eval()
                _, hf32_greedy, _ = run_seq2seq(reference, {**spec, "forced": [[] for _ in spec["prompts"]]}, device)
            else:
                reference = AutoModelForCausalLM.from_pretrained(spec["checkpoint"], dtype=torch.float32, attn_implementation="eager").to(device).eval()
                _, hf32_greedy, _ = run(reference, spec["prompts"], [[] for _ in spec["prompts"]], spec["greedySteps"], device)
            del reference
            extra = {"hf_fp16_vs_hf_fp32_greedy_identical": pairs(hf32_greedy, hf_greedy), "chorus_vs_hf_fp32_greedy_identical": pairs(hf32_greedy, spec["greedy"])}
        if "greedyNative" in spec:
            # The engines on CUDA: the native engine against transformers and against the TypeScript engine.
            native_ties, engine_ties = ties_followed(spec["greedyNative"]), ties_followed(spec["greedyEngine"])
            extra.update({"native_greedy_vs_hf_identical": pairs(spec["greedyNative"], hf_greedy),
                          "native_greedy_vs_hf_ties_followed": native_ties[0], "native_hf_ties_taken": native_ties[1],
                          "native_divergences_ties_followed": native_ties[2],
                          "ts_engine_greedy_vs_hf_ties_followed": engine_ties[0], "ts_engine_hf_ties_taken": engine_ties[1],
                          "ts_engine_divergences_ties_followed": engine_ties[2],
                          "native_vs_ts_engine_greedy_identical": pairs(spec["greedyNative"], spec["greedyEngine"]),
                          "ts_engine_greedy_vs_hf_identical": pairs(spec["greedyEngine"], hf_greedy),
                          "native_vs_ts_engine_beam4_identical": pairs(spec["beamNative"], spec["beamEngine"]),
                          "beam4_total": sum(len(x) for x in spec["beamEngine"]),
                          "native_64_mixed_streams_as_alone": sum(a == b for a, b in zip(spec["streamsAlone"], spec["streamsTogether"])),
                          "native_batch_invariant_64_mixed_streams_as_alone": sum(a == b for a, b in zip(spec["streamsAloneInvariant"], spec["streamsTogetherInvariant"]))})
            if spec["kind"] == "decoder":
                # The TypeScript engine decodes the prompts as one left-padded batch: against transformers run
                # the same way, and how far transformers' own padded batch strays from its prompts run alone.
                padded = causal_greedy_padded(model, spec["prompts"], spec["greedySteps"], device)[0]
                padded_ties = ties_followed(spec["greedyEngine"], padded, causal_greedy_padded)
                extra.update({"hf_padded_batch_vs_hf_greedy_identical": pairs(padded, hf_greedy),
                              "ts_engine_greedy_vs_hf_padded_batch_identical": pairs(spec["greedyEngine"], padded),
                              "ts_engine_greedy_vs_hf_padded_batch_ties_followed": padded_ties[0],
                              "ts_engine_hf_padded_batch_ties_taken": padded_ties[1],
                              "ts_engine_divergences_vs_hf_padded_batch": padded_ties[2]})
        same = pairs(spec["greedy"], hf_greedy)
        total = max(1, sum(len(x) for x in hf_greedy))
        same_ties, ties_taken, divergences_ties = ties_followed(spec["greedy"]) if hf_greedy else (total, 0, [])
        if not hf_greedy:
            same = total
        bound = BOUNDS[spec["dtype"]]
        # The greedy bound counts against transformers' greedy decodings, of which there is more than one
        # where its top logits tie exactly; the count against its lowest-id decoding is kept beside it.
        ok = diff <= bound["logits"] and same_ties / total >= bound["greedy"]
        failed |= not ok
        results.append({"model": name, "dtype": spec["dtype"], "chorus_device": spec["device"], "hf_device": device, "logit_rows": int(hf_rows.shape[0]) if hf_rows.ndim == 2 else 0,
                        "vocab": int(hf_rows.shape[1]) if hf_rows.ndim == 2 else 0, "compared": "encoder hidden states" if spec.get("task") == "encode" else "logits", "max_abs_diff": diff, "greedy_identical": same, "greedy_total": total,
                        "greedy_identical_ties_followed": same_ties, "hf_ties_taken": ties_taken, "first_divergences_ties_followed": divergences_ties,
                        "bound_logits": bound["logits"], "bound_greedy": bound["greedy"], "ok": ok, "seconds": round(time.time() - started, 1),
                        "teacher_forced_argmax_identical": argmax_same, "first_divergences": first_divergences(spec["greedy"], hf_greedy, hf_gaps), **extra})
        if spec["golden"]:
            golden = {"generated_by": "bench/gpu/parity (transformers, float32, TF32 off)", "kind": spec["kind"], "arch": spec["arch"], "size": spec["size"], "seed": spec["seed"],
                      "prompts": spec["prompts"], "forced": spec["forced"], "greedy": hf_greedy,
                      "logits": [[float(f"{v:.7g}") for v in row] for row in hf_rows]}
            with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
                json.dump(golden, f, separators=(",", ":"))
        del model
        torch.cuda.empty_cache()
    wrong_buckets = check_relative_buckets(work)
    failed |= wrong_buckets != 0
    print(f"T5 relative position buckets differing from transformers' (cpu and cuda, both directions): {wrong_buckets}")
    info = {"relative_buckets_differing": wrong_buckets, "torch": torch.__version__, "transformers": __import__("transformers").__version__,
            "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None, "results": results}
    with open(os.path.join(out_dir, "parity.json"), "w") as f:
        json.dump(info, f, indent=2)
    print(f"{'model':21} {'dtype':5} {'chorus on':9} {'max |diff|':>11} {'bound':>7} {'greedy same':>12} {'argmax same':>12} {'ok':>3}")
    for r in results:
        print(f"{r['model']:21} {r['dtype']:5} {r['chorus_device']:9} {r['max_abs_diff']:11.3e} {r['bound_logits']:7.0e} "
              f"{r['greedy_identical']:5}/{r['greedy_total']:<6} {r['teacher_forced_argmax_identical']:5}/{r['logit_rows']:<6} {'yes' if r['ok'] else 'NO':>3}")
        if r["first_divergences"]:
            print(f"    diverging sequences (step, transformers' top-2 gap there): {[(d['step'], d['hf_top2_gap']) for d in r['first_divergences']]}")
            print(f"    against transformers' greedy taking Chorus's id at its exact ties: {r['greedy_identical_ties_followed']}/{r['greedy_total']} ({r['hf_ties_taken']} ties taken); "
                  f"diverging there: {[(d['step'], d['hf_top2_gap']) for d in r['first_divergences_ties_followed']]}")
        if "hf_fp16_vs_hf_fp32_greedy_identical" in r:
            print(f"    transformers fp16 vs its own fp32 greedy: {r['hf_fp16_vs_hf_fp32_greedy_identical']}/{r['greedy_total']}; "
                  f"Chorus fp16 vs transformers fp32: {r['chorus_vs_hf_fp32_greedy_identical']}/{r['greedy_total']}")
        if "native_greedy_vs_hf_identical" in r:
            print(f"    engines on CUDA, greedy: native vs transformers {r['native_greedy_vs_hf_identical']}/{r['greedy_total']} "
                  f"({r['native_greedy_vs_hf_ties_followed']} with its exact ties taken Chorus's way), native vs TypeScript engine "
                  f"{r['native_vs_ts_engine_greedy_identical']}/{r['greedy_total']}, TypeScript engine vs transformers {r['ts_engine_greedy_vs_hf_identical']}/{r['greedy_total']} "
                  f"({r['ts_engine_greedy_vs_hf_ties_followed']} with its ties taken); diverging with ties taken (step, gap): native "
                  f"{[(d['step'], d['hf_top2_gap']) for d in r['native_divergences_ties_followed']]}, TypeScript engine "
                  f"{[(d['step'], d['hf_top2_gap']) for d in r['ts_engine_divergences_ties_followed']]}; "
                  f"beam 4: native vs TypeScript engine {r['native_vs_ts_engine_beam4_identical']}/{r['beam4_total']}; "
                  f"64 mixed streams (greedy and seeded sampling, 32 slots) as each alone: {r['native_64_mixed_streams_as_alone']}/64, "
                  f"batch-invariant {r['native_batch_invariant_64_mixed_streams_as_alone']}/64")
        if "hf_padded_batch_vs_hf_greedy_identical" in r:
            print(f"    all prompts in one left-padded batch: transformers padded vs alone {r['hf_padded_batch_vs_hf_greedy_identical']}/{r['greedy_total']}, "
                  f"TypeScript engine vs transformers padded {r['ts_engine_greedy_vs_hf_padded_batch_identical']}/{r['greedy_total']} "
                  f"({r['ts_engine_greedy_vs_hf_padded_batch_ties_followed']} with its ties taken, {r['ts_engine_hf_padded_batch_ties_taken']} taken); "
                  f"diverging there (step, gap): {[(d['step'], d['hf_top2_gap']) for d in r['ts_engine_divergences_vs_hf_padded_batch']]}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
