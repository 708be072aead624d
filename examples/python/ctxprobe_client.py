"""A small Python client for ctxprobe, over the stubs generated from proto/.

    examples/python/generate.sh                  # once: stubs into examples/python/generated
    python3 examples/python/ctxprobe_client.py --context "User: Hi Bot:" --continuation " hello" " bye"

A secured server (TLS, mutual TLS, bearer token):

    python3 examples/python/ctxprobe_client.py --address host:50051 --tls-ca ca.pem \
        [--tls-cert client.pem --tls-key client.key] [--server-name NAME] --token-file token ...
    (or CTXPROBE_ADDRESS / CTXPROBE_TOKEN_FILE / CTXPROBE_TLS_CA / … in the environment)

As a library:

    client = Client("127.0.0.1:50051", tls_ca="ca.pem", token="…")
    scores = client.score("User: Hi Bot:", [" hello", " bye"])       # one context, several continuations
    answers = client.score_stream(items)                              # thousands of items, answers as they come
    best = select(scores)                                             # CHARPEval-style selection: acc and acc_norm
    for step in client.generate([("user", "Hi")], max_tokens=32):     # the model writes, token by token
        print(step["text"], end="")
"""

import argparse
import json
import os
import sys

STUBS = os.environ.get("CTXPROBE_STUBS", os.path.join(os.path.dirname(os.path.abspath(__file__)), "generated"))
sys.path.insert(0, STUBS)
# What to do, said once, where a missing module would end in a traceback: the same
# packages generate.sh asks for (they install into /usr/bin/python3 on Debian).
INSTALL = (
    "apt-get install python3-grpcio python3-grpc-tools (for /usr/bin/python3), "
    "or pip install grpcio grpcio-tools in this Python's environment"
)


def _missing(message):
    """Exit with status 1 and `message` when run as a script; raise it when imported."""
    if __name__ == "__main__":
        sys.exit(f"ctxprobe_client.py: {message}")
    raise ImportError(message)


try:
    import grpc
except ImportError:
    _missing(f"{sys.executable} cannot import grpc: {INSTALL}")
try:
    from ctxprobe.v1 import ctxprobe_pb2 as pb
    from ctxprobe.v1 import ctxprobe_pb2_grpc as rpc
except ImportError as e:
    if (e.name or "").startswith("ctxprobe"):
        _missing(f"no stubs in {STUBS}: run examples/python/generate.sh (or set CTXPROBE_STUBS to where it wrote them)")
    _missing(f"{sys.executable} cannot import what the stubs need ({e}): {INSTALL}")


def _continuation(c):
    return {
        "logprob": c.logprob,
        "is_greedy": c.is_greedy,
        "token_ids": list(c.token_ids),
        "token_logprobs": list(c.token_logprobs),
        "num_tokens": c.num_tokens,
        "num_chars": c.num_chars,
        "num_bytes": c.num_bytes,
    }


def _item(item_id, context, continuations, top_k=0, add_bos=False):
    item = pb.ScoreItem(id=item_id, top_k=top_k, add_bos=add_bos)
    if isinstance(context, str):
        item.context_text = context
        item.continuations_text.extend(continuations)
    else:
        item.context_ids.ids.extend(context)
        for ids in continuations:
            item.continuations_ids.add().ids.extend(ids)
    return item


class _BearerToken(grpc.AuthMetadataPlugin):
    def __init__(self, token):
        self.token = token

    def __call__(self, context, callback):
        callback((("authorization", f"Bearer {self.token}"),), None)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


