"""Saved caches from Python (docs/cache_file.md): Model.generate(save_cache=...), load_cache and
Cache.save continue exactly as the cache that was never saved; bad files raise FormatError."""
import pytest

import squeezekv


def greedy(model, prompt, **kw):
    return model.generate(prompt, n_predict=8, temperature=0.0, threads=1, **kw)


def test_a_loaded_cache_continues_as_the_one_never_saved(model, tmp_path):
    config = squeezekv.KVCacheConfig(method="squeeze", squeeze_budget=12)
    path = tmp_path / "story.skv"
    kept = model.new_cache(config)
    first = greedy(model, "Once upon a time", cache=kept, save_cache=path)
    assert len(kept.tokens) == 5 + 8  # the whole output fed before the save
    never_saved = greedy(model, " She", cache=kept)
    loaded = squeezekv.load_cache(path, model)
    assert loaded.tokens == kept.tokens[: 5 + 8]
    assert loaded.method == "squeeze" and loaded.kept_bytes > 0
    assert greedy(model, " She", cache=loaded)["tokens"] == never_saved["tokens"]
    assert first["prompt_tokens"][:1] == [1]
    # Cache.save writes what the cache holds now, and it loads again.
    again = tmp_path / "again.skv"
    loaded.save(again)
    assert squeezekv.load_cache(again, model).tokens == loaded.tokens


def test_a_prompt_that_begins_with_the_history_feeds_only_the_rest(model, tmp_path):
    path = tmp_path / "full.skv"
    greedy(model, "Once upon a time", n_ctx=0, save_cache=path)
    loaded = squeezekv.load_cache(path, model)
    whole = model.tokenize("Once upon a time")
    assert loaded.tokens[:5] == whole
    with pytest.raises(ValueError, match="config"):
        greedy(model, " and", cache=loaded, config=squeezekv.KVCacheConfig(method="full"))


def test_bad_files_raise_format_error(model, tmp_path):
    with pytest.raises(squeezekv.FormatError, match="no-such.skv"):
        squeezekv.load_cache(tmp_path / "no-such.skv", model)
    path = tmp_path / "x.skv"
    greedy(model, "Once upon a time", save_cache=path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(squeezekv.FormatError, match="checksum"):
        squeezekv.load_cache(path, model)
    path.write_bytes(bytes(data[:100]))
    with pytest.raises(squeezekv.FormatError, match="truncated"):
        squeezekv.load_cache(path, model)
    with pytest.raises(OSError, match="/dev/full"):
        model.new_cache().save("/dev/full")
    with pytest.raises(OSError, match="no/such/dir"):
        greedy(model, "Once", save_cache=tmp_path / "no/such/dir/x.skv")
    with pytest.raises(ValueError, match="model"):
        squeezekv.load_cache(path, "not a model")
