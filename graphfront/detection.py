"""``flow.detection``: OneFlow v0.6.0's second name for the object preprocessing functions
(the same objects as ``flow.object_bbox_flip`` ..., defined in :mod:`graphfront.image`)."""
from graphfront.image import (object_bbox_flip, object_bbox_scale, object_segmentation_polygon_flip,
                              object_segmentation_polygon_scale, object_segmentation_polygon_to_mask)

__all__ = ["object_bbox_flip", "object_bbox_scale", "object_segmentation_polygon_flip",
           "object_segmentation_polygon_scale", "object_segmentation_polygon_to_mask"]
