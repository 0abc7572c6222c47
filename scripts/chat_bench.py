#!/usr/bin/env python3
"""A long chat against an OpenAI-compatible server, the way clients hold one: every turn sends the
whole history. Times each turn and records the server's usage counts (cached_tokens: the prompt
tokens a kept cache had seen), its resident memory (--pid) and, from squeezekv's /metrics, the kept
caches' K/V bytes; with --pid also the server's CPU seconds per turn, which a busy machine does not
stretch as it does the wall time. Works with `squeezekv serve` and with llama-server (same endpoints, same
`cache_prompt` field).

  build/squeezekv serve -m SMOLLM2 --port 8080 --method squeeze --budget 512 &
  python3 scripts/chat_bench.py --url http://127.0.0.1:8080 --pid $! --turns 1000 --json build/chat_kept.json

`--replay FILE --at 10,100,1000` sends the history a previous run saved (--history) up to those
turns once each, with cache_prompt off: what each turn costs when the server prefills the whole
history again. Standard library only; progress on stderr; exit status 2 on bad arguments.
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

QUESTIONS = ["Name a colour.", "Name an animal.", "What is 2 plus 3?", "Say hello.", "Name a fruit.",
             "Name a city.", "What day comes after Monday?"]


def post(url, body, timeout):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def kept_bytes(url):
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("squeezekv_kept_cache_bytes "):
                    return float(line.split()[1])
    except (urllib.error.URLError, OSError):
        pass
    return None  # not squeezekv (llama-server's /metrics is off by default)


def rss_mib(pid):
    if not pid:
        return None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return None


def cpu_seconds(pid):
    """The server's user + system CPU time: unlike the wall time, not stretched by other work on a
    shared machine."""
    if not pid:
        return None
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def body_for(messages, args, cache_prompt):
    body = {"messages": messages, "max_tokens": args.max_tokens, "temperature": 0, "cache_prompt": cache_prompt}
    if args.squeezekv:
        body["squeezekv"] = json.loads(args.squeezekv)
    return body


def one_turn(args, messages, cache_prompt):
    cpu0 = cpu_seconds(args.pid)
    t0 = time.perf_counter()
    r = post(args.url, body_for(messages, args, cache_prompt), args.timeout)
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds(args.pid) - cpu0 if cpu0 is not None else None
    usage = r.get("usage", {})
    details = usage.get("prompt_tokens_details") or {}
    # llama-server reports its reuse in timings.cache_n; squeezekv in OpenAI's field.
    cached = details.get("cached_tokens", r.get("timings", {}).get("cache_n"))
    return r["choices"][0]["message"]["content"], {
        "seconds": seconds, "cpu_seconds": cpu, "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"), "cached_tokens": cached,
        "rss_mib": rss_mib(args.pid), "kept_bytes": kept_bytes(args.url)}


def converse(args):
    messages, turns = [], []
    start = time.perf_counter()
    for t in range(args.turns):
        messages.append({"role": "user", "content": QUESTIONS[t % len(QUESTIONS)]})
        try:
            reply, rec = one_turn(args, messages, not args.no_cache_prompt)
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:300]
            print(f"\nturn {t + 1}: HTTP {e.code}: {detail}", file=sys.stderr)
            return messages[:-1], turns, f"turn {t + 1}: HTTP {e.code}: {detail}"
        messages.append({"role": "assistant", "content": reply})
        rec["turn"] = t + 1
        turns.append(rec)
        if (t + 1) % 10 == 0 or t + 1 == args.turns:
            done = time.perf_counter() - start
            eta = done / (t + 1) * (args.turns - t - 1)
            print(f"\rturn {t + 1}/{args.turns}: {rec['seconds'] * 1000:.0f} ms, prompt {rec['prompt_tokens']}, "
                  f"cached {rec['cached_tokens']}, ETA {eta:.0f} s   ", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return messages, turns, None


def replay(args):
    with open(args.replay) as f:
        messages = json.load(f)
    n_turns = (len(messages) + 1) // 2
    out = []
    for t in args.at:
        if t > n_turns:
            sys.exit(f"chat_bench.py: --at {t}: the history in {args.replay} has {n_turns} turns")
        history = messages[: 2 * t - 1]
        try:
            _, rec = one_turn(args, history, False)
        except urllib.error.HTTPError as e:
            rec = {"error": f"HTTP {e.code}: {e.read().decode(errors='replace')[:300]}"}
        rec["turn"] = t
        out.append(rec)
        print(f"turn {t}: {json.dumps(rec)}", file=sys.stderr)
    return out


def summary(turns):
    def mean(rows, key="seconds"):
        values = [r[key] for r in rows if r.get(key) is not None]
        return sum(values) / len(values) if values else None

    def ratio(a, b):
        return a / b if a is not None and b else None
    early, late = turns[9:110], turns[-100:]
    out = {"turns": len(turns), "mean_seconds_turns_10_110": mean(early), "mean_seconds_last_100": mean(late),
           "ratio_last_100_to_10_110": ratio(mean(late), mean(early)),
           "mean_completion_tokens_turns_10_110": mean(early, "completion_tokens"),
           "mean_completion_tokens_last_100": mean(late, "completion_tokens")}
    if any(r.get("cpu_seconds") is not None for r in turns):
        out.update({"mean_cpu_seconds_turns_10_110": mean(early, "cpu_seconds"),
                    "mean_cpu_seconds_last_100": mean(late, "cpu_seconds"),
                    "cpu_ratio_last_100_to_10_110": ratio(mean(late, "cpu_seconds"), mean(early, "cpu_seconds"))})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8080")
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=8, help="tokens per reply")
    ap.add_argument("--squeezekv", help='the "squeezekv" object of each request (JSON), e.g. \'{"budget": 512}\'')
    ap.add_argument("--no-cache-prompt", action="store_true", help='send "cache_prompt": false')
    ap.add_argument("--pid", type=int, help="the server's process id, for its resident memory")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per request")
    ap.add_argument("--history", help="write the conversation (messages) here, for --replay")
    ap.add_argument("--replay", help="a --history file: time single whole-history requests instead")
    ap.add_argument("--at", default="10,100,1000", help="--replay: the turns to time")
    ap.add_argument("--json", help="write the per-turn records and the summary here")
    args = ap.parse_args()
    try:
        args.at = [int(x) for x in args.at.split(",")]
    except ValueError:
        ap.error(f"--at: '{args.at}' is not a list of turn numbers")
    if args.turns < 1 or any(t < 1 for t in args.at) or args.max_tokens < 1:
        ap.error("--turns, --at and --max-tokens must be positive")
    if args.squeezekv:
        try:
            json.loads(args.squeezekv)
        except json.JSONDecodeError as e:
            ap.error(f"--squeezekv: not JSON: {e}")
    if args.replay:
        result = {"replay": replay(args)}
    else:
        messages, turns, stopped = converse(args)
        if args.history:
            with open(args.history, "w") as f:
                json.dump(messages, f)
        result = {"turns": turns, "summary": summary(turns), "stopped": stopped}
        print(json.dumps(result["summary"]), file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
