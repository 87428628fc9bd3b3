#!/usr/bin/env bash
# A lent GPU's measurements, one device `run` per part (each under nine minutes; every
# step under its own `timeout`, so a hang still returns the rest), most important first:
#
#   bash benchmarks/gpu_session.sh tests    # the cuda-marked tests, then the rest of the suite
#   bash benchmarks/gpu_session.sh bench    # ResNet-50, BERT (plan, kernel profiles), MLP and LeNet against the peers
#   bash benchmarks/gpu_session.sh native   # ResNet-50 and BERT: the native lowering against torch.compile
#   bash benchmarks/gpu_session.sh all      # one call: the cuda tests beside the rest of the suite (pytest-xdist),
#                                           # then ResNet-50 and BERT (plan, native, the PyTorch peers)
#
# Run from the project's root on the device machine, after the GPU kit was prepared here
# (its `.gpu/whl` wheels are installed to /tmp/site when present, and its `.gpu/stub` holds the
# bundled MNIST digits that the device's Python lacks, as the kit's check.sh does).
# Everything printed is written to $OUT/gpu_<part>.txt (shown here without the passed and
# skipped tests' lines, the failed ones listed again at the end).
set -u
part=${1:-tests}
log=${OUT:-/tmp}/gpu_$part.txt
root=$(pwd)
if compgen -G ".gpu/whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl >/dev/null 2>&1
fi
export PYTHONPATH=/tmp/site:$root:$root/.gpu/stub${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
step() { local limit=$1; shift; echo "=== $* [+${SECONDS}s]"; timeout "$limit" "$@" 2>&1; echo "=== rc $? [+${SECONDS}s]"; }
{
nvidia-smi -L
python3 -c "import torch, google.protobuf as p; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'protobuf', p.__version__)"
case $part in
  tests)
    # -v: each test's outcome is printed when it ends, so a step cut off by its timeout
    # still shows which tests failed (listed again at the end of this script)
    step 150 python3 -m pytest -v -p no:cacheprovider -m cuda -rfs tests/
    step 330 python3 -m pytest -v -p no:cacheprovider --maxfail=100 -rf -m "not cuda" tests/ ;;
  bench)
    step 170 python3 benchmarks/resnet50.py --device gpu --modes plan --rounds 2 --profile 3
    step 130 python3 benchmarks/bert_pretrain.py --device gpu --modes plan --rounds 2 --profile 3
    step 150 python3 benchmarks/peers.py --device gpu --workloads mlp_train,lenet_train --rounds 3 --steps 30 \
      --only graphfront-plan,torch-eager,torch-compile-ro,jax-jit
    step 60 python3 benchmarks/peers.py --device gpu --workloads lenet_train --lenet-batch 1000 --rounds 3 --steps 20 \
      --only graphfront-plan,torch-compile-ro,jax-jit ;;
  all)
    # the cuda-marked tests (one process) beside the README's test command without them (pytest-xdist,
    # which the device's image has); timings come after, on an idle machine
    timeout 170 python3 -m pytest -v -p no:cacheprovider -m cuda -rfs --durations=8 tests/ >"${OUT:-/tmp}/gpu_cuda_tests.txt" 2>&1 &
    step 170 python3 -m pytest -q -p no:cacheprovider -n 12 --maxfail=200 -rf --durations=12 -m "not cuda"
    wait
    echo "=== cuda tests:"; grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|Error|error:|slowest|s call" "${OUT:-/tmp}/gpu_cuda_tests.txt" | grep -v "^tests/.* PASSED" | tail -60
    step 170 python3 benchmarks/resnet50.py --device gpu --modes plan,native --rounds 2 --profile 2
    step 120 python3 benchmarks/bert_pretrain.py --device gpu --modes plan,native --rounds 2 --profile 2 ;;
  native)
    step 240 python3 benchmarks/resnet50.py --device gpu --modes native --only graphfront-native,torch-compile --rounds 2
    step 240 python3 benchmarks/bert_pretrain.py --device gpu --modes native --only graphfront-native,torch-compile --rounds 2 ;;
  *) echo "usage: bash benchmarks/gpu_session.sh tests|bench|native"; exit 2 ;;
esac
echo "=== end [+${SECONDS}s]"
} 2>&1 | tee "$log" | grep -v -E " (PASSED|SKIPPED) "
if [[ $part == tests ]]; then
  echo "=== failed or errored:"
  grep -E "FAILED|ERROR" "$log" | sort -u | head -120
fi
