"""BERT pretraining heads and job, in OneFlow-Benchmark's layout (``LanguageModeling/BERT/
pretrain.py``, ``run_pretraining.py`` and ``util.py``): the masked-LM head on the gathered
masked positions with the decoder tied to the word embeddings (variables ``cls-predictions-
transform-dense-weight``, ``cls-predictions-output_bias`` ...), the next-sentence head
(``cls-seq_relationship-output_weights`` / ``-output_bias``), AdamW with linear warmup,
polynomial decay, global-norm clipping at 1.0 and, with ``use_fp16``, AMP with dynamic
loss scaling.

Batch (all int32 but ``masked_lm_weights``, float32), ``B`` = batch size, ``S`` = sequence
length, ``P`` = max predictions per sequence: ``input_ids``, ``input_mask``,
``segment_ids`` ``(B, S)``; ``masked_lm_positions``, ``masked_lm_ids``,
``masked_lm_weights`` ``(B, P)``; ``next_sentence_labels`` ``(B, 1)``.
"""
import os
import sys
import typing

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import graphfront as flow  # noqa: E402
from graphfront import typing as tp  # noqa: E402
import bert as bert_util  # noqa: E402

BLOBS = ("input_ids", "next_sentence_labels", "input_mask", "segment_ids", "masked_lm_ids",
         "masked_lm_positions", "masked_lm_weights")


def PreTrain(input_ids_blob, input_mask_blob, token_type_ids_blob, masked_lm_positions_blob,  # noqa: N802
             masked_lm_ids_blob, masked_lm_weights_blob, next_sentence_label_blob, vocab_size, seq_length=512,
             hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
             hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
             max_position_embeddings=512, type_vocab_size=16, max_predictions_per_seq=20,
             initializer_range=0.02):
    """``(total_loss, mlm_loss, nsp_loss)``, each a float32 scalar blob of shape (1,)."""
    backbone = bert_util.BertBackbone(
        input_ids_blob, input_mask_blob, token_type_ids_blob, vocab_size, seq_length, hidden_size,
        num_hidden_layers, num_attention_heads, intermediate_size, hidden_act, hidden_dropout_prob,
        attention_probs_dropout_prob, max_position_embeddings, type_vocab_size, initializer_range)
    lm_loss, _, _ = _AddMaskedLanguageModelLoss(
        backbone.sequence_output(), backbone.embedding_table(), masked_lm_positions_blob, masked_lm_ids_blob,
        masked_lm_weights_blob, hidden_size, vocab_size, max_predictions_per_seq,
        bert_util.GetActivation(hidden_act), initializer_range)
    pooled_output = PooledOutput(backbone.sequence_output(), hidden_size, initializer_range)
    ns_loss, _, _ = _AddNextSentenceOutput(pooled_output, next_sentence_label_blob, hidden_size, initializer_range)
    with flow.scope.namespace("cls-loss"):
        lm_loss = flow.math.reduce_mean(lm_loss)
        ns_loss = flow.math.reduce_mean(ns_loss)
        total_loss = lm_loss + ns_loss
    return total_loss, lm_loss, ns_loss


def PooledOutput(sequence_output, hidden_size, initializer_range):  # noqa: N802
    with flow.scope.namespace("bert-pooler"):
        first_token = flow.slice(sequence_output, [None, 0, 0], [None, 1, -1])
        first_token = flow.reshape(first_token, [-1, hidden_size])
        pooled = bert_util._FullyConnected(first_token, hidden_size, hidden_size, "dense",
                                           bert_util.CreateInitializer(initializer_range))
        return flow.math.tanh(pooled)


def _AddMaskedLanguageModelLoss(input_blob, output_weights_blob, positions_blob, label_id_blob,  # noqa: N802
                                label_weight_blob, hidden_size, vocab_size, max_predictions_per_seq, hidden_act,
                                initializer_range):
    with flow.scope.namespace("other"):
        sum_label_weight = flow.math.reduce_sum(label_weight_blob, axis=[-1])
        ones = sum_label_weight * 0.0 + 1.0
        sum_label_weight = flow.math.reduce_sum(sum_label_weight)
        batch_size = flow.math.reduce_sum(ones)
        sum_label_weight = sum_label_weight / batch_size
    with flow.scope.namespace("cls-predictions"):
        input_blob = _GatherIndexes(input_blob, positions_blob, hidden_size)
        with flow.scope.namespace("transform"):
            input_blob = bert_util._FullyConnected(input_blob, hidden_size, hidden_size, "dense",
                                                   bert_util.CreateInitializer(initializer_range))
            if hidden_act is not None:
                input_blob = hidden_act(input_blob)
            input_blob = bert_util._LayerNorm(input_blob, hidden_size)
        output_bias = flow.get_variable(name="output_bias", shape=[vocab_size], dtype=input_blob.dtype,
                                        initializer=flow.constant_initializer(1.0))
        logits = flow.matmul(input_blob, output_weights_blob, transpose_b=True)
        logits = flow.nn.bias_add(logits, output_bias)
        label_id_blob = flow.reshape(label_id_blob, [-1])
        pre_example_loss = flow.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label_id_blob)
        pre_example_loss = flow.reshape(pre_example_loss, [-1, max_predictions_per_seq])
        numerator = pre_example_loss * label_weight_blob
        with flow.scope.namespace("loss"):
            numerator = flow.math.reduce_sum(numerator, axis=[-1])
            denominator = sum_label_weight + 1e-5
            loss = numerator / denominator
        return loss, pre_example_loss, logits


