#!/usr/bin/env bash
# A lent GPU's checks and measurements, one device `run` per part, most important first
# (every step under its own `timeout`, so a hang still returns the rest; a call made within
# 30 s of the last finds the machine warm). A session's 15 device minutes hold `bench` and
# `tests`, the two first calls:
#
#   bash benchmarks/gpu_session.sh bench        # ResNet-50 (NHWC; its first call compiles and times the fused
#                                               # batch norms' kernels) and BERT (plan, kernel profiles, against
#                                               # torch eager and torch.compile), LeNet b1000 against the peers
#                                               # (cuDNN timing its algorithms on every side): at most 8 minutes
#   bash benchmarks/gpu_session.sh tests        # the suite: at most 5.5 minutes (the cuda tests' first calls compile
#                                               # Inductor kernels)
#   bash benchmarks/gpu_session.sh more         # MLP and LeNet b100 against the peers, LeNet b1000 with cuDNN's
#                                               # heuristics (each side's default), LeNet b1000's kernels
#                                               # (graphfront, eager, compile), graphfront's LeNet b1000 in NHWC,
#                                               # BERT's plan without the fused attention, ResNet-50's with its
#                                               # batch norms unfused: about 8
#   bash benchmarks/gpu_session.sh native       # ResNet-50 native against torch.compile: about 5
#   bash benchmarks/gpu_session.sh native-bert  # BERT native against torch.compile: about 5
#
# Run from the project's root on the device machine, after `bash benchmarks/gpu_prepare.sh`
# here (carry [".gpu"]): its wheels are installed to /tmp/site and its Fashion-MNIST files
# where Debian puts them, and graphfront itself is installed editable into the device's python3
# (the venv /opt/torch/.venv; pip builds it offline from the build backend's wheels in .gpu/build),
# so that its distribution metadata is there, as after the README's install; the checkout is
# also first on PYTHONPATH. The suite runs as two processes at once: the cuda-marked tests in
# one, the README's test command without them under pytest-xdist (one torch thread per
# worker) in the other. Everything printed is written to $OUT/gpu_<part>.txt; the tests'
# full logs to $OUT/gpu_cuda_tests.txt and $OUT/gpu_tests.txt.
set -u
part=${1:-bench}
out=${OUT:-/tmp}
log=$out/gpu_$part.txt
root=$(pwd)
if compgen -G ".gpu/whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl >/dev/null 2>&1
fi
install=""
if compgen -G ".gpu/build/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --find-links .gpu/build --no-deps --no-cache-dir -e . >/tmp/gpu_install.txt 2>&1 \
    || install="graphfront's editable install failed (its distribution metadata is missing): $(tail -3 /tmp/gpu_install.txt)"
else
  install="no .gpu/build wheels (run benchmarks/gpu_prepare.sh here): graphfront is not installed, only on PYTHONPATH"
fi
if [[ -d .gpu/fashion-mnist && ! -d /usr/share/datasets/fashion-mnist ]]; then
  mkdir -p /usr/share/datasets && cp -r .gpu/fashion-mnist /usr/share/datasets/
fi
export PYTHONPATH=/tmp/site:$root${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
step() { local limit=$1; shift; echo "=== $* [+${SECONDS}s]"; timeout "$limit" "$@" 2>&1; echo "=== rc $? [+${SECONDS}s]"; }
tests() {
  timeout 330 python3 -m pytest -v -p no:cacheprovider -m cuda -rfEs --durations=8 tests/ >"$out/gpu_cuda_tests.txt" 2>&1 &
  echo "=== the suite without the cuda tests, 14 workers [+${SECONDS}s]"
  OMP_NUM_THREADS=1 timeout 240 python3 -m pytest -v -p no:cacheprovider -n 14 -rfE --tb=line --durations=15 -m "not cuda" >"$out/gpu_tests.txt" 2>&1
  echo "=== rc $? [+${SECONDS}s]"
  grep -E " (FAILED|ERROR) " "$out/gpu_tests.txt" | sed -E 's/^\[gw[0-9]+\] \[ *[0-9]+%\] //' | sort -u | head -150
  sed -n '/short test summary/,$p' "$out/gpu_tests.txt" | cut -c1-400 | tail -80
  grep -E "^[0-9.]+s (call|setup)" "$out/gpu_tests.txt" | head -15
  tail -1 "$out/gpu_tests.txt"
  wait
  echo "=== cuda tests [+${SECONDS}s]"
  grep -E " (FAILED|ERROR) |^E  |^FAILED|^ERROR|^SKIPPED|passed|failed|s call " "$out/gpu_cuda_tests.txt" | cut -c1-400 | tail -80
}
{
nvidia-smi -L
[[ -n $install ]] && echo "gpu_session: $install"
python3 -c "import torch, google.protobuf as p; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'protobuf', p.__version__)"
case $part in
  bench)
    step 300 python3 benchmarks/resnet50.py --device gpu --modes plan --rounds 2 --profile 2
    step 120 python3 benchmarks/bert_pretrain.py --device gpu --modes plan --rounds 2 --profile 2
    step 60 python3 benchmarks/peers.py --device gpu --workloads lenet_train --lenet-batch 1000 --rounds 3 --steps 20 \
      --only graphfront-plan,torch-compile-ro,jax-jit --cudnn-benchmark ;;
  tests)
    tests ;;
  more)
    step 150 python3 benchmarks/peers.py --device gpu --workloads mlp_train,lenet_train --rounds 3 --steps 30 \
      --only graphfront-plan,torch-eager,torch-compile-ro,jax-jit
    step 60 python3 benchmarks/peers.py --device gpu --workloads lenet_train --lenet-batch 1000 --rounds 3 --steps 20 \
      --only graphfront-plan,torch-compile-ro,jax-jit
    step 90 python3 benchmarks/lenet_step.py --device gpu --batch 1000 --steps 20 --profile 3
    step 60 python3 benchmarks/lenet_step.py --device gpu --batch 1000 --steps 20 --channel-last
    step 80 python3 benchmarks/resnet50.py --device gpu --modes plan --only graphfront-plan --no-fused-bn --rounds 2
    step 60 python3 benchmarks/bert_pretrain.py --device gpu --modes plan --only graphfront-plan --no-fused-attention \
      --rounds 2 ;;
  native)
    step 300 python3 benchmarks/resnet50.py --device gpu --modes native --only graphfront-native,torch-compile --rounds 2 ;;
  native-bert)
    step 300 python3 benchmarks/bert_pretrain.py --device gpu --modes native --only graphfront-native,torch-compile --rounds 2 ;;
  *) echo "usage: bash benchmarks/gpu_session.sh bench|tests|more|native|native-bert"; exit 2 ;;
esac
echo "=== end [+${SECONDS}s]"
} 2>&1 | tee "$log"
