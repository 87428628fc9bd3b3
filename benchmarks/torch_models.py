"""Hand-written PyTorch twins of ``examples/resnet50`` and ``examples/bert``: the same
layers, shapes and formulas, with parameters and buffers keyed by OneFlow-Benchmark's
variable names (so graphfront's initial values load one to one), for the benchmarks and
for the tests that check graphfront's steps against PyTorch eager.

Layouts follow the examples': BERT's dense weights are ``(in, out)`` (``x @ W + b``), its
next-sentence weights ``(2, H)``; ResNet's ``fc1001-weight`` is ``(units, in)``
(``flow.layers.dense``) and its convolution weights ``(out, in, k, k)``.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

RESNET50_BLOCKS = [3, 4, 6, 3]
_FILTERS = [256, 512, 1024, 2048]
_INNER = [64, 128, 256, 512]


class _Named(nn.Module):
    """The tensors ``names`` of ``values`` (other entries, such as optimizer state, are
    ignored) as parameters, or buffers where ``trainable(name)`` is false, under their
    OneFlow names (``-`` allowed, ``.`` not)."""

    def __init__(self, values: dict, names, trainable):
        super().__init__()
        self.p = nn.ParameterDict()
        missing = [n for n in names if n not in values]
        if missing:
            raise KeyError(f"values lack {len(missing)} tensors of the model, e.g. {missing[:3]}")
        for name in names:
            t = torch.as_tensor(values[name]).clone()
            if trainable(name):
                self.p[name] = nn.Parameter(t)
            else:
                self.register_buffer(name, t)

    def __getitem__(self, name):
        return self.p[name] if name in self.p else getattr(self, name)


# ----------------------------------------------------------------------------- ResNet-50 v1.5

def resnet_variable_names(block_counts=RESNET50_BLOCKS):
    """``(conv names, bn names)`` of the network's layers, in order."""
    convs, bns = ["conv1"], ["conv1_bn"]
    for s, count in enumerate(block_counts):
        for i in range(count):
            block = f"res{s + 2}_{i}"
            if i == 0:
                convs.append(block + "_branch1")
                bns.append(block + "_branch1_bn")
            for br in ("2a", "2b", "2c"):
                convs.append(f"{block}_branch{br}")
                bns.append(f"{block}_branch{br}_bn")
    return convs, bns


def oihw_weights(values, block_counts=RESNET50_BLOCKS):
    """``values`` with the convolution weights of graphfront's NHWC model (OneFlow's
    ``(out, k, k, in)`` of ``--channel_last``) as PyTorch's ``(out, in, k, k)``."""
    convs, _ = resnet_variable_names(block_counts)
    return {**values, **{c + "-weight": values[c + "-weight"].transpose(0, 3, 1, 2) for c in convs}}


