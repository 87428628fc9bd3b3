"""LeNet for 28x28 grayscale digits, built from graphfront layers (as in OneFlow's example).

conv 5x5x32 SAME relu -> max_pool 2/2 -> conv 5x5x64 SAME relu -> max_pool 2/2 ->
flatten -> dense 512 relu -> dropout 0.5 (train only) -> dense 10.
"""
import graphfront as flow


def lenet(data, train=False, data_format="NCHW"):
    """Logits (N, 10) of ``data`` (N, 1, 28, 28) for NCHW, or (N, 28, 28, 1) for NHWC."""
    initializer = flow.truncated_normal(0.1)
    conv1 = flow.layers.conv2d(data, 32, 5, padding="SAME", data_format=data_format, activation=flow.nn.relu,
                               name="conv1", kernel_initializer=initializer)
    pool1 = flow.nn.max_pool2d(conv1, ksize=2, strides=2, padding="SAME", name="pool1", data_format=data_format)
    conv2 = flow.layers.conv2d(pool1, 64, 5, padding="SAME", data_format=data_format, activation=flow.nn.relu,
                               name="conv2", kernel_initializer=initializer)
    pool2 = flow.nn.max_pool2d(conv2, ksize=2, strides=2, padding="SAME", name="pool2", data_format=data_format)
    reshape = flow.reshape(pool2, [pool2.shape[0], -1])
    hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer,
                               name="dense1")
    if train:
        hidden = flow.nn.dropout(hidden, rate=0.5, name="dropout")
    return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="dense2")