def _GatherIndexes(sequence_blob, positions_blob, hidden_size):  # noqa: N802
    output = flow.gather(params=sequence_blob, indices=positions_blob, axis=2, batch_dims=2)
    return flow.reshape(output, [-1, hidden_size])


def _AddNextSentenceOutput(input_blob, label_blob, hidden_size, initializer_range):  # noqa: N802
    with flow.scope.namespace("cls-seq_relationship"):
        weight = flow.get_variable(name="output_weights", shape=[2, hidden_size], dtype=input_blob.dtype,
                                   initializer=bert_util.CreateInitializer(initializer_range))
        bias = flow.get_variable(name="output_bias", shape=[2], dtype=input_blob.dtype,
                                 initializer=flow.constant_initializer(0.0))
        logits = flow.nn.bias_add(flow.matmul(input_blob, weight, transpose_b=True), bias)
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label_blob)
        return loss, loss, logits


def CreateOptimizer(args):  # noqa: N802
    """AdamW (epsilon 1e-6, decoupled weight decay except biases and LayerNorm), linear
    warmup over ``warmup_proportion`` of ``iter_num`` from 0, polynomial decay to 0,
    global-norm clipping at 1.0, dynamic loss scaling with ``use_fp16``."""
    warmup_batches = int(args.iter_num * args.warmup_proportion)
    lr_warmup = flow.optimizer.warmup.linear(warmup_batches, 0)
    lr_scheduler = flow.optimizer.PolynomialScheduler(args.learning_rate, args.iter_num, 0.0, warmup=lr_warmup)
    loss_scale_policy = None
    if args.use_fp16:
        loss_scale_policy = flow.optimizer.loss_scale.dynamic_loss_scale(increment_period=2000)
    return flow.optimizer.AdamW(lr_scheduler, epsilon=1e-6, weight_decay=args.weight_decay_rate,
                                weight_decay_excludes=["bias", "LayerNorm", "layer_norm"],
                                grad_clipping=flow.optimizer.grad_clipping.by_global_norm(1.0),
                                loss_scale_policy=loss_scale_policy)


def GetFunctionConfig(args):  # noqa: N802
    n = args.gpu_num_per_node
    if n > 1:
        (flow.config.gpu_device_num if args.device == "gpu" else flow.config.cpu_device_num)(n)
    config = flow.FunctionConfig()
    config.default_placement_scope(flow.scope.placement(args.device, devices(args)))  # the whole job, its feeds too
    config.enable_auto_mixed_precision(args.use_fp16)
    if getattr(args, "amp_dtype", None):
        config.mixed_precision_data_type(args.amp_dtype)
    if getattr(args, "compile_mode", None):
        config.compile_mode(args.compile_mode)
    if getattr(args, "disabled_passes", ()):
        flow.passes.disable_passes(config, *args.disabled_passes)
    return config


def add_arguments(parser):
    """OneFlow-Benchmark's BERT flags (``config.py``), defaults for BERT-base at sequence 128."""
    a = parser.add_argument
    a("--batch_size_per_device", "--batch-size", type=int, default=32)
    a("--learning_rate", type=float, default=1e-4)
    a("--weight_decay_rate", type=float, default=0.01)
    a("--iter_num", type=int, default=1000, help="total train steps (sets the warmup and the decay)")
    a("--warmup_proportion", type=float, default=0.1)
    a("--loss_print_every_n_iter", type=int, default=10)
    a("--use_fp16", action="store_true", help="AMP (float16 on a GPU, bfloat16 on a CPU) with dynamic loss scaling")
    a("--seq_length", type=int, default=128)
    a("--max_predictions_per_seq", type=int, default=20)
    a("--num_hidden_layers", "--layers", type=int, default=12)
    a("--num_attention_heads", type=int, default=12)
    a("--hidden_size_per_head", type=int, default=64)
    a("--max_position_embeddings", type=int, default=512)
    a("--type_vocab_size", type=int, default=2)
    a("--vocab_size", type=int, default=30522)
    a("--attention_probs_dropout_prob", type=float, default=0.1)
    a("--hidden_dropout_prob", type=float, default=0.1)
    a("--device", choices=["cpu", "gpu"], default="gpu")
    a("--gpu_num_per_node", type=int, default=1,
      help="devices the job runs on, data parallel (with --device cpu: CPU devices)")
    return parser


