"""ResNet-50 v1.5 written with graphfront's OneFlow API, in OneFlow-Benchmark's layout.

Layout and variable names follow OneFlow-Benchmark's ``Classification/cnns/resnet_model.py``,
so a checkpoint holds OneFlow's names: ``conv1-weight``, ``conv1_bn-gamma`` / ``-beta`` /
``-moving_mean`` / ``-moving_variance``, ``res2_0_branch1-weight`` (projection shortcut),
``res2_0_branch2a-weight`` ... ``res5_2_branch2c_bn-*``, ``fc1001-weight`` / ``-bias``.
v1.5: the stride of a down-sampling block sits on its 3x3 convolution (``branch2b``).
The last batch norm of each block starts with gamma 0 (and moving variance 0, as
OneFlow-Benchmark initializes it).

Input: float ``(B, 3, H, W)`` (``(B, H, W, 3)`` with ``channel_last``); output: logits
``(B, num_classes)``. Convolution weights are ``(out, in, k, k)`` (``(out, k, k, in)``
channel-last).
"""
import graphfront as flow

BLOCK_COUNTS = [3, 4, 6, 3]
BLOCK_FILTERS = [256, 512, 1024, 2048]
BLOCK_FILTERS_INNER = [64, 128, 256, 512]


class ResnetBuilder:
    def __init__(self, weight_regularizer, trainable=True, training=True, channel_last=False,
                 fuse_bn_relu=True, fuse_bn_add_relu=True, width=1.0):
        self.data_format = "NHWC" if channel_last else "NCHW"
        self.weight_initializer = flow.variance_scaling_initializer(2, "fan_in", "random_normal",
                                                                    data_format=self.data_format)
        self.weight_regularizer = weight_regularizer
        self.trainable = trainable
        self.training = training
        self.fuse_bn_relu = fuse_bn_relu
        self.fuse_bn_add_relu = fuse_bn_add_relu
        self.width = width   # channel multiplier (1.0 = ResNet-50; smaller for quick tests)

    def _channels(self, n):
        return max(1, int(n * self.width))

    @property
    def _axis(self):
        return 3 if self.data_format == "NHWC" else 1

    def _conv2d(self, name, input, filters, kernel_size, strides=1, padding="SAME", dilations=1):
        if self.data_format == "NHWC":
            shape = (filters, kernel_size, kernel_size, input.shape[3])
        else:
            shape = (filters, input.shape[1], kernel_size, kernel_size)
        weight = flow.get_variable(name + "-weight", shape=shape, dtype=input.dtype,
                                   initializer=self.weight_initializer, regularizer=self.weight_regularizer,
                                   model_name="weight", trainable=self.trainable)
        return flow.nn.conv2d(input, weight, strides, padding, data_format=self.data_format, dilations=dilations,
                              name=name)

    def _bn_args(self, name, last):
        initializer = flow.zeros_initializer() if last else flow.ones_initializer()
        return dict(axis=self._axis, momentum=0.9, epsilon=1e-5, center=True, scale=True,
                    trainable=self.trainable, training=self.training, gamma_initializer=initializer,
                    moving_variance_initializer=initializer, gamma_regularizer=self.weight_regularizer,
                    beta_regularizer=self.weight_regularizer, name=name)

    def _batch_norm(self, inputs, name=None, last=False):
        return flow.layers.batch_normalization(inputs=inputs, **self._bn_args(name, last))

    def _batch_norm_relu(self, inputs, name=None, last=False):
        if self.fuse_bn_relu:
            return flow.layers.batch_normalization_relu(inputs=inputs, **self._bn_args(name, last))
        return flow.nn.relu(self._batch_norm(inputs, name, last))

    def _batch_norm_add_relu(self, inputs, addend, name=None, last=False):
        if self.fuse_bn_add_relu:
            return flow.layers.batch_normalization_add_relu(inputs=inputs, addend=addend,
                                                            **self._bn_args(name, last))
        return flow.nn.relu(self._batch_norm(inputs, name, last) + addend)

    def conv2d_affine(self, input, name, filters, kernel_size, strides):
        padding = "SAME" if strides > 1 or kernel_size > 1 else "VALID"
        return self._conv2d(name, input, filters, kernel_size, strides, padding)

    def bottleneck_transformation(self, input, block_name, filters, filters_inner, strides):
        a = self.conv2d_affine(input, block_name + "_branch2a", filters_inner, 1, 1)
        a = self._batch_norm_relu(a, block_name + "_branch2a_bn")
        b = self.conv2d_affine(a, block_name + "_branch2b", filters_inner, 3, strides)
        b = self._batch_norm_relu(b, block_name + "_branch2b_bn")
        return self.conv2d_affine(b, block_name + "_branch2c", filters, 1, 1)

    def residual_block(self, input, block_name, filters, filters_inner, strides_init):
        if strides_init != 1 or block_name == "res2_0":
            shortcut = self.conv2d_affine(input, block_name + "_branch1", filters, 1, strides_init)
            shortcut = self._batch_norm(shortcut, block_name + "_branch1_bn")
        else:
            shortcut = input
        bottleneck = self.bottleneck_transformation(input, block_name, filters, filters_inner, strides_init)
        return self._batch_norm_add_relu(bottleneck, shortcut, block_name + "_branch2c_bn", last=True)

    def residual_stage(self, input, stage_name, counts, filters, filters_inner, stride_init=2):
        output = input
        for i in range(counts):
            output = self.residual_block(output, "%s_%d" % (stage_name, i), filters, filters_inner,
                                         stride_init if i == 0 else 1)
        return output

    def resnet_conv_x_body(self, input, block_counts=BLOCK_COUNTS):
        output = input
        for i, (counts, filters, inner) in enumerate(zip(block_counts, BLOCK_FILTERS, BLOCK_FILTERS_INNER)):
            output = self.residual_stage(output, "res%d" % (i + 2), counts, self._channels(filters),
                                         self._channels(inner), 1 if i == 0 else 2)
        return output

    def resnet_stem(self, input):
        conv1 = self._conv2d("conv1", input, self._channels(64), 7, 2)
        conv1_bn = self._batch_norm_relu(conv1, "conv1_bn")
        return flow.nn.max_pool2d(conv1_bn, ksize=3, strides=2, padding="SAME", data_format=self.data_format,
                                  name="pool1")


