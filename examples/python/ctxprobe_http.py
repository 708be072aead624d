"""ctxprobe over HTTP/JSON: the standard library only, no stubs, no grpcio.

Every gRPC method is also an HTTP route (the google.api.http rules in proto/; the whole
list at /openapi.json); bodies and answers are protobuf's JSON mapping (lowerCamelCase
names, enums by name, 64-bit integers as strings). In a notebook:

    from ctxprobe_http import Client, rows
    c = Client("http://127.0.0.1:8000")                 # token="…", tls_ca="ca.pem" when secured
    answer = c.probe([{"chunks": [{"label": "instruction", "text": "…"}, {"label": "response", "text": "…"}]}])
    sample = answer["samples"][0]
    heatmap = rows(sample["heatmap"])                   # [query segment][key segment]
    for step in c.generate({"messages": [{"role": "user", "content": "Hi"}]}, max_tokens=16):
        print(step["text"], end="")

From a shell:

    python3 examples/python/ctxprobe_http.py --url http://127.0.0.1:8000 --probe instruction="…" response="…"
    python3 examples/python/ctxprobe_http.py --generate "User: Hi Bot:" --max-tokens 8
    (or CTXPROBE_URL / CTXPROBE_TOKEN_FILE / CTXPROBE_TLS_CA in the environment)
"""

import argparse
import base64
import json
import os
import ssl
import struct
import sys
import urllib.error
import urllib.request


class CtxprobeError(Exception):
    """A call the server refused: `code` is the gRPC status code number (3: INVALID_ARGUMENT,
    5: NOT_FOUND, 16: UNAUTHENTICATED, …), `status` the HTTP status, the message names the field."""

    def __init__(self, code, message, status):
        super().__init__(f"{message} (code {code}, HTTP {status})")
        self.code, self.message, self.status = code, message, status


def rows(matrix):
    """A Matrix message ({rows, cols, values}) as a list of rows."""
    r, c, v = matrix["rows"], matrix["cols"], matrix["values"]
    return [[float(x) for x in v[i * c:(i + 1) * c]] for i in range(r)]


def attention_values(slice_):
    """An AttentionSlice's probabilities as rows [queries][keys] (float32 or float16 data)."""
    data = base64.b64decode(slice_["data"])
    half = slice_["dtype"] == "ATTENTION_FLOAT16"
    n = slice_["queries"] * slice_["keys"]
    flat = struct.unpack(f"<{n}{'e' if half else 'f'}", data)
    k = slice_["keys"]
    return [list(flat[q * k:(q + 1) * k]) for q in range(slice_["queries"])]


