"""The Python module agrees with the C++ results on the same inputs: the `squeezekv` program's
budgets and greedy generation, and the shared library's C API (through ctypes) row for row."""
import ctypes
import json
import subprocess

import numpy as np
import pytest

import squeezekv
from conftest import MODEL_PATH, artifact, mock_layer_keys


def cli(*args):
    out = subprocess.run([str(artifact("SQUEEZEKV_CLI", "squeezekv")), *args], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("seed", range(4))
def test_budgets_match_the_program(seed):
    rng = np.random.default_rng(seed)
    conc = [round(float(c), 6) for c in rng.uniform(-0.2, 1.1, size=int(rng.integers(1, 9)))]
    strength = [0.0, 0.3, 1.0, 0.75][seed]
    out = cli("budgets", "--concentrations", ",".join(map(str, conc)), "--avg", "64", "--sinks", "4",
              "--strength", str(strength), "--json")
    assert out["budgets"] == squeezekv.squeeze_budgets(conc, 64, 4, strength)


def test_greedy_generation_matches_the_program():
    config = squeezekv.KVCacheConfig(method="squeeze", squeeze_budget=8, squeeze_n_sink=2)
    mine = squeezekv.Model.load(MODEL_PATH).generate("Once upon a time", config, n_predict=24,
                                                     temperature=0.0, threads=1)
    theirs = cli("generate", "-m", str(MODEL_PATH), "-p", "Once upon a time", "-n", "24", "--temp", "0",
                 "-t", "1", "--method", "squeeze", "--budget", "8", "--sinks", "2", "--score", "key-proxy",
                 "--json")
    assert mine["tokens"] == theirs["tokens"]
    assert mine["layer_budgets"] == theirs["layer_budgets"]
    assert mine["kept_bytes"] == theirs["kv_kept_bytes"]


@pytest.mark.parametrize("method", ["squeeze", "pyramidkv", "tova", "chunkkv", "snapkv"])
def test_rows_match_the_c_api(method):
    lib = ctypes.CDLL(str(artifact("SQUEEZEKV_SHARED_LIBRARY", "libsqueezekv.so")))
    lib.squeezekv_cache_params_new.restype = ctypes.c_void_p
    lib.squeezekv_cache_params_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    lib.squeezekv_cache_params_free.argtypes = [ctypes.c_void_p]
    lib.squeezekv_cache_init.restype = ctypes.c_void_p
    lib.squeezekv_cache_init.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]
    lib.squeezekv_cache_update.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_int32]
    lib.squeezekv_cache_fetch.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p,
                                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]
    lib.squeezekv_cache_kept_bytes.restype = ctypes.c_uint64
    lib.squeezekv_cache_kept_bytes.argtypes = [ctypes.c_void_p]
    lib.squeezekv_cache_free.argtypes = [ctypes.c_void_p]

    layers, heads, dim, budget = 4, 2, 16, 40
    params = lib.squeezekv_cache_params_new()
    for name, value in (("method", method), ("head_dim", dim), ("budget", budget)):
        assert lib.squeezekv_cache_params_set(params, name.encode(), str(value).encode()) == 0
    native = lib.squeezekv_cache_init(params, layers, heads, 1)
    lib.squeezekv_cache_params_free(params)
    assert native, "squeezekv_cache_init failed"
    config = squeezekv.KVCacheConfig(method=method, head_dim=dim, squeeze_budget=budget)
    caches = squeezekv.KVCacheBuilder.for_model(layers, config)
    rng = np.random.default_rng(7)
    try:
        for seq in (80, 1, 1, 3, 1):
            for layer in range(layers):
                keys = mock_layer_keys(rng, layer, layers, heads=heads, seq=seq, head_dim=dim)
                values = rng.standard_normal(keys.shape).astype(np.float32)
                k, v = caches[layer].update_and_fetch(keys, values)
                assert lib.squeezekv_cache_update(native, layer, keys.ctypes.data, values.ctypes.data, seq) == 0
        for layer in range(layers):
            k, v, positions = caches[layer].fetch()
            for h in range(heads):
                n = lib.squeezekv_cache_fetch(native, layer, h, None, None, None, 0)
                assert n <= 0
                ck = np.zeros((-n, dim), np.float32)
                cv = np.zeros((-n, dim), np.float32)
                cp = np.zeros(-n, np.int64)
                assert lib.squeezekv_cache_fetch(native, layer, h, ck.ctypes.data, cv.ctypes.data, cp.ctypes.data,
                                                 -n) == -n
                live = positions[0, h] >= 0
                np.testing.assert_array_equal(positions[0, h][live], cp)
                np.testing.assert_array_equal(k[0, h][live], ck)
                np.testing.assert_array_equal(v[0, h][live], cv)
        assert lib.squeezekv_cache_kept_bytes(native) == caches.kept_bytes
    finally:
        lib.squeezekv_cache_free(native)
