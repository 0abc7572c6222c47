"""The official `openai` npm package drives `squeezekv serve` (tests/serve/openai_client.mjs): its
completions and chats, streamed or not, are the greedy text `generate --temp 0` prints; and it holds
a 100-turn chat with SmolLM2 through ChatML (tests/serve/openai_chat_turns.mjs) in which every turn
continues the cache the previous one kept. The package is installed into the build tree on first
use (npm; CI starts from a clean clone)."""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from serve_cli_test import CLI, MODEL, generate, start  # noqa: E402

NPM_DIR = os.environ.get("SQUEEZEKV_NPM_DIR", "build/tests/serve/npm")


SANITIZED = os.environ.get("SQUEEZEKV_SANITIZED", "0") == "1"
SMOLLM2 = os.path.join(os.environ.get("SQUEEZEKV_MODELS", os.path.expanduser("~/.cache/squeezekv/models")),
                       "SmolLM2-135M-Instruct.Q4_1.gguf")


def run_client(test, script_name, port, timeout, **env_extra):
    """Runs one of the client scripts against the server on `port`; returns what it printed."""
    if not os.path.exists(os.path.join(NPM_DIR, "node_modules", "openai", "package.json")):
        os.makedirs(NPM_DIR, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", NPM_DIR, "--no-audit", "--no-fund", "openai"],
                       check=True, timeout=240)
    script = os.path.abspath(os.path.join(os.path.dirname(__file__), script_name))
    env = dict(os.environ, PORT=str(port), NODE_PATH=os.path.abspath(os.path.join(NPM_DIR, "node_modules")),
               **env_extra)
    # ESM resolves packages from the script's folder upwards: run a copy inside NPM_DIR.
    local = os.path.join(NPM_DIR, script_name)
    with open(script) as src, open(local, "w") as dst:
        dst.write(src.read())
    r = subprocess.run(["node", local], capture_output=True, text=True, env=env, timeout=timeout)
    test.assertEqual(r.returncode, 0, r.stderr)
    return json.loads(r.stdout)


class OpenAIClient(unittest.TestCase):
    def test_the_official_client_works_unchanged(self):
        proc, port = start()
        try:
            got = run_client(self, "openai_client.mjs", port, 60)
        finally:
            proc.terminate()
            self.assertEqual(proc.wait(timeout=20), 0)
        story = generate("Once upon a time", 40)
        chat = generate("user: Tell me a story.\nassistant:", 24)
        self.assertEqual(got["models"], ["stories260K"])
        self.assertEqual(got["completion"], story)
        self.assertEqual(got["completion_stream"], story)
        self.assertEqual(got["usage"]["completion_tokens"], 40)
        self.assertEqual(got["chat"], chat)
        self.assertEqual(got["chat_role"], "assistant")
        self.assertEqual(got["chat_stream"], chat)
        squeeze = subprocess.run([CLI, "generate", "-m", MODEL, "-p", "Once upon a time", "-n", "40", "--temp", "0",
                                  "-t", "1", "-b", "64", "--method", "squeeze", "--budget", "16"],
                                 capture_output=True, text=True, check=True, timeout=60).stdout
        self.assertEqual(got["squeeze"], squeeze[len("Once upon a time"):].rstrip("\n"))
        self.assertEqual(got["bad"], {"status": 400, "param": "squeezekv.budget"})

    def test_a_long_chat_prefills_only_each_turns_new_messages(self):
        # A missing model is a failure (scripts/fetch_models.sh fetches it), never a skip.
        self.assertTrue(os.path.exists(SMOLLM2), f"missing {SMOLLM2}: run scripts/fetch_models.sh")
        turns = 24 if SANITIZED else 100  # the sanitizers run the same checks on a shorter chat
        proc, port = start(model=SMOLLM2, threads=2)
        try:
            got = run_client(self, "openai_chat_turns.mjs", port, 600, TURNS=str(turns))
        finally:
            proc.terminate()
            self.assertEqual(proc.wait(timeout=20), 0)
        t = got["turns"]
        self.assertEqual(len(t), turns)
        self.assertEqual(t[0]["cached_tokens"], 0)
        # Every later turn continues the cache the previous one kept: the tokens it had seen (the
        # previous prompt and reply, but a last token that ended the reply by length, sampled and
        # never fed) are not prefilled again.
        for i in range(10, turns):
            prev = t[i - 1]
            seen = prev["prompt_tokens"] + prev["completion_tokens"] - (prev["finish_reason"] == "length")
            self.assertEqual(t[i]["cached_tokens"], seen, f"turn {i}")
        prefilled = [x["prompt_tokens"] - x["cached_tokens"] for x in t]
        self.assertGreater(t[-1]["prompt_tokens"], 64 * 4)  # far past the budget: the cache evicts
        self.assertLessEqual(max(prefilled[10:]), max(prefilled[1:10]))  # work per turn does not grow
        # Resident memory is flat: squeeze at budget 64 holds the same rows at turn 20 as at the end.
        self.assertLessEqual(t[-1]["kept_bytes"], t[19]["kept_bytes"])
        self.assertGreater(t[-1]["kept_bytes"], 0)
        self.assertEqual(got["violations"], 0)
        # The resent history is tokenized message by message once: each turn encodes at most its
        # new messages (its user message, the previous reply, the text between turns), the rest
        # comes from the server's memo of fragments.
        self.assertLessEqual(got["fragments_encoded"], 4 * turns)
        self.assertGreater(got["fragments_reused"], turns * (turns - 1))


if __name__ == "__main__":
    unittest.main()
