#!/usr/bin/python3
"""Writes PyTorch reference outputs of the dynamic-shape models at many shapes.

The modules are the ones scripts/gen_models.py exports (imported from it, same
seeds, so they hold the same weights as its .onnx files); inputs come from
seeded generators and are written too, so a C++ test needs only NumPy files.

Usage (/usr/bin/python3: it has numpy and torch):
  torch_reference.py --out DIR                       both models, default cases
  torch_reference.py --out DIR encoder_dyn --shapes 1x8,2x16,4x33
  torch_reference.py --out DIR decoder_kv --prompt-len 4 --tokens 64

encoder_dyn, for each BATCHxSEQ of --shapes (default: 10 mixed shapes, seq 1
to 300, batch 1 to 8):
  encoder_dyn.BxS.input_ids.npy          int64 [B, S]; seeded by (seed, B, S),
                                         so a shape's ids do not depend on the
                                         other shapes asked for
  encoder_dyn.BxS.last_hidden_state.npy  float32 [B, S, 64]
decoder_kv, greedy generation with the key/value cache (the prompt in one call
with an empty cache, then one token per call, feeding present_* back as
past_*):
  decoder_kv.prompt_ids.npy     int64 [1, P]        seeded prompt
  decoder_kv.generated_ids.npy  int64 [N]           the N greedy tokens
  decoder_kv.first_logits.npy   float32 [1, P, V]   logits of the prompt call
  decoder_kv.step_logits.npy    float32 [N, V]      logits that chose each token
                                                    (to see where a run diverges)
Each model also gets NAME.manifest.json (written last): the cases and their
file names, the model's dims, and for the decoder the smallest gap between the
best and second-best logit over the steps (how far greedy is from a tie). A
model's files are rewritten only when its manifest's stamp (this script,
gen_models.py and the arguments) changes or a file is missing.

Before writing, the decoder's cached generation is checked against the same
generation without a cache (the whole sequence every step): the same tokens
and logits within 1e-4 relative, or this script fails. That checks the
module's causal mask and position ids, which a shared bug in PyTorch
reference and runtime would otherwise hide.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_models  # noqa: E402  (the one definition of the modules)

MODELS = ["encoder_dyn", "decoder_kv"]
DEFAULT_SHAPES = "1x8,1x1,2x16,3x5,1x128,4x33,2x64,8x12,1x300,6x7"
DEFAULT_SEED = 2024


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        try:
            b, s = (int(x) for x in item.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"shape '{item}' is not BATCHxSEQ") from None
        if b < 1 or s < 1 or s > gen_models.ENCODER_DYN["max_pos"]:
            raise argparse.ArgumentTypeError(
                f"shape '{item}': batch >= 1 and 1 <= seq <= {gen_models.ENCODER_DYN['max_pos']}")
        shapes.append((b, s))
    return shapes


def stamp_of(model, params):
    h = hashlib.sha256()
    for script in (os.path.abspath(__file__), gen_models.__file__):
        with open(script, "rb") as f:
            h.update(f.read())
    h.update(json.dumps([model, params], sort_keys=True).encode())
    return h.hexdigest()


def up_to_date(out_dir, model, stamp):
    try:
        with open(os.path.join(out_dir, model + ".manifest.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return False
    return manifest.get("stamp") == stamp and all(
        os.path.exists(os.path.join(out_dir, p)) for p in manifest.get("all_files", []))


def write_manifest(out_dir, model, manifest):
    path = os.path.join(out_dir, model + ".manifest.json")
    with open(path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def encoder_references(out_dir, shapes, seed, stamp):
    model = gen_models.build_encoder_dyn()
    cases, files = [], []
    for b, s in shapes:
        rng = np.random.default_rng([seed, b, s])
        ids = rng.integers(0, gen_models.ENCODER_DYN["vocab"], size=(b, s), dtype=np.int64)
        with torch.no_grad():
            y = model(torch.from_numpy(ids)).numpy()
        if not np.all(np.isfinite(y)):
            raise RuntimeError(f"encoder_dyn {b}x{s}: non-finite output")
        case = {"batch": b, "seq": s, "input_ids": f"encoder_dyn.{b}x{s}.input_ids.npy",
                "last_hidden_state": f"encoder_dyn.{b}x{s}.last_hidden_state.npy"}
        np.save(os.path.join(out_dir, case["input_ids"]), ids)
        np.save(os.path.join(out_dir, case["last_hidden_state"]), y.astype(np.float32))
        cases.append(case)
        files += [case["input_ids"], case["last_hidden_state"]]
    write_manifest(out_dir, "encoder_dyn", {
        "model": "encoder_dyn", "stamp": stamp, "seed": seed, "dims": gen_models.ENCODER_DYN,
        "input": "input_ids", "output": "last_hidden_state", "cases": cases, "all_files": files})
    print(f"torch_reference: encoder_dyn: {len(cases)} shapes "
          f"({', '.join(f'{b}x{s}' for b, s in shapes)}) in {out_dir}")


def greedy_with_cache(model, prompt, tokens):
    """Greedy generation as a runtime does it: the prompt in one call with an
    empty cache, then one token per call with the cache fed back. Returns
    (generated ids, logits of the prompt call, logits that chose each token)."""
    past = model.empty_past()
    ids = prompt
    generated, step_logits, first_logits = [], [], None
    with torch.no_grad():
        for _ in range(tokens):
            logits, *past = model(ids, *past)
            if first_logits is None:
                first_logits = logits
            last = logits[0, -1]
            nxt = int(torch.argmax(last))
            generated.append(nxt)
            step_logits.append(last)
            ids = torch.tensor([[nxt]], dtype=torch.int64)
    return generated, first_logits, torch.stack(step_logits)


def greedy_without_cache(model, prompt, tokens):
    """The same generation recomputing the whole sequence every step (no
    cache: past is always empty), for the self-check."""
    seq = prompt
    generated, step_logits = [], []
    with torch.no_grad():
        for _ in range(tokens):
            logits = model(seq, *model.empty_past())[0]
            last = logits[0, -1]
            nxt = int(torch.argmax(last))
            generated.append(nxt)
            step_logits.append(last)
            seq = torch.cat([seq, torch.tensor([[nxt]], dtype=torch.int64)], dim=1)
    return generated, torch.stack(step_logits)


def decoder_references(out_dir, prompt_len, tokens, seed, stamp):
    dims = gen_models.DECODER_KV
    if prompt_len < 1 or tokens < 1 or prompt_len + tokens > dims["max_pos"] + 1:
        raise SystemExit(f"torch_reference: need prompt_len >= 1, tokens >= 1 and "
                         f"prompt_len + tokens - 1 <= {dims['max_pos']} positions")
    model = gen_models.build_decoder_kv()
    rng = np.random.default_rng([seed, prompt_len])
    prompt = rng.integers(0, dims["vocab"], size=(1, prompt_len), dtype=np.int64)
    generated, first_logits, step_logits = greedy_with_cache(model, torch.from_numpy(prompt), tokens)

    plain, plain_logits = greedy_without_cache(model, torch.from_numpy(prompt), tokens)
    if plain != generated:
        i = next(i for i, (a, b) in enumerate(zip(plain, generated)) if a != b)
        raise RuntimeError(f"decoder_kv: cached generation differs from uncached at token {i} "
                           f"({generated[i]} vs {plain[i]}): the module's mask or positions are wrong")
    rel = float((step_logits - plain_logits).abs().max() / plain_logits.abs().max())
    if rel > 1e-4:
        raise RuntimeError(f"decoder_kv: cached logits differ from uncached by {rel:.2e} relative")

    top2 = torch.topk(step_logits, 2, dim=-1).values
    margin = float((top2[:, 0] - top2[:, 1]).min())
    files = {"prompt_ids": "decoder_kv.prompt_ids.npy", "generated_ids": "decoder_kv.generated_ids.npy",
             "first_logits": "decoder_kv.first_logits.npy", "step_logits": "decoder_kv.step_logits.npy"}
    np.save(os.path.join(out_dir, files["prompt_ids"]), prompt)
    np.save(os.path.join(out_dir, files["generated_ids"]), np.array(generated, dtype=np.int64))
    np.save(os.path.join(out_dir, files["first_logits"]), first_logits.numpy().astype(np.float32))
    np.save(os.path.join(out_dir, files["step_logits"]), step_logits.numpy().astype(np.float32))
    write_manifest(out_dir, "decoder_kv", {
        "model": "decoder_kv", "stamp": stamp, "seed": seed, "dims": dims,
        "prompt_len": prompt_len, "tokens": tokens, "min_top2_margin": margin,
        "cached_vs_uncached_rel": rel, **files, "all_files": list(files.values())})
    print(f"torch_reference: decoder_kv: prompt of {prompt_len}, {tokens} greedy tokens "
          f"(distinct {len(set(generated))}, smallest top-1/top-2 logit gap {margin:.3g}) in {out_dir}")
    if margin < 1e-4 * float(step_logits.abs().max()):
        print("torch_reference: warning: decoder_kv: the two best logits of a step are within 1e-4 "
              "relative: a runtime within tolerance may pick the other token", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("models", nargs="*", default=MODELS, help=f"models (default: {' '.join(MODELS)})")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--shapes", type=parse_shapes, default=parse_shapes(DEFAULT_SHAPES),
                    help=f"encoder_dyn: BATCHxSEQ list (default {DEFAULT_SHAPES})")
    ap.add_argument("--prompt-len", type=int, default=4, help="decoder_kv: prompt tokens (default 4)")
    ap.add_argument("--tokens", type=int, default=64, help="decoder_kv: tokens to generate (default 64)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the input ids")
    args = ap.parse_args()
    for m in args.models:
        if m not in MODELS:
            ap.error(f"unknown model '{m}' (known: {', '.join(MODELS)})")
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    for m in args.models:
        if m == "encoder_dyn":
            params = {"shapes": args.shapes, "seed": args.seed}
        else:
            params = {"prompt_len": args.prompt_len, "tokens": args.tokens, "seed": args.seed}
        stamp = stamp_of(m, params)
        if up_to_date(args.out, m, stamp):
            print(f"torch_reference: {m}: up to date")
            continue
        if m == "encoder_dyn":
            encoder_references(args.out, args.shapes, args.seed, stamp)
        else:
            decoder_references(args.out, args.prompt_len, args.tokens, args.seed, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