class Client:
    """A ctxprobe server's HTTP port (`--http-port`, 8000 by default). `token`: sent as
    `Authorization: Bearer <token>`; `tls_ca`: verify an https server against this CA
    (`tls_cert` / `tls_key`: a client identity for mutual TLS); `timeout` (seconds): the
    deadline of each call, sent as grpc-timeout so the server stops the work too."""

    def __init__(self, url="http://127.0.0.1:8000", model="", token=None, tls_ca=None, tls_cert=None, tls_key=None, timeout=None):
        self.url = url.rstrip("/")
        self.model = model
        self.token = token
        self.timeout = timeout
        self.context = None
        if url.startswith("https:"):
            self.context = ssl.create_default_context(cafile=tls_ca)
            if tls_cert:
                self.context.load_cert_chain(tls_cert, tls_key)

    def _open(self, path, body=None, stream=False):
        headers = {"Accept": "application/x-ndjson" if stream else "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.timeout:
            headers["grpc-timeout"] = f"{max(1, int(self.timeout * 1000))}m"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method="GET" if body is None else "POST")
        try:
            return urllib.request.urlopen(request, context=self.context)
        except urllib.error.HTTPError as e:
            try:
                error = json.loads(e.read())
            except ValueError:
                error = {"code": 2, "message": e.reason}
            raise CtxprobeError(error.get("code"), error.get("message"), e.code) from None

    def call(self, path, body=None):
        """One unary method: its answer as a dict."""
        with self._open(path, body) as res:
            return json.loads(res.read())

    def stream(self, path, body):
        """A streaming method: its messages as they come (NDJSON, one a line)."""
        with self._open(path, body, stream=True) as res:
            for line in res:
                if not line.strip():
                    continue
                message = json.loads(line)
                if "error" in message:
                    e = message["error"]
                    raise CtxprobeError(e["code"], e["message"], 200)
                yield message

    # ---- the methods -------------------------------------------------------------------

    def models(self):
        return self.call("/v1/list-models")["models"]

    def tokenize(self, texts, add_special_tokens=True):
        return self.call("/v1/tokenize", {"model": self.model, "texts": list(texts), "addSpecialTokens": add_special_tokens})["results"]

    def score(self, context, continuations, top_k=0):
        """Log-likelihoods of continuations after a context (lm-evaluation-harness loglikelihood)."""
        item = {"contextText": context, "continuationsText": list(continuations), "topK": top_k}
        return self.call("/v1/score", {"model": self.model, "items": [item]})["items"][0]["continuations"]

    def score_stream(self, items):
        """Many Score items in one call, each answered as soon as it is ready (match by id)."""
        return self.stream("/v1/score-stream", [{"model": self.model, "item": item} for item in items])

    def rolling(self, texts, min_k_percent=20.0):
        items = [{"id": str(i), "text": t, "minKPercent": min_k_percent} for i, t in enumerate(texts)]
        return self.call("/v1/score-rolling", {"model": self.model, "items": items})["items"]

    def probe(self, samples, pool="POOL_MAX", with_logprobs=False, with_tokens=False, **options):
        """Per-layer chunk votes and mass, round heatmaps (ProbeRequest's other fields as keywords, e.g. perHead=True)."""
        body = {"model": self.model, "samples": list(samples), "pool": pool, "withLogprobs": with_logprobs, "withTokens": with_tokens, **options}
        return self.call("/v1/probe", body)

    def raw_attention(self, sample, layers, heads, query_start=0, query_end=0, half=True):
        """Raw attention of one sample: one slice per (layer, head); `attention_values` decodes one."""
        body = {"model": self.model, "sample": sample, "layers": list(layers), "heads": list(heads), "queryStart": query_start, "queryEnd": query_end, "dtype": "ATTENTION_FLOAT16" if half else "ATTENTION_FLOAT32"}
        return list(self.stream("/v1/raw-attention", body))

    def attribute(self, samples, interventions=("INTERVENTION_REMOVE", "INTERVENTION_MASK"), history_sweep=(), **options):
        body = {"model": self.model, "samples": list(samples), "interventions": list(interventions), "historySweep": list(history_sweep), **options}
        return self.call("/v1/attribute", body)

    def generate(self, prompt, max_tokens=64, temperature=0.0, top_p=1.0, top_k=0, seed=None, stop=(), logprobs=0, attention=False, n=1):
        """The model writes: one message per generated token, as it is made. `prompt`: a
        ProbeSample-shaped dict ({"chunks": …} or {"messages": …}), or a text."""
        if isinstance(prompt, str):
            prompt = {"chunks": [{"label": "prompt", "text": prompt}]}
        sampling = {"maxTokens": max_tokens, "temperature": temperature, "topP": top_p, "topK": top_k, "stop": list(stop), "logprobs": logprobs, "n": n}
        if seed is not None:
            sampling["seed"] = str(seed)
        return self.stream("/v1/generate", {"model": self.model, "prompt": prompt, "sampling": sampling, "attention": attention})


def main():
    env = os.environ.get
    parser = argparse.ArgumentParser(description="Call a ctxprobe server over HTTP/JSON")
    parser.add_argument("--url", default=env("CTXPROBE_URL", "http://127.0.0.1:8000"), help="the server's HTTP port (or CTXPROBE_URL)")
    parser.add_argument("--model", default="")
    parser.add_argument("--token-file", default=env("CTXPROBE_TOKEN_FILE"), help="bearer token (first line of the file)")
    parser.add_argument("--tls-ca", default=env("CTXPROBE_TLS_CA"), help="PEM CA of an https server")
    parser.add_argument("--probe", nargs="+", metavar="LABEL=TEXT", help="chunks, in order: print votes and mass per layer of the last one, and the round heatmap")
    parser.add_argument("--generate", metavar="PROMPT", help="generate from PROMPT (greedy) and print the text")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.readline().strip()
    client = Client(args.url, model=args.model, token=token, tls_ca=args.tls_ca)
    try:
        if args.probe:
            chunks = [dict(zip(("label", "text"), c.split("=", 1))) for c in args.probe]
            sample = client.probe([{"chunks": chunks}])["samples"][0]
            labels = [s["label"] for s in sample["spans"]]
            print(json.dumps({"labels": labels, "votes": rows(sample["votes"]), "mass": rows(sample["mass"]), "heatmap": rows(sample["heatmap"])}))
        elif args.generate:
            text = "".join(step["text"] for step in client.generate(args.generate, max_tokens=args.max_tokens))
            print(json.dumps({"text": text}))
        else:
            print(json.dumps({"models": [m["name"] for m in client.models()]}))
    except CtxprobeError as e:
        print(f"ctxprobe: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
