#!/usr/bin/env bash
# Installs squeezekv's build and test dependencies from Debian's packages (idempotent).
set -euo pipefail
packages=(
  g++ cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev   # tests and benchmarks
  libcli11-dev nlohmann-json3-dev              # command line, JSON output
  libhwy-dev                                   # portable SIMD with runtime dispatch
  libpcre2-dev                                 # Unicode-aware pre-tokenizer regexes
  python3 python3-dev pybind11-dev python3-numpy python3-pytest python3-matplotlib
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y --no-install-recommends "${missing[@]}"
fi
echo "setup: all dependencies present"