class Client:
    """A connection to a ctxprobe server. With `tls_ca` the channel is TLS, verified
    against that CA (`tls_cert` / `tls_key`: a client identity for mutual TLS;
    `server_name`: the name in the server's certificate when the address is not it).
    `token`: sent as `authorization: Bearer <token>` on every call (gRPC sends call
    credentials over TLS only; use `insecure_token=True` for a plaintext test server)."""

    def __init__(self, address="127.0.0.1:50051", model="", tls_ca=None, tls_cert=None, tls_key=None, server_name=None, token=None):
        self.metadata = ()
        options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
        if tls_ca:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca),
                private_key=_read(tls_key) if tls_key else None,
                certificate_chain=_read(tls_cert) if tls_cert else None,
            )
            if token:
                creds = grpc.composite_channel_credentials(creds, grpc.metadata_call_credentials(_BearerToken(token)))
            self.channel = grpc.secure_channel(address, creds, options=options)
        else:
            self.channel = grpc.insecure_channel(address, options=options)
            if token:
                self.metadata = (("authorization", f"Bearer {token}"),)
        self.stub = rpc.ScoringStub(self.channel)
        self.probing = rpc.ProbingStub(self.channel)
        self.generation = rpc.GenerationStub(self.channel)
        self.model = model

    def models(self):
        return [m.name for m in self.stub.ListModels(pb.ListModelsRequest(), metadata=self.metadata).models]

    def score(self, context, continuations, top_k=0, add_bos=False, timeout=None):
        """Log-likelihood of each continuation after the context (text or token ids)."""
        req = pb.ScoreRequest(model=self.model, items=[_item("0", context, continuations, top_k, add_bos)])
        res = self.stub.Score(req, timeout=timeout, metadata=self.metadata)
        return [_continuation(c) for c in res.items[0].continuations]

    def score_stream(self, items):
        """items: iterable of (id, context, continuations). Returns {id: [scores]} or raises on a bad item."""
        requests = (pb.StreamScoreRequest(model=self.model, item=_item(i, ctx, conts)) for i, ctx, conts in items)
        answers = {}
        for res in self.stub.ScoreStream(requests, metadata=self.metadata):
            if res.error_code:
                raise ValueError(f"item {res.item.id}: {res.error_message}")
            answers[res.item.id] = [_continuation(c) for c in res.item.continuations]
        return answers

    def rolling(self, texts, min_k_percent=20.0):
        req = pb.RollingRequest(model=self.model, items=[pb.RollingItem(id=str(i), text=t, min_k_percent=min_k_percent) for i, t in enumerate(texts)])
        return [
            {"logprob": r.logprob, "num_tokens": r.num_tokens, "mean_loss": r.mean_loss, "perplexity": r.perplexity, "min_k_logprob": r.min_k_logprob}
            for r in self.stub.ScoreRolling(req, metadata=self.metadata).items
        ]

    def attribute(self, chunks, target="", interventions=("remove", "mask"), history_sweep=()):
        """Δ of the target chunk's log-likelihood per earlier chunk. chunks: [(label, text)]."""
        kinds = {"remove": pb.INTERVENTION_REMOVE, "mask": pb.INTERVENTION_MASK}
        sample = pb.AttributionSample(id="0", chunks=[pb.Chunk(label=l, text=t) for l, t in chunks], target_label=target)
        req = pb.AttributeRequest(model=self.model, samples=[sample], interventions=[kinds[v] for v in interventions], history_sweep=list(history_sweep))
        a = self.probing.Attribute(req, metadata=self.metadata).samples[0]
        def delta(c, v):
            return getattr(c, v).delta if c.HasField(v) else None

        return {
            "target": a.spans[a.target].label,
            "logprob": a.logprob,
            "chunks": [{"index": c.index, "label": c.label, "remove": delta(c, "remove"), "mask": delta(c, "mask")} for c in a.chunks],
        }

    def generate(self, prompt, max_tokens=64, temperature=0.0, top_p=1.0, top_k=0, seed=None, stop=(), logprobs=0, attention=False, n=1, timeout=None):
        """Yield one dict per generated token as the server makes it. prompt: a text, a list
        of (label, text) chunks, or a list of (role, content) chat messages (rendered with
        the model's chat template, the assistant's turn opened)."""
        if isinstance(prompt, str):
            sample = pb.ProbeSample(chunks=[pb.Chunk(label="prompt", text=prompt)], add_special_tokens=True)
        elif prompt and prompt[0][0] in ("system", "user", "assistant"):
            sample = pb.ProbeSample(messages=[pb.ChatMessage(role=r, content=c) for r, c in prompt], add_generation_prompt=True)
        else:
            sample = pb.ProbeSample(chunks=[pb.Chunk(label=l, text=t) for l, t in prompt])
        sampling = pb.SamplingOptions(temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens, stop=list(stop), n=n, logprobs=logprobs)
        if seed is not None:
            sampling.seed.value = seed
        req = pb.GenerateRequest(model=self.model, prompt=sample, sampling=sampling, attention=attention)
        for m in self.generation.Generate(req, timeout=timeout, metadata=self.metadata):
            step = {"choice": m.choice, "token_id": m.token_id, "logprob": m.logprob, "text": m.text, "finish_reason": m.finish_reason or None}
            if logprobs:
                step["top"] = [(t.id, t.logprob) for t in m.top]
            if attention:
                step["mass"] = [list(m.mass.values[r * m.mass.cols:(r + 1) * m.mass.cols]) for r in range(m.mass.rows)]
                step["votes"] = [list(m.votes.values[r * m.votes.cols:(r + 1) * m.votes.cols]) for r in range(m.votes.rows)]
            yield step

    def close(self):
        self.channel.close()


