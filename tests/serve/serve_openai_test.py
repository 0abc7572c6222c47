"""The official `openai` npm package drives `squeezekv serve` (tests/serve/openai_client.mjs): its
completions and chats, streamed or not, are the greedy text `generate --temp 0` prints. The package
is installed into the build tree on first use (npm; CI starts from a clean clone)."""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from serve_cli_test import CLI, MODEL, generate, start  # noqa: E402

NPM_DIR = os.environ.get("SQUEEZEKV_NPM_DIR", "build/tests/serve/npm")


class OpenAIClient(unittest.TestCase):
    def test_the_official_client_works_unchanged(self):
        if not os.path.exists(os.path.join(NPM_DIR, "node_modules", "openai", "package.json")):
            os.makedirs(NPM_DIR, exist_ok=True)
            subprocess.run(["npm", "install", "--prefix", NPM_DIR, "--no-audit", "--no-fund", "openai"],
                           check=True, timeout=240)
        proc, port = start()
        try:
            script = os.path.abspath(os.path.join(os.path.dirname(__file__), "openai_client.mjs"))
            env = dict(os.environ, PORT=str(port), NODE_PATH=os.path.abspath(os.path.join(NPM_DIR, "node_modules")))
            # ESM resolves packages from the script's folder upwards: run a copy inside NPM_DIR.
            local = os.path.join(NPM_DIR, "openai_client.mjs")
            with open(script) as src, open(local, "w") as dst:
                dst.write(src.read())
            r = subprocess.run(["node", local], capture_output=True, text=True, env=env, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = json.loads(r.stdout)
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


if __name__ == "__main__":
    unittest.main()
