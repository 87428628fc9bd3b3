"""``flow.image``: image preprocessing ops of OneFlow's data pipeline (see
:mod:`graphfront.data_pipeline`)."""
from graphfront.data_pipeline import CropMirrorNormalize, Resize, crop_mirror_normalize, image_resize, image_target_resize

resize = image_resize
target_resize = image_target_resize

__all__ = ["CropMirrorNormalize", "Resize", "crop_mirror_normalize", "resize", "target_resize"]