def select(scores):
    """The chosen candidate by summed log-likelihood (acc) and per character (acc_norm)."""
    acc = max(range(len(scores)), key=lambda i: scores[i]["logprob"])
    acc_norm = max(range(len(scores)), key=lambda i: scores[i]["logprob"] / max(1, scores[i]["num_chars"]))
    return {"acc": acc, "acc_norm": acc_norm}


def main():
    parser = argparse.ArgumentParser(description="Score continuations with a ctxprobe server")
    env = os.environ.get
    parser.add_argument("--address", default=env("CTXPROBE_ADDRESS", "127.0.0.1:50051"), help="host:port of the server (or CTXPROBE_ADDRESS)")
    parser.add_argument("--model", default="")
    parser.add_argument("--context", default="")
    parser.add_argument("--continuation", nargs="+")
    parser.add_argument("--attribute", nargs="+", metavar="LABEL=TEXT", help="chunks, in order: print each one's Δ of the last chunk's log-likelihood")
    parser.add_argument("--stream", action="store_true", help="send through ScoreStream, one item per continuation")
    parser.add_argument("--generate", metavar="PROMPT", help="generate from PROMPT (greedy) and print the steps as JSON")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--tls-ca", default=env("CTXPROBE_TLS_CA"), help="PEM CA of the server: connect over TLS")
    parser.add_argument("--tls-cert", default=env("CTXPROBE_TLS_CERT"), help="PEM client certificate (mutual TLS)")
    parser.add_argument("--tls-key", default=env("CTXPROBE_TLS_KEY"), help="PEM key of --tls-cert")
    parser.add_argument("--server-name", default=env("CTXPROBE_SERVER_NAME"), help="the name in the server certificate")
    parser.add_argument("--token-file", default=env("CTXPROBE_TOKEN_FILE"), help="bearer token (first line of the file)")
    args = parser.parse_args()
    if not args.continuation and not args.attribute and args.generate is None:
        parser.error("give --continuation TEXT..., --attribute LABEL=TEXT... or --generate PROMPT")
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = next((line.strip() for line in f if line.strip() and not line.startswith("#")), None)
        if not token:
            parser.error(f"--token-file {args.token_file} holds no token")
    client = Client(args.address, args.model, args.tls_ca, args.tls_cert, args.tls_key, args.server_name, token)
    if args.generate is not None:
        steps = list(client.generate(args.generate, max_tokens=args.max_tokens, logprobs=1))
        print(json.dumps({"text": "".join(s["text"] for s in steps), "steps": steps}))
        client.close()
        return
    if args.attribute:
        chunks = [tuple(c.split("=", 1)) for c in args.attribute]
        if any(len(c) != 2 or not c[0] for c in chunks):
            parser.error("--attribute takes LABEL=TEXT chunks")
        print(json.dumps(client.attribute(chunks)))
        client.close()
        return
    if args.stream:
        answers = client.score_stream((str(i), args.context, [c]) for i, c in enumerate(args.continuation))
        scores = [answers[str(i)][0] for i in range(len(args.continuation))]
    else:
        scores = client.score(args.context, args.continuation)
    print(json.dumps({"models": client.models(), "scores": scores, "selected": select(scores)}))
    client.close()


if __name__ == "__main__":
    main()
