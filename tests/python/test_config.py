"""KVCacheConfig: the reference library's names and defaults, and ValueError naming the parameter."""
import pytest

import squeezekv


def test_seed_defaults():
    c = squeezekv.KVCacheConfig()
    assert (c.method, c.head_dim, c.squeeze_budget, c.squeeze_n_sink) == ("squeeze", 128, 512, 4)
    assert c.squeeze_strength == 1.0 and c.squeeze_resolved_budget is None
    assert (c.score, c.kv_type, c.importance) == ("key-proxy", "f16", "key-dispersion")


def test_defaults_are_the_libraries():
    native = squeezekv.KVCacheConfig().to_native()
    fresh = squeezekv._native.NativeConfig()
    for name in ("recent", "decay", "beta", "chunk_size", "window", "kernel", "squeeze_fraction"):
        assert getattr(native, name) == getattr(fresh, name), name


def test_every_method_builds():
    ids = [m["id"] for m in squeezekv.methods()]
    assert {"full", "h2o", "squeeze", "pyramidkv", "chunkkv", "tova", "streaming", "window", "snapkv"} <= set(ids)
    for method in ids:
        squeezekv.KVCacheConfig(method=method, head_dim=8, squeeze_budget=64)


@pytest.mark.parametrize("kwargs, name", [
    ({"squeeze_budget": 4}, "squeeze_budget = 4"),
    ({"squeeze_strength": 1.5}, "squeeze_strength = 1.5"),
    ({"squeeze_n_sink": -1}, "squeeze_n_sink = -1"),
    ({"squeeze_resolved_budget": 2}, "squeeze_resolved_budget = 2"),
    ({"method": "nope"}, "nope"),
    ({"kv_type": "bf16"}, "kv_type = bf16"),
    ({"score": "magic"}, "score = magic"),
    ({"beta": 0.5}, "beta = 0.5"),
    ({"kernel": 4}, "kernel = 4"),
    ({"head_dim": "128"}, "head_dim = '128'"),
    ({"squeeze_budget": 12.5}, "squeeze_budget = 12.5"),
    ({"decay": True}, "decay = True"),
    ({"method": "kivi", "bit_width_inlier": 3}, "bit_width_inlier = 3"),
    ({"method": "kivi", "kivi_group_size": 12}, "kivi_group_size = 12"),
    ({"method": "kivi", "residual_length": 40}, "residual_length = 40"),
    ({"method": "kivi", "kv_type": "q8_0"}, "kv_type = q8_0"),
    ({"bit_width_inlier": 2, "kv_type": "kivi4"}, "bit_width_inlier = 2"),
])
def test_bad_values_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name.replace("(", r"\(")):
        squeezekv.KVCacheConfig(**kwargs)


def test_policy_and_allocator_override():
    c = squeezekv.KVCacheConfig(method="h2o", allocator="pyramid", head_dim=8, squeeze_budget=32)
    assert c.to_native().resolved_allocator == "pyramid"
    assert c.replace(squeeze_budget=64).squeeze_budget == 64
    with pytest.raises(ValueError, match="allocator"):
        squeezekv.KVCacheConfig(method="h2o", allocator="none")


def test_every_registered_parameter_is_a_keyword_with_the_registrys_default():
    seed = {"budget": "squeeze_budget", "n_sink": "squeeze_n_sink", "strength": "squeeze_strength",
            "resolved_budget": "squeeze_resolved_budget", "kivi_group": "kivi_group_size",
            "kivi_residual": "residual_length"}
    config = squeezekv.KVCacheConfig()
    native = config.to_native()
    for param in squeezekv.parameters():
        name = seed.get(param["name"], param["name"])
        assert hasattr(config, name), name
        value = getattr(config, name)
        if param["optional"] and param["default"] == "none":
            assert value is None
        elif param["kind"] == "int":
            assert value == int(param["default"]), name
        elif param["kind"] == "float":
            assert value == float(param["default"]), name
        else:
            assert value == param["default"], name
        assert native.get(param["name"]) == value, name


def test_huge_ints_name_the_parameter():
    with pytest.raises(ValueError, match="chunk_size"):
        squeezekv.KVCacheConfig(method="chunkkv", chunk_size=2**70)
    with pytest.raises(ValueError, match="squeeze_budget"):
        squeezekv.KVCacheConfig(squeeze_budget=2**40)


def test_kivi_takes_the_reference_librarys_names():
    c = squeezekv.KVCacheConfig(method="kivi", bit_width_inlier=2, kivi_group_size=32, residual_length=128,
                                head_dim=64)
    native = c.to_native()
    assert (native.get("kv_type"), native.get("kivi_group"), native.get("kivi_residual")) == ("kivi2", 32, 128)
    assert squeezekv.KVCacheConfig(method="kivi", bit_width_inlier=4).to_native().get("kv_type") == "kivi4"
    # Without a width the method's preset (kivi2) applies; any policy takes KIVI storage too.
    assert squeezekv.KVCacheConfig(method="kivi_sink").to_native().resolved_policy == "full"
    assert squeezekv.KVCacheConfig(method="h2o", kv_type="kivi4", head_dim=64).to_native().get("kv_type") == "kivi4"


def test_head_split():
    c = squeezekv.KVCacheConfig(method="h2o", head_split="adakv", head_floor=0.5, head_dim=8, squeeze_budget=32)
    native = c.to_native()
    assert native.resolved_head_split == "adakv"
    assert native.get("head_floor") == 0.5
    assert squeezekv.KVCacheConfig(method="adakv", head_dim=8, squeeze_budget=64).to_native().resolved_head_split == "adakv"
    by_id = {m["id"]: m for m in squeezekv.methods()}
    assert by_id["squeeze_adakv"]["head_split"] == "adakv" and by_id["squeeze_adakv"]["allocator"] == "squeeze"
    assert by_id["h2o"]["head_split"] == "uniform"
    with pytest.raises(ValueError, match="head_split"):
        squeezekv.KVCacheConfig(method="window", head_split="adakv", head_dim=8).to_native().validate()
    with pytest.raises(ValueError, match="head_floor"):
        squeezekv.KVCacheConfig(method="h2o", head_floor=1.5, head_dim=8)
