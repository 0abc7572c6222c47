"""cmake/check_symbols.py, the build's link rule: an object may use only symbols that its own or a
lower layer defines. Two objects compiled here, in the folders of two layers, one calling the
other through a declaration (what check_layers.cmake, reading includes, cannot see)."""
import subprocess
import sys

from conftest import ROOT

SCRIPT = ROOT / "cmake" / "check_symbols.py"
LAYERS = ROOT / "cmake" / "check_layers.cmake"


def compile_object(tmp_path, module, name, source):
    src = tmp_path / f"{name}.cc"
    src.write_text(source, encoding="utf-8")
    obj = tmp_path / "squeezekv_cache.dir" / "src" / module / f"{name}.cc.o"
    obj.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["g++", "-c", "-O1", str(src), "-o", str(obj)], check=True)
    return obj


def run_check(*objects):
    return subprocess.run([sys.executable, str(SCRIPT), "--layers", str(LAYERS), *map(str, objects)],
                          capture_output=True, text=True)


def test_a_call_up_to_a_higher_layer_fails_naming_both_files(tmp_path):
    caller = compile_object(tmp_path, "policy", "caller", "int resolve(int); int use(int x) { return resolve(x) + 1; }\n")
    callee = compile_object(tmp_path, "methods", "callee", "int resolve(int x) { return 2 * x; }\n")
    result = run_check(caller, callee)
    assert result.returncode == 1
    assert "src/policy/caller.cc (policy) uses resolve(int), defined in src/methods/callee.cc (methods)" in result.stderr


def test_calls_down_and_inline_functions_pass(tmp_path):
    caller = compile_object(tmp_path, "methods", "caller", "int resolve(int); int use(int x) { return resolve(x); }\n")
    callee = compile_object(tmp_path, "policy", "callee", "int resolve(int x) { return 2 * x; }\n")
    # An inline function defined (weakly) in both objects binds neither layer to the other.
    shared = "inline int twice(int x) { return 2 * x; } int (*keep_%s)(int) = twice;\n"
    low = compile_object(tmp_path, "core", "low", shared % "low")
    high = compile_object(tmp_path, "cache", "high", shared % "high")
    assert run_check(caller, callee, low, high).returncode == 0


def test_a_folder_without_a_layer_is_an_error(tmp_path):
    stray = compile_object(tmp_path, "gizmo", "stray", "int stray() { return 1; }\n")
    result = run_check(stray)
    assert result.returncode != 0
    assert "gizmo" in (result.stderr + result.stdout)