def devices(args):
    """The placement's device ids on this machine, ``"0:0-<n-1>"``."""
    return f"0:0-{args.gpu_num_per_node - 1}"


def batch_size(args):
    """The job's batch: ``batch_size_per_device`` on each of its devices."""
    return args.batch_size_per_device * args.gpu_num_per_node


def synthetic_batch(args, seed=0):
    """A random pretraining batch (numpy) shaped as OneFlow-Benchmark's BERT decoder gives it."""
    rng = np.random.default_rng(seed)
    b, s, p = batch_size(args), args.seq_length, args.max_predictions_per_seq
    if p > s:
        raise ValueError(f"max_predictions_per_seq {p} exceeds seq_length {s}")
    lengths = rng.integers(max(s // 2, p), s + 1, b)   # real tokens per sequence, the rest padding
    mask = (np.arange(s)[None, :] < lengths[:, None]).astype(np.int32)
    positions = np.stack([np.sort(rng.choice(n, p, replace=False)) for n in lengths]).astype(np.int32)
    return {
        "input_ids": (rng.integers(0, args.vocab_size, (b, s)) * mask).astype(np.int32),
        "next_sentence_labels": rng.integers(0, 2, (b, 1)).astype(np.int32),
        "input_mask": mask,
        "segment_ids": ((np.arange(s)[None, :] >= lengths[:, None] // 2) * mask).astype(np.int32),
        "masked_lm_ids": rng.integers(0, args.vocab_size, (b, p)).astype(np.int32),
        "masked_lm_positions": positions,
        "masked_lm_weights": np.ones((b, p), np.float32),
    }


def feeds(batch):
    """The job's positional arguments (in ``BLOBS`` order) from a batch dict."""
    return [batch[k] for k in BLOBS]


def make_pretrain_job(args, name="PretrainJob"):
    """The train job ``f(*feeds(batch)) -> {"total_loss", "mlm_loss", "nsp_loss"}``
    (numpy (1,) each). The hidden size is ``hidden_size_per_head * num_attention_heads``."""
    b, s, p = batch_size(args), args.seq_length, args.max_predictions_per_seq
    hidden_size = args.hidden_size_per_head * args.num_attention_heads
    i32 = flow.int32

    def job(input_ids: tp.Numpy.Placeholder((b, s), dtype=i32),
            next_sentence_labels: tp.Numpy.Placeholder((b, 1), dtype=i32),
            input_mask: tp.Numpy.Placeholder((b, s), dtype=i32),
            segment_ids: tp.Numpy.Placeholder((b, s), dtype=i32),
            masked_lm_ids: tp.Numpy.Placeholder((b, p), dtype=i32),
            masked_lm_positions: tp.Numpy.Placeholder((b, p), dtype=i32),
            masked_lm_weights: tp.Numpy.Placeholder((b, p), dtype=flow.float)) -> typing.Dict[str, tp.Numpy]:
        with flow.scope.placement(args.device, devices(args)):
            total_loss, mlm_loss, nsp_loss = PreTrain(
                input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids, masked_lm_weights,
                next_sentence_labels, args.vocab_size, seq_length=s, hidden_size=hidden_size,
                num_hidden_layers=args.num_hidden_layers, num_attention_heads=args.num_attention_heads,
                intermediate_size=hidden_size * 4, hidden_act="gelu",
                hidden_dropout_prob=args.hidden_dropout_prob,
                attention_probs_dropout_prob=args.attention_probs_dropout_prob,
                max_position_embeddings=args.max_position_embeddings, type_vocab_size=args.type_vocab_size,
                max_predictions_per_seq=p, initializer_range=0.02)
        CreateOptimizer(args).minimize(total_loss)
        return {"total_loss": total_loss, "mlm_loss": mlm_loss, "nsp_loss": nsp_loss}

    job.__name__ = name
    return flow.global_function(type="train", function_config=GetFunctionConfig(args))(job)
