"""`squeezekv serve` as a user runs it, on a free loopback port: curl answers with the greedy text
`generate --temp 0` prints, streaming ends with data: [DONE], memory returns to idle after load,
SIGINT/SIGTERM end it with status 0 (a running stream is told and closed), and bad command lines
exit with status 2 and one message. Standard library only; bounded in requests and time."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest
import http.client

CLI = os.environ.get("SQUEEZEKV_CLI", "build/squeezekv")
MODEL = "../shared/models/stories260K.gguf"


def start(*extra, model=MODEL, threads=1):
    # Under AddressSanitizer freed memory waits in a quarantine, which reads as growth: none here.
    asan = ":".join(x for x in (os.environ.get("ASAN_OPTIONS", ""), "quarantine_size_mb=0") if x)
    p = subprocess.Popen([CLI, "serve", "-m", model, "--port", "0", "-t", str(threads), *extra],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                         env=dict(os.environ, ASAN_OPTIONS=asan))
    line = p.stderr.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not m:
        p.kill()
        raise AssertionError("no listening line: " + line + p.stderr.read())
    # Keep draining stderr so the server never blocks on it (the thread ends when the server does).
    threading.Thread(target=p.stderr.read, daemon=True).start()
    return p, int(m.group(1))


def generate(prompt, n):
    out = subprocess.run([CLI, "generate", "-m", MODEL, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "1"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.startswith(prompt)
    return out[len(prompt):].rstrip("\n")


def curl(port, path, body=None):
    cmd = ["curl", "-sS", "--max-time", "30", f"http://127.0.0.1:{port}{path}"]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=40).stdout


def sse_text(raw, chat):
    events = [e[len("data: "):] for e in raw.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]", raw[-200:]
    text = ""
    for e in events[:-1]:
        j = json.loads(e)
        assert "error" not in j, e
        for c in j["choices"]:
            text += c["delta"].get("content", "") if chat else c["text"]
    return text, events


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def metric(port, name):
    m = re.search(rf"^{name} (\S+)$", curl(port, "/metrics"), re.M)
    return float(m.group(1))


class Curl(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.port = start()

    @classmethod
    def tearDownClass(cls):
        cls.proc.send_signal(signal.SIGTERM)
        assert cls.proc.wait(timeout=20) == 0

    def test_completion_is_the_greedy_text_of_generate(self):
        expected = generate("Once upon a time", 40)
        j = json.loads(curl(self.port, "/v1/completions",
                            {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}))
        self.assertEqual(j["choices"][0]["text"], expected)
        self.assertEqual(j["usage"], {"prompt_tokens": 5, "completion_tokens": 40, "total_tokens": 45,
                                      "prompt_tokens_details": {"cached_tokens": 0}})
        raw = curl(self.port, "/v1/completions",
                   {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stream": True})
        self.assertEqual(sse_text(raw, False)[0], expected)

    def test_chat_streams_the_plain_fallback(self):
        expected = generate("user: Tell me a story.\nassistant:", 24)
        body = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 24,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        text, events = sse_text(curl(self.port, "/v1/chat/completions", body), True)
        self.assertEqual(text, expected)
        self.assertEqual(json.loads(events[-2])["usage"]["completion_tokens"], 24)

    def test_stop_string_and_models_and_health(self):
        full = generate("Once upon a time", 40)
        j = json.loads(curl(self.port, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 40,
                                                           "temperature": 0, "stop": "Lily"}))
        self.assertEqual(j["choices"][0]["text"], full[:full.index("Lily")])
        self.assertEqual(j["choices"][0]["finish_reason"], "stop")
        self.assertEqual(json.loads(curl(self.port, "/v1/models"))["data"][0]["id"], "stories260K")
        self.assertEqual(json.loads(curl(self.port, "/health"))["status"], "ok")

    def test_a_client_leaving_a_non_streamed_request_frees_its_session(self):
        before = metric(self.port, "squeezekv_requests_cancelled_total")
        body = {"prompt": "Once upon a time", "max_tokens": 60000, "ignore_eos": True,
                "squeezekv": {"method": "window", "budget": 32}}
        r = subprocess.run(["curl", "-s", "-m", "0.5", f"http://127.0.0.1:{self.port}/v1/completions",
                            "-d", json.dumps(body)], capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 28)  # curl gave up: the answer was still being generated
        for _ in range(100):
            if metric(self.port, "squeezekv_requests_cancelled_total") > before:
                break
            time.sleep(0.02)
        self.assertEqual(metric(self.port, "squeezekv_requests_cancelled_total"), before + 1)
        self.assertEqual(metric(self.port, "squeezekv_sessions_active"), 0)

    def test_memory_returns_to_idle_after_load(self):
        def load():
            def one(i):
                body = json.dumps({"prompt": "Once upon a time", "max_tokens": 64, "seed": i, "stream": i % 2 == 0,
                                   "squeezekv": {"method": "squeeze" if i % 2 else "full", "budget": 32}})
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                c.close()
                self.assertEqual(r.status, 200)
            threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        load()  # warm-up: buffers at their working size
        idle = rss_kib(self.proc.pid)
        for _ in range(3):
            load()
        time.sleep(0.2)
        self.assertEqual(metric(self.port, "squeezekv_sessions_active"), 0)
        self.assertEqual(metric(self.port, "squeezekv_kv_resident_bytes"), 0)
        # Three more loads of 32 sessions each leave the process where the first left it. Under the
        # sanitizers the allocator keeps per-thread caches and shadow memory, so there LeakSanitizer
        # checks instead, when the server exits (a leak makes its exit status non-zero).
        if os.environ.get("SQUEEZEKV_SANITIZED", "0") != "1":
            self.assertLess(rss_kib(self.proc.pid) - idle, 4096)


    def test_the_benchmark_client_counts_every_token(self):
        # scripts/serve_bench.py as documented, at a small size: every request of every level and
        # round is counted, and the summary's ratios are those of the medians it prints.
        out = subprocess.run([sys.executable, "scripts/serve_bench.py", "--port", str(self.port), "--streams", "1,3",
                              "--tokens", "6", "--rounds", "2", "--json", "--timeout", "60"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
        results = json.loads(out[out.index("["):])
        self.assertEqual([(r["round"], r["streams"]) for r in results], [(1, 1), (1, 3), (2, 1), (2, 3)])
        for r in results:
            self.assertEqual((r["ok"], r["errors"], r["tokens"]), (r["streams"], 0, 6 * r["streams"]))
            self.assertGreater(r["aggregate_tps"], 0)
        medians = re.findall(r"median of 2 rounds:\s+(\d+) streams:\s+([\d.]+) tokens/s aggregate \(\s*([\d.]+)x", out)
        self.assertEqual([int(m[0]) for m in medians], [1, 3])
        self.assertAlmostEqual(float(medians[1][2]), float(medians[1][1]) / float(medians[0][1]), delta=0.01)


class Signals(unittest.TestCase):
    def test_sigint_during_a_stream_closes_it_and_exits_0(self):
        proc, port = start()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v1/completions", json.dumps({"prompt": "Once upon a time", "max_tokens": 60000,
                                                         "ignore_eos": True, "stream": True,
                                                         "squeezekv": {"method": "window", "budget": 32}}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        first = r.read1(65536)
        self.assertTrue(first.startswith(b"data: "), first)
        proc.send_signal(signal.SIGINT)
        rest = (first + r.read()).decode()  # the server ends the stream itself
        c.close()
        self.assertTrue(rest.rstrip().endswith("data: [DONE]"), rest[-300:])
        self.assertIn("shutting down", rest)
        self.assertEqual(proc.wait(timeout=20), 0)

    def test_sigterm_during_a_plain_request_answers_503(self):
        # Not streamed: the answer waits for the end, so shutting down is a 503, not a 200 sent
        # ahead with an error body (and no choices) that OpenAI clients take for a success.
        proc, port = start()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v1/completions", json.dumps({"prompt": "Once upon a time", "max_tokens": 60000,
                                                         "ignore_eos": True,
                                                         "squeezekv": {"method": "window", "budget": 32}}),
                  {"Content-Type": "application/json"})
        for _ in range(100):
            if metric(port, "squeezekv_sessions_active") == 1:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        self.assertEqual(r.status, 503)
        self.assertIn("shutting down", body["error"]["message"])
        self.assertEqual(body["error"]["type"], "server_overloaded")
        self.assertEqual(proc.wait(timeout=20), 0)

    def test_sigterm_when_idle_exits_0(self):
        proc, port = start()
        curl(port, "/health")
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=20), 0)


class SavedCaches(unittest.TestCase):
    def test_a_saved_conversation_continues_after_the_server_is_killed(self):
        import tempfile
        with tempfile.TemporaryDirectory() as folder:
            proc, port = start("--cache-dir", folder, "--method", "squeeze", "--budget", "16")
            first = json.loads(curl(port, "/v1/completions",
                                    {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}))
            cache_id = first["squeezekv"]["cache_id"]
            saved = json.loads(curl(port, f"/caches/{cache_id}?action=save", {}))
            self.assertTrue(saved["saved"])
            proc.kill()  # no goodbye: what was saved is all there is
            proc.wait(timeout=20)
            proc, port = start("--cache-dir", folder, "--method", "squeeze", "--budget", "16")
            try:
                listed = json.loads(curl(port, "/caches"))["data"]
                self.assertEqual([c["id"] for c in listed], [cache_id])
                history = first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"] - 1  # last not fed
                prompt = "Once upon a time" + first["choices"][0]["text"] + " Then"
                second = json.loads(curl(port, "/v1/completions", {"prompt": prompt, "max_tokens": 4, "temperature": 0}))
                self.assertEqual(second["usage"]["prompt_tokens_details"]["cached_tokens"], history)
                self.assertEqual(metric(port, "squeezekv_kept_caches_restored_total"), 1.0)
            finally:
                proc.send_signal(signal.SIGTERM)
                self.assertEqual(proc.wait(timeout=20), 0)


class BadCommandLine(unittest.TestCase):
    def test_each_exits_2_with_one_message(self):
        for args in (["-m", "../shared/models/nope.gguf"], ["-m", MODEL, "--port", "70000"],
                     ["-m", MODEL, "--kv-limit-mib", "-1"], ["-m", MODEL, "--method", "nope"],
                     ["-m", MODEL, "--budget", "0"], ["-m", MODEL, "--kv-limit-mib", "inf"],
                     ["-m", MODEL, "--queue", "-1"], ["-m", MODEL, "--host", "999.1.1.1"],
                     ["-m", MODEL, "--cache-dir", "/dev/null/caches"]):
            r = subprocess.run([CLI, "serve", *args], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, args)
            self.assertTrue(r.stderr.strip(), args)
            self.assertLessEqual(len(r.stderr.strip().splitlines()), 2, r.stderr)


if __name__ == "__main__":
    unittest.main()
