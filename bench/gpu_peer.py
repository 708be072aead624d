"""PyTorch on the same checkpoint and workloads as bench/gpu.ts, one JSON line each (prints
figures, asserts nothing): scoring 1x512, 16x512, 32x1024 (every token's log-prob, as a
rolling score) in float32 (sdpa, TF32 off) and bfloat16 (sdpa); probes of 4k..32k tokens
with eager attention and output_attentions (what an analysis in transformers does); greedy
generation of 1 and 16 streams (HF generate, bfloat16). Run where python3 has torch and
transformers (bench/gpu-host.sh runs it after bench/gpu.js):

    python3 bench/gpu_peer.py --dir /tmp/ctxprobe-gpu-bench-360m [--only score,probe,generate]
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--dir", required=True)
ap.add_argument("--only", default="score,probe,generate")
ap.add_argument("--probe-lengths", default="4096,8192,16384,32768")
args = ap.parse_args()
only = set(args.only.split(","))
dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def line(workload, **figures):
    print(json.dumps({"workload": workload, "peer": "pytorch " + torch.__version__, "gpu": torch.cuda.get_device_name(0), **figures}), flush=True)


def load(dtype, attn):
    return AutoModelForCausalLM.from_pretrained(args.dir, dtype=dtype, attn_implementation=attn).to(dev).eval()


def timed(fn, runs=3):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t)
    return sorted(out)[len(out) // 2]


gen = torch.Generator().manual_seed(0)


def measured(workload, run, figures, **fields):
    """One JSON line for `run` (seconds in, figures out), or its out-of-memory error; the
    GPU's cache is emptied after either."""
    try:
        s = run()
        line(workload, **fields, **figures(s))
    except torch.OutOfMemoryError as e:
        line(workload, **fields, error="out of memory: " + str(e)[:160])
    torch.cuda.empty_cache()


def ids(n, length, vocab):
    return torch.randint(3, vocab, (n, length), generator=gen).to(dev)


@torch.inference_mode()
def score(model, x):
    logits = model(x).logits.float()
    return torch.log_softmax(logits[:, :-1], -1).gather(-1, x[:, 1:, None])


if "score" in only:
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        model = load(dtype, "sdpa")
        vocab = model.config.vocab_size
        for n, length in ((1, 512), (16, 512), (32, 1024)):
            x = ids(n, length, vocab)
            measured(
                f"score_{n}x{length}",
                lambda: timed(lambda: score(model, x)),
                lambda s: dict(tokens=n * length, seconds=round(s, 4), tokensPerSecond=round(n * length / s)),
                dtype=name,
                attn="sdpa",
            )
        del model
        torch.cuda.empty_cache()

if "probe" in only:
    model = load(torch.float32, "eager")
    vocab = model.config.vocab_size
    for length in map(int, args.probe_lengths.split(",")):
        x = ids(1, length, vocab)

        def attend():
            with torch.inference_mode():
                return timed(lambda: model(x, output_attentions=True), runs=1)

        measured(
            f"probe_{length}",
            attend,
            lambda s: dict(seconds=round(s, 3), peakGiB=round(torch.cuda.max_memory_allocated() / 2**30, 1)),
            dtype="float32",
            attn="eager+output_attentions",
            tokens=length,
        )
    del model
    torch.cuda.empty_cache()

if "generate" in only:
    model = load(torch.bfloat16, "sdpa")
    vocab = model.config.vocab_size
    for streams in (1, 16):
        x = ids(streams, 128, vocab)
        with torch.inference_mode():
            run = lambda: model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=64, min_new_tokens=64, do_sample=False, pad_token_id=0)
            s = timed(run, runs=1)
        line(f"generate_{streams}", dtype="bfloat16", streams=streams, tokens=64 * streams, seconds=round(s, 2), tokensPerSecond=round(64 * streams / s, 1))
