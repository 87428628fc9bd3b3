"""BERT backbone written with graphfront's OneFlow API, in OneFlow-Benchmark's layout.

The layout and the variable names are those of OneFlow-Benchmark's
``LanguageModeling/BERT/bert.py``: ``flow.scope.namespace`` joins names with ``-``, so
the checkpoint holds ``bert-embeddings-word_embeddings``,
``bert-encoder-layer_0-attention-self-query-weight`` / ``-bias``,
``bert-encoder-layer_0-attention-output-LayerNorm-gamma`` / ``-beta``,
``bert-encoder-layer_0-intermediate-dense-weight`` ... (the names OneFlow-Benchmark's
TF-checkpoint converter writes for ``bert/encoder/layer_0/attention/self/query/kernel``).

Shapes: ``input_ids``, ``input_mask`` and ``token_type_ids`` are int32 ``(B, S)``; the
sequence output is ``(B, S, H)``. Dense weights are ``(in, out)`` and applied as
``x @ W + b`` on ``(B*S, H)`` rows.
"""
import math

import graphfront as flow


def CreateInitializer(std):  # noqa: N802 - OneFlow-Benchmark's name
    return flow.truncated_normal(std)


def GetActivation(name):  # noqa: N802
    acts = {"linear": None, "relu": flow.math.relu, "tanh": flow.math.tanh, "gelu": flow.math.gelu}
    if name not in acts:
        raise ValueError(f"unsupported activation {name!r}; expected one of {sorted(acts)}")
    return acts[name]


class BertBackbone:
    """Embeddings + ``num_hidden_layers`` transformer layers under ``bert-``."""

    def __init__(self, input_ids_blob, input_mask_blob, token_type_ids_blob, vocab_size, seq_length=512,
                 hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                 hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                 max_position_embeddings=512, type_vocab_size=16, initializer_range=0.02):
        with flow.scope.namespace("bert"):
            with flow.scope.namespace("embeddings"):
                self.embedding_output_, self.embedding_table_ = _EmbeddingLookup(
                    input_ids_blob, vocab_size, hidden_size, initializer_range, "word_embeddings")
                self.embedding_output_ = _EmbeddingPostprocessor(
                    self.embedding_output_, seq_length, hidden_size, token_type_ids_blob, type_vocab_size,
                    initializer_range, max_position_embeddings, hidden_dropout_prob)
            with flow.scope.namespace("encoder"):
                mask = _CreateAttentionMaskFromInputMask(input_mask_blob, seq_length, seq_length)
                self.all_encoder_layers_ = _TransformerModel(
                    self.embedding_output_, mask, seq_length, hidden_size, num_hidden_layers,
                    num_attention_heads, intermediate_size, GetActivation(hidden_act), hidden_dropout_prob,
                    attention_probs_dropout_prob, initializer_range)
            self.sequence_output_ = self.all_encoder_layers_[-1]

    def embedding_output(self):
        return self.embedding_output_

    def all_encoder_layers(self):
        return self.all_encoder_layers_

    def sequence_output(self):
        return self.sequence_output_

    def embedding_table(self):
        return self.embedding_table_


def _TransformerModel(input_blob, attention_mask_blob, seq_length, hidden_size, num_hidden_layers,  # noqa: N802
                      num_attention_heads, intermediate_size, intermediate_act_fn, hidden_dropout_prob,
                      attention_probs_dropout_prob, initializer_range):
    if hidden_size % num_attention_heads:
        raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_attention_heads {num_attention_heads}")
    head_size = hidden_size // num_attention_heads
    prev = flow.reshape(input_blob, (-1, hidden_size))
    for layer_idx in range(num_hidden_layers):
        with flow.scope.namespace("layer_%d" % layer_idx):
            layer_input = prev
            with flow.scope.namespace("attention"):
                with flow.scope.namespace("self"):
                    attention = _AttentionLayer(layer_input, layer_input, attention_mask_blob, num_attention_heads,
                                                head_size, attention_probs_dropout_prob, initializer_range,
                                                seq_length, seq_length)
                with flow.scope.namespace("output"):
                    attention = _FullyConnected(attention, hidden_size, hidden_size, "dense",
                                                CreateInitializer(initializer_range))
                    attention = _Dropout(attention, hidden_dropout_prob)
                    attention = _LayerNorm(attention + layer_input, hidden_size)
            with flow.scope.namespace("intermediate"):
                intermediate = _FullyConnected(attention, hidden_size, intermediate_size, "dense",
                                               CreateInitializer(initializer_range))
                if intermediate_act_fn is not None:
                    intermediate = intermediate_act_fn(intermediate)
            with flow.scope.namespace("output"):
                out = _FullyConnected(intermediate, intermediate_size, hidden_size, "dense",
                                      CreateInitializer(initializer_range))
                out = _Dropout(out, hidden_dropout_prob)
                prev = _LayerNorm(out + attention, hidden_size)
    return [flow.reshape(prev, (-1, seq_length, hidden_size))]   # the last layer only (do_return_all_layers=False)


