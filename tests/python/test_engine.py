"""The engine from Python on ../shared/models/stories260K.gguf: greedy generation's golden tokens,
perplexity and a sweep of several configurations against one full pass."""
import pytest

import squeezekv
from conftest import MODEL_PATH, TEXT_PATH


def test_model_shape(model):
    assert (model.n_layers, model.n_kv_heads, model.head_dim, model.vocab) == (5, 4, 8, 512)
    assert model.tokenize("Once upon a time") == [1, 403, 407, 261, 378]
    assert model.detokenize([432, 383, 286, 261, 376, 298, 315, 421]) == ", there was a little girl"


def test_greedy_generate_golden(model):
    streamed = []
    out = model.generate("Once upon a time", n_predict=8, temperature=0.0, on_token=streamed.append)
    assert out["tokens"] == [432, 383, 286, 261, 376, 298, 315, 421]
    assert streamed == out["tokens"]
    assert out["text"] == ", there was a little girl"
    assert out["prompt_tokens"] == [1, 403, 407, 261, 378]
    assert out["layer_kept"] == [5 + 7] * 5  # the full cache keeps prompt and output
    assert out["full_bytes"] == 5 * 4 * (5 + 7) * 8 * 2 * 2  # layers, KV heads, rows, D, K+V, fp16


def test_repack_is_an_option_that_changes_no_token():
    from conftest import MODEL_PATH
    in_place = squeezekv.Model.load(MODEL_PATH, repack=False)
    assert in_place.info["repacked_bytes"] == 0
    out = in_place.generate("Once upon a time", n_predict=8, temperature=0.0)
    assert out["tokens"] == [432, 383, 286, 261, 376, 298, 315, 421]
    # stories260K is F32: only quantised matrices are repacked, so the default repacks nothing here.
    assert squeezekv.Model.load(MODEL_PATH).info["repacked_bytes"] == 0


def test_generate_with_an_evicting_cache(model):
    config = squeezekv.KVCacheConfig(method="squeeze", squeeze_budget=8, squeeze_n_sink=2)
    out = model.generate("Once upon a time", config, n_predict=32, temperature=0.0)
    assert len(out["tokens"]) == 32
    assert sum(out["layer_budgets"]) == 5 * 8
    assert out["layer_kept"] == out["layer_budgets"]
    assert out["kept_bytes"] < out["full_bytes"]


def test_sweep_against_one_full_pass(model):
    tokens = model.tokenize_file(TEXT_PATH)[:600]
    configs = [squeezekv.KVCacheConfig(method="full"),
               squeezekv.KVCacheConfig(method="squeeze", squeeze_budget=16),
               squeezekv.KVCacheConfig(method="h2o", squeeze_budget=16)]
    results = model.sweep(tokens, configs, n_ctx=128, max_chunks=2, threads=1)
    assert [r["config"] for r in results] == configs
    full, squeezed, h2o = results
    assert full["chunks"] == 2 and full["scored"] == 2 * 63
    assert 1.0 < full["perplexity"] < 50.0
    assert full["top1_agreement"] == 1.0 and full["mean_kl"] == pytest.approx(0.0, abs=1e-12)
    for r in (squeezed, h2o):
        assert r["mean_kl"] > 0.0 and r["peak_kept_bytes"] < r["peak_full_bytes"]
        assert sum(r["layer_budgets"]) == 5 * 16
    single = model.perplexity(tokens, n_ctx=128, max_chunks=2, threads=1)
    assert single["perplexity"] == pytest.approx(full["perplexity"], rel=1e-12)


def test_caches_for_a_loaded_model(model):
    caches = squeezekv.KVCacheBuilder.for_model(model, squeezekv.KVCacheConfig(squeeze_budget=16))
    assert len(caches) == 5 and caches.config.head_dim == 8
    with pytest.raises(ValueError, match="heads"):
        import numpy as np
        caches[0].update_and_fetch(np.ones((1, 2, 4, 8), np.float32), np.ones((1, 2, 4, 8), np.float32))


def test_missing_model_is_a_format_error():
    with pytest.raises(squeezekv.FormatError, match="no-such.gguf") as error:
        squeezekv.Model.load("no-such.gguf")
    assert isinstance(error.value, OSError) and isinstance(error.value, ValueError)


