"""BERT pretraining on a fixed synthetic batch, as OneFlow-Benchmark's ``run_pretraining.py``
(its data reader replaced by a random batch shaped as its decoder gives it).

    python examples/bert/train.py --use_fp16 --iter_num 1000                 # BERT-base, seq 128, on the GPU
    python examples/bert/train.py --device cpu --layers 2 --num_attention_heads 2 \\
        --batch-size 8 --vocab_size 1000 --iter_num 40 --warmup_proportion 0   # a small one on the CPU

Prints the losses every ``--loss_print_every_n_iter`` steps, the number of updates applied
(a step whose float16 gradients overflow is skipped by dynamic loss scaling and not
counted) and the loss scale. The learning rate warms up linearly from 0 over
``iter_num * warmup_proportion`` steps, then decays polynomially to 0 at ``iter_num``:
with a long ``iter_num`` the first steps have a learning rate near 0 and the loss barely
moves.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import graphfront as flow  # noqa: E402
import pretrain  # noqa: E402


def main(argv=None):
    p = pretrain.add_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    p.add_argument("--steps", type=int, default=0, help="steps to run (0: iter_num)")
    p.add_argument("--model_save_dir", default=None, help="save the variables here after training")
    args = p.parse_args(argv)
    flow.manual_seed(0)
    steps = args.steps or args.iter_num
    warmup = int(args.iter_num * args.warmup_proportion)
    if warmup > steps // 2:
        print(f"note: the learning rate warms up from 0 over {warmup} steps; {steps} steps reach "
              f"{min(steps, warmup) / warmup:.1%} of it")
    job = pretrain.make_pretrain_job(args)
    feeds = pretrain.feeds(pretrain.synthetic_batch(args))
    every = args.loss_print_every_n_iter
    history, t0 = [], time.perf_counter()
    for step in range(1, steps + 1):
        out = job(*feeds)
        history.append([float(np.asarray(out[k]).reshape(-1)[0]) for k in ("total_loss", "mlm_loss", "nsp_loss")])
        if step % every == 0 or step == steps:
            dt = time.perf_counter() - t0
            total, mlm, nsp = np.mean(history[-every:], axis=0)
            vs = flow.get_all_variables()
            updates = int(vs["System-Train-TrainStep-PretrainJob"].numpy()[0])
            scale = vs.get("System-Train-DynamicLossScale-PretrainJob-LossScale")
            print(f"step {step}: total {total:.4f}, mlm {mlm:.4f}, nsp {nsp:.4f}, updates applied {updates}"
                  + (f", loss scale {float(scale.numpy()[0]):g}" if scale is not None else "")
                  + f", {every * pretrain.batch_size(args) / dt:.1f} samples/s", flush=True)
            t0 = time.perf_counter()
    if args.model_save_dir:
        flow.checkpoint.save(args.model_save_dir)
    return np.array(history)


if __name__ == "__main__":
    main()