def _AttentionLayer(from_blob, to_blob, attention_mask_blob, num_attention_heads, size_per_head,  # noqa: N802
                    attention_probs_dropout_prob, initializer_range, from_seq_length, to_seq_length):
    width = num_attention_heads * size_per_head

    def transpose_for_scores(blob, seq_length):
        blob = flow.reshape(blob, [-1, seq_length, num_attention_heads, size_per_head])
        return flow.transpose(blob, perm=[0, 2, 1, 3])

    from_2d = flow.reshape(from_blob, [-1, width])
    to_2d = flow.reshape(to_blob, [-1, width])
    query = _FullyConnected(from_2d, width, width, "query", CreateInitializer(initializer_range))
    key = _FullyConnected(to_2d, width, width, "key", CreateInitializer(initializer_range))
    value = _FullyConnected(to_2d, width, width, "value", CreateInitializer(initializer_range))
    query = transpose_for_scores(query, from_seq_length)
    key = transpose_for_scores(key, to_seq_length)
    scores = flow.matmul(query, key, transpose_b=True)
    scores = scores * (1.0 / math.sqrt(float(size_per_head)))
    mask = flow.reshape(attention_mask_blob, [-1, 1, from_seq_length, to_seq_length])
    mask = flow.cast(mask, dtype=flow.float)
    scores = scores + (mask - 1.0) * 10000.0
    probs = flow.nn.softmax(scores)
    probs = _Dropout(probs, attention_probs_dropout_prob)
    value = transpose_for_scores(value, to_seq_length)
    context = flow.matmul(probs, value)
    context = flow.transpose(context, perm=[0, 2, 1, 3])
    return flow.reshape(context, [-1, width])


def _FullyConnected(input_blob, input_size, units, name, weight_initializer, activation=None):  # noqa: N802
    weight = flow.get_variable(name=name + "-weight", shape=[input_size, units], dtype=input_blob.dtype,
                               initializer=weight_initializer)
    bias = flow.get_variable(name=name + "-bias", shape=[units], dtype=input_blob.dtype,
                             initializer=flow.constant_initializer(0.0))
    out = flow.nn.bias_add(flow.matmul(input_blob, weight), bias)
    return activation(out) if activation is not None else out


def _Dropout(input_blob, dropout_prob):  # noqa: N802
    if dropout_prob == 0.0:
        return input_blob
    return flow.nn.dropout(input_blob, rate=dropout_prob)


def _LayerNorm(input_blob, hidden_size):  # noqa: N802, ARG001 - OneFlow-Benchmark's signature
    return flow.layers.layer_norm(input_blob, name="LayerNorm", begin_norm_axis=-1, begin_params_axis=-1)


def _CreateAttentionMaskFromInputMask(to_mask_blob, from_seq_length, to_seq_length):  # noqa: N802
    output = flow.cast(to_mask_blob, dtype=flow.float)
    output = flow.reshape(output, [-1, 1, to_seq_length])
    zeros = flow.constant(0.0, dtype=flow.float, shape=[from_seq_length, to_seq_length])
    return zeros + output


def _EmbeddingPostprocessor(input_blob, seq_length, embedding_size, token_type_ids_blob,  # noqa: N802
                            token_type_vocab_size, initializer_range, max_position_embeddings, dropout_prob):
    token_type_table = flow.get_variable(name="token_type_embeddings",
                                         shape=[token_type_vocab_size, embedding_size], dtype=input_blob.dtype,
                                         initializer=CreateInitializer(initializer_range))
    output = input_blob + flow.gather(params=token_type_table, indices=token_type_ids_blob, axis=0)
    position_table = flow.get_variable(name="position_embeddings",
                                       shape=[1, max_position_embeddings, embedding_size], dtype=input_blob.dtype,
                                       initializer=CreateInitializer(initializer_range))
    if seq_length > max_position_embeddings:
        raise ValueError(f"seq_length {seq_length} exceeds max_position_embeddings {max_position_embeddings}")
    if seq_length != max_position_embeddings:
        position_table = flow.slice(position_table, begin=[None, 0, 0], size=[None, seq_length, -1])
    output = output + position_table
    output = _LayerNorm(output, embedding_size)
    return _Dropout(output, dropout_prob)


def _EmbeddingLookup(input_ids_blob, vocab_size, embedding_size, initializer_range,  # noqa: N802
                     word_embedding_name):
    table = flow.get_variable(name=word_embedding_name, shape=[vocab_size, embedding_size], dtype=flow.float,
                              initializer=CreateInitializer(initializer_range))
    return flow.gather(params=table, indices=input_ids_blob, axis=0), table