def test_bad_generate_options(model):
    with pytest.raises(ValueError, match="n_predict"):
        model.generate("Once", n_predict=-1)
    with pytest.raises(ValueError, match="threads"):
        model.generate("Once", threads=-2)
    with pytest.raises(ValueError, match="configs"):
        model.sweep("Once upon a time", [])


# Issue 64.11: the edges of the Python API, each a ValueError naming the parameter.
def test_a_path_with_a_nul_byte_is_refused_not_cut(tmp_path):
    with pytest.raises(ValueError, match="path = .*contains a NUL byte"):
        squeezekv.Model.load(str(MODEL_PATH) + "\x00junk")
    with pytest.raises(ValueError, match="NUL"):
        squeezekv.load_model(str(MODEL_PATH) + "\x00")


def test_generate_refuses_a_negative_context_a_dict_config_and_ints_beyond_their_type(model):
    with pytest.raises(ValueError, match="n_ctx = -1"):
        model.generate("Once", n_predict=2, n_ctx=-1)
    with pytest.raises(ValueError, match="config = {'method': 'h2o'}: must be a squeezekv.KVCacheConfig"):
        model.generate("Once", config={"method": "h2o"})
    with pytest.raises(ValueError, match="config = "):
        model.perplexity("Once upon a time", config={"method": "h2o"})
    for name, value in (("n_predict", 2**31), ("n_batch", 2**40), ("top_k", -2**63), ("threads", 2**64),
                        ("seed", -1), ("seed", 2**64)):
        with pytest.raises(ValueError, match=f"{name} = {value}"):
            model.generate("Once", **{name: value})
    with pytest.raises(ValueError, match="n_ctx = 4294967296"):
        model.sweep("Once upon a time", [squeezekv.KVCacheConfig(method="full")], n_ctx=2**32)
    for fn, args, name in ((squeezekv.squeeze_budgets, ([0.5], 2**40), "avg_budget"),
                           (squeezekv.pyramid_budgets, (2**31, 64), "n_layers"),
                           (squeezekv.pyramid_budgets, (4, 64, -2**33), "n_sink")):
        with pytest.raises(ValueError, match=name):
            fn(*args)


# Issue 64.5: KIVI that would compress nothing is refused by the library for Python too.
def test_generate_refuses_kivi_that_compresses_nothing(model):
    with pytest.raises(ValueError, match="residual_length = 128: more than half of squeeze_budget = 64"):
        config = squeezekv.KVCacheConfig(method="h2o", squeeze_budget=64, kv_type="kivi2")
        model.generate("Once upon a time", config=config, n_predict=4)
    config = squeezekv.KVCacheConfig(method="h2o", squeeze_budget=64, kv_type="kivi2", residual_length=32)
    assert len(model.generate("Once upon a time", config=config, n_predict=4, temperature=0)["tokens"]) == 4


def test_text_is_always_valid_even_when_tokens_split_a_character(model):
    euro = [3 + 0xE2, 3 + 0x82, 3 + 0xAC]  # the byte tokens <0xE2> <0x82> <0xAC>
    assert model.detokenize(euro) == "\u20ac"
    assert model.detokenize(euro[:2]) == "\ufffd"  # a split character: never UnicodeDecodeError
    assert model.detokenize([3 + 0xFF]) == "\ufffd"
    out = model.generate("Once upon a time", n_predict=64, temperature=3.0, top_k=0, top_p=1.0, seed=1)
    assert isinstance(out["text"], str) and len(out["tokens"]) > 0  # the raw ids stay available


def test_format_error_of_a_corrupt_file_has_a_short_escaped_message(tmp_path):
    import struct

    key = bytes(range(0x80, 0x100)) * 4096  # 512 KiB of invalid UTF-8 as a key name
    data = b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, len(key)) + key + struct.pack("<I", 0xEEEEEEEE)
    path = tmp_path / "corrupt.gguf"
    path.write_bytes(data)
    with pytest.raises(squeezekv.FormatError) as error:
        squeezekv.Model.load(str(path))
    message = str(error.value)
    assert "\\x80\\x81" in message and len(message) < 600, message[:600]