def _same_lower(size, k, stride):
    """``(before, after)`` padding of OneFlow's "SAME" (SAME_LOWER: the larger half before)."""
    total = max((-(-size // stride) - 1) * stride + k - size, 0)
    return total - total // 2, total // 2


class TorchResNet50(nn.Module):
    """ResNet-50 v1.5 (stride on the 3x3 convolution) over OneFlow-named tensors.

    ``values``: name -> array for every ``*-weight``, ``*_bn-gamma/beta/moving_mean/
    moving_variance`` and ``fc1001-weight`` / ``-bias`` (``flow.layers.dense``'s weight is
    ``(units, in)``). Batch norm: momentum 0.9 in OneFlow's sense (torch momentum 0.1),
    epsilon 1e-5; "SAME" padding is OneFlow's SAME_LOWER (an odd total pads one more
    before than after).
    """

    def __init__(self, values, block_counts=RESNET50_BLOCKS):
        super().__init__()
        self.block_counts = list(block_counts)
        convs, bns = resnet_variable_names(block_counts)
        names = [c + "-weight" for c in convs] + [f"{b}-{f}" for b in bns
                                                  for f in ("gamma", "beta", "moving_mean", "moving_variance")]
        self.v = _Named(values, names + ["fc1001-weight", "fc1001-bias"],
                        lambda n: not n.endswith(("moving_mean", "moving_variance")))

    def _conv(self, x, name, stride):
        w = self.v[name + "-weight"]
        lo, hi = _same_lower(x.shape[-1], w.shape[-1], stride)
        if lo == hi:
            return F.conv2d(x, w, None, stride, lo)
        return F.conv2d(F.pad(x, (lo, hi, lo, hi)), w, None, stride)

    def _bn(self, x, name):
        v = self.v
        return F.batch_norm(x, v[name + "-moving_mean"], v[name + "-moving_variance"], v[name + "-gamma"],
                            v[name + "-beta"], self.training, 0.1, 1e-5)

    def forward(self, x):
        x = F.relu(self._bn(self._conv(x, "conv1", 2), "conv1_bn"))
        lo, hi = _same_lower(x.shape[-1], 3, 2)
        x = F.max_pool2d(F.pad(x, (lo, hi, lo, hi), value=float("-inf")), 3, 2)
        for s, count in enumerate(self.block_counts):
            for i in range(count):
                block = f"res{s + 2}_{i}"
                stride = 2 if (i == 0 and s > 0) else 1
                shortcut = x
                if i == 0:
                    shortcut = self._bn(self._conv(x, block + "_branch1", stride), block + "_branch1_bn")
                y = F.relu(self._bn(self._conv(x, block + "_branch2a", 1), block + "_branch2a_bn"))
                y = F.relu(self._bn(self._conv(y, block + "_branch2b", stride), block + "_branch2b_bn"))
                y = self._bn(self._conv(y, block + "_branch2c", 1), block + "_branch2c_bn")
                x = F.relu(y + shortcut)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return x @ self.v["fc1001-weight"].t() + self.v["fc1001-bias"]


def smoothed_cross_entropy(logits, labels, classes, eta):
    """Mean softmax cross entropy against one-hot labels smoothed as OneFlow-Benchmark does
    (on ``1 - eta + eta / classes``, off ``eta / classes``)."""
    target = torch.full_like(logits, eta / classes, dtype=torch.float32)
    target.scatter_(1, labels.long().view(-1, 1), 1 - eta + eta / classes)
    return -(target * F.log_softmax(logits.float(), dim=1)).sum(1).mean()


# ----------------------------------------------------------------------------- BERT

def bert_variable_names(num_layers):
    """The variable names of BERT pretraining (OneFlow-Benchmark's), in order."""
    def dense(n):
        return [n + "-weight", n + "-bias"]

    def ln(n):
        return [n + "-gamma", n + "-beta"]
    e = "bert-embeddings-"
    names = [e + "word_embeddings", e + "token_type_embeddings", e + "position_embeddings"] + ln(e + "LayerNorm")
    for i in range(num_layers):
        p = f"bert-encoder-layer_{i}-"
        for n in ("attention-self-query", "attention-self-key", "attention-self-value", "attention-output-dense"):
            names += dense(p + n)
        names += ln(p + "attention-output-LayerNorm") + dense(p + "intermediate-dense") + dense(p + "output-dense")
        names += ln(p + "output-LayerNorm")
    names += dense("cls-predictions-transform-dense") + ln("cls-predictions-transform-LayerNorm")
    names += ["cls-predictions-output_bias"] + dense("bert-pooler-dense")
    return names + ["cls-seq_relationship-output_weights", "cls-seq_relationship-output_bias"]


class TorchBertPretrain(nn.Module):
    """BERT pretraining (masked-LM head on the gathered positions with the decoder tied
    to the word embeddings, next-sentence head, attention by ``F.scaled_dot_product_attention``)
    over OneFlow-Benchmark-named tensors;
    ``forward`` returns ``(total_loss, mlm_loss, nsp_loss)`` with OneFlow-Benchmark's
    masked-LM normalisation (per-example sum of weighted losses over the batch mean of
    the weight sums)."""

    def __init__(self, values, num_layers, num_heads, dropout=0.1, eps=1e-5):
        super().__init__()
        self.v = _Named(values, bert_variable_names(num_layers), lambda n: True)
        self.layers, self.heads, self.dropout, self.eps = num_layers, num_heads, dropout, eps

    def _dense(self, x, name):
        return x @ self.v[name + "-weight"] + self.v[name + "-bias"]

    def _ln(self, x, name):
        return F.layer_norm(x, x.shape[-1:], self.v[name + "-gamma"], self.v[name + "-beta"], self.eps)

    def _drop(self, x):
        return F.dropout(x, self.dropout, self.training) if self.dropout else x

    def forward(self, input_ids, next_sentence_labels, input_mask, segment_ids, masked_lm_ids,
                masked_lm_positions, masked_lm_weights):
        v, (b, s) = self.v, input_ids.shape
        table = v["bert-embeddings-word_embeddings"]
        h = F.embedding(input_ids.long(), table) + F.embedding(segment_ids.long(),
                                                               v["bert-embeddings-token_type_embeddings"])
        h = h + v["bert-embeddings-position_embeddings"][:, :s]
        h = self._drop(self._ln(h, "bert-embeddings-LayerNorm")).reshape(b * s, -1)
        width = h.shape[-1]
        d = width // self.heads
        bias = ((input_mask.float() - 1.0) * 10000.0).view(b, 1, 1, s)
        for i in range(self.layers):
            p = f"bert-encoder-layer_{i}-"

            def heads(t):
                return t.view(b, s, self.heads, d).transpose(1, 2)
            q, k, val = (heads(self._dense(h, p + "attention-self-" + n)) for n in ("query", "key", "value"))
            # PyTorch's fused attention (flash / memory-efficient kernels on a GPU), as
            # transformers' BertModel runs it by default
            ctx = F.scaled_dot_product_attention(q, k, val, attn_mask=bias.to(q.dtype),
                                                 dropout_p=self.dropout if self.training else 0.0,
                                                 scale=1.0 / math.sqrt(d)).transpose(1, 2).reshape(b * s, width)
            a = self._ln(self._drop(self._dense(ctx, p + "attention-output-dense")) + h,
                         p + "attention-output-LayerNorm")
            inter = F.gelu(self._dense(a, p + "intermediate-dense"))
            h = self._ln(self._drop(self._dense(inter, p + "output-dense")) + a, p + "output-LayerNorm")
        seq = h.view(b, s, width)
        # masked LM
        pos = masked_lm_positions.long()
        x = torch.gather(seq, 1, pos.unsqueeze(-1).expand(-1, -1, width)).reshape(-1, width)
        x = self._ln(F.gelu(self._dense(x, "cls-predictions-transform-dense")),
                     "cls-predictions-transform-LayerNorm")
        logits = x @ table.t() + v["cls-predictions-output_bias"]
        per = F.cross_entropy(logits.float(), masked_lm_ids.reshape(-1).long(), reduction="none").view(b, -1)
        weights = masked_lm_weights.float()
        mlm = ((per * weights).sum(-1) / (weights.sum() / b + 1e-5)).mean()
        # next sentence
        pooled = torch.tanh(self._dense(seq[:, 0], "bert-pooler-dense"))
        nsp_logits = pooled @ v["cls-seq_relationship-output_weights"].t() + v["cls-seq_relationship-output_bias"]
        nsp = F.cross_entropy(nsp_logits.float(), next_sentence_labels.reshape(-1).long())
        return mlm + nsp, mlm, nsp


def oneflow_adamw_step(params, grads, state, lr, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=None,
                       clip_norm=None):
    """One update of OneFlow's AdamW as graphfront's ``adam_update`` does it, on tensors:
    optional global-norm clipping (factor ``min(1, clip / norm)``), moments without bias
    correction, ``w -= lr * m / (sqrt(v) + eps) + lr * wd * w``. ``weight_decay(name)``
    gives each parameter's rate; ``state`` keeps the moments between calls."""
    with torch.no_grad():
        if clip_norm is not None:
            norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values()))
            factor = min(1.0, clip_norm / float(norm)) if float(norm) > 0 else 1.0
            grads = {n: g * factor for n, g in grads.items()}
        for name, w in params.items():
            g = grads[name]
            m, v = state.setdefault(name, (torch.zeros_like(w), torch.zeros_like(w)))
            m.mul_(beta1).add_(g, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            wd = weight_decay(name) if weight_decay else 0.0
            w.sub_(lr * (m / (v.sqrt() + eps)) + lr * wd * w)