def resnet50(images, args, trainable=True, training=True):
    """Logits ``(B, args.num_classes)`` of ResNet-50 v1.5 on ``images``.

    ``args`` fields: ``wd`` (L2 regularizer of every weight when in (0, 1)),
    ``channel_last``, ``fuse_bn_relu``, ``fuse_bn_add_relu``, ``num_classes``; optional
    ``block_counts`` (default ``[3, 4, 6, 3]``) and ``width`` (channel multiplier) for
    smaller networks of the same layout.
    """
    wd = getattr(args, "wd", 0.0)
    weight_regularizer = flow.regularizers.l2(wd) if 0.0 < wd < 1.0 else None
    builder = ResnetBuilder(weight_regularizer, trainable, training, args.channel_last,
                            getattr(args, "fuse_bn_relu", True), getattr(args, "fuse_bn_add_relu", True),
                            getattr(args, "width", 1.0))
    stem = builder.resnet_stem(images)
    body = builder.resnet_conv_x_body(stem, getattr(args, "block_counts", None) or BLOCK_COUNTS)
    spatial = body.shape[1:3] if args.channel_last else body.shape[2:4]
    pool5 = flow.nn.avg_pool2d(body, ksize=list(spatial), strides=1, padding="VALID",
                               data_format=builder.data_format, name="pool5")
    return flow.layers.dense(flow.reshape(pool5, (pool5.shape[0], -1)), units=args.num_classes, use_bias=True,
                             kernel_initializer=flow.variance_scaling_initializer(2, "fan_in", "random_normal"),
                             bias_initializer=flow.zeros_initializer(), kernel_regularizer=weight_regularizer,
                             bias_regularizer=weight_regularizer, trainable=trainable, name="fc1001")
