#!/usr/bin/env python3
"""Benchmark client for `squeezekv serve` (standard library only, loopback only, bounded).

For each concurrency level it starts that many streaming clients at once, each asking for exactly
--tokens tokens (ignore_eos), and reports the aggregate generated tokens/s (every stream's tokens
over the wall time of the level), the per-stream tokens/s (median) and the time to first token
(median and p95). An untimed 8-token request goes first (--no-warmup: none). With --rounds N the
levels run N times in turn (1, 8, 16, 1, 8, 16, ...), so that a slow spell of a shared machine
falls on every level alike, and a summary gives each level's median aggregate and its ratio to the
first level's median. Example:

  build/squeezekv serve -m build/llama1b-q8_0.gguf -t 2 --port 8080 &
  scripts/serve_bench.py --port 8080 --streams 1,8,16 --tokens 128 --rounds 3
"""
import argparse
import http.client
import json
import statistics
import sys
import threading
import time


def one_stream(port, body, timeout, out):
    start = time.perf_counter()
    first = None
    tokens = 0
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        r.read()
        c.close()
        out.append({"error": r.status})
        return
    buffer = b""
    while True:
        data = r.read1(65536)
        if not data:
            break
        buffer += data
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            j = json.loads(event[6:])
            if j.get("choices") and j["choices"][0].get("text"):
                first = first or time.perf_counter()
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
    c.close()
    end = time.perf_counter()
    out.append({"ttft": (first or end) - start, "tokens": tokens, "seconds": end - start})


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def level(port, n, args):
    body = {"prompt": args.prompt, "max_tokens": args.tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    if args.method:
        body["squeezekv"] = {"method": args.method, "budget": args.budget}
    out = []
    threads = [threading.Thread(target=one_stream, args=(port, dict(body, seed=i), args.timeout, out), daemon=True)
               for i in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, args.timeout - (time.perf_counter() - start)))
    wall = time.perf_counter() - start
    ok = [o for o in out if "error" not in o]
    total = sum(o["tokens"] for o in ok)
    return {"streams": n, "ok": len(ok), "errors": n - len(ok), "tokens": total, "seconds": wall,
            "aggregate_tps": total / wall if wall > 0 else 0.0,
            "per_stream_tps_median": statistics.median(o["tokens"] / o["seconds"] for o in ok) if ok else 0.0,
            "ttft_median_s": statistics.median(o["ttft"] for o in ok) if ok else 0.0,
            "ttft_p95_s": percentile([o["ttft"] for o in ok], 95) if ok else 0.0}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--streams", default="1,8,16", help="concurrency levels, comma-separated (each at most 64)")
    p.add_argument("--tokens", type=int, default=128, help="tokens per request")
    p.add_argument("--prompt", default="Once upon a time")
    p.add_argument("--method", default="", help="a cache method for every request (default: the server's)")
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--timeout", type=float, default=600, help="seconds per level at most")
    p.add_argument("--rounds", type=int, default=1, help="times every level runs, in turn (at most 10)")
    p.add_argument("--json", action="store_true", help="also print the figures as JSON")
    p.add_argument("--no-warmup", action="store_true",
                   help="skip the untimed 8-token request sent first (it pages the model in, which would "
                        "otherwise slow the first level and inflate every ratio)")
    args = p.parse_args()
    levels = [int(x) for x in args.streams.split(",")]
    if any(n < 1 or n > 64 for n in levels) or not 1 <= args.tokens <= 4096 or not 1 <= args.rounds <= 10:
        sys.exit("serve_bench: streams must lie in [1, 64], tokens in [1, 4096] and rounds in [1, 10]")
    if not args.no_warmup:
        warm = argparse.Namespace(**{**vars(args), "tokens": 8})
        level(args.port, 1, warm)
    results = []
    for round_index in range(args.rounds):
        first = None
        for n in levels:
            r = level(args.port, n, args)
            r["round"] = round_index + 1
            results.append(r)
            first = first or r["aggregate_tps"] or 1.0
            print(("" if args.rounds == 1 else f"round {round_index + 1}: ")
                  + f"{n:3d} streams: {r['aggregate_tps']:8.2f} tokens/s aggregate ({r['aggregate_tps'] / first:5.2f}x "
                  f"the first level), {r['per_stream_tps_median']:7.2f} tokens/s per stream, time to first token "
                  f"median {r['ttft_median_s']:.2f} s, p95 {r['ttft_p95_s']:.2f} s ({r['tokens']} tokens in "
                  f"{r['seconds']:.1f} s" + (f", {r['errors']} failed" if r["errors"] else "") + ")", flush=True)
    if args.rounds > 1:
        medians = {n: statistics.median(r["aggregate_tps"] for r in results if r["streams"] == n) for n in levels}
        base = medians[levels[0]] or 1.0
        for n in levels:
            print(f"median of {args.rounds} rounds: {n:3d} streams: {medians[n]:8.2f} tokens/s aggregate "
                  f"({medians[n] / base:5.2f}x the first level)")
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
