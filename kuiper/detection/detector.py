"""A detector: a YOLO graph with the steps around it, from a picture to boxes in the picture's own pixels.

    detector = kuiper.detection.load("models/shapes_yolo/shapes_yolo.pnnx.param", backend="numpy")
    found = detector.detect(pixels)   # (H, W, 3) uint8 RGB, or a PIL image; -> Detections

It letterboxes the picture to the graph's fixed input size (letterbox.py), runs the graph, decodes its output
(yolo.py), suppresses overlapping boxes class by class (nms.py) and maps the boxes back through the letterbox.
"""

from __future__ import annotations

import numpy as np

from kuiper.core.errors import ConfigError, ShapeError
from kuiper.detection.detections import Detections
from kuiper.detection.letterbox import Letterbox, letterbox
from kuiper.detection.nms import check_thresholds, non_max_suppression
from kuiper.detection.yolo import FORMATS, classes_in, decode, detect_format


class Detector:
    """`graph` (a built RuntimeGraph with one (1, 3, H, W) input of fixed size); `names` the class names (or
    None); conf, iou, max_det, multi_label and agnostic as non_max_suppression takes them; `format` one of
    yolo.FORMATS, or None to tell it from the output's shape."""

    def __init__(self, graph, names=None, conf: float = 0.25, iou: float = 0.45, max_det: int = 300,
                 format: str | None = None, multi_label: bool = False, agnostic: bool = False):
        inputs = graph.input_operators
        shape = inputs[0].output_operand.shape if len(inputs) == 1 else None
        if shape is None or len(shape) != 4 or shape[1] != 3 or not all(isinstance(d, int) for d in shape):
            raise ShapeError(f"a detector takes one (1, 3, H, W) input of fixed size; this graph's inputs are "
                             f"{[op.output_operand.shape for op in inputs]}")
        if format is not None and format not in FORMATS:
            raise ConfigError(f"format={format!r}: give one of {', '.join(FORMATS)}")
        check_thresholds(conf, iou)
        self.graph, self.size = graph, (shape[2], shape[3])
        self.names = list(names) if names is not None else None
        self.conf, self.iou, self.max_det = conf, iou, max_det
        self.format, self.multi_label, self.agnostic = format, multi_label, agnostic

    def prepare(self, image) -> Letterbox:
        return letterbox(_pixels(image), self.size)

    def forward(self, prepared: Letterbox) -> np.ndarray:
        """The graph's raw output for a letterboxed picture."""
        return self.graph.forward(prepared.input())[0]

    def detect(self, image) -> Detections:
        """The detections in one picture, boxes in its own pixels, best first."""
        prepared = self.prepare(image)
        return self.postprocess(self.forward(prepared), prepared)

    def postprocess(self, output: np.ndarray, prepared: Letterbox) -> Detections:
        format = self.format or detect_format(output.shape)
        if self.names is not None and classes_in(output.shape, format) != len(self.names):
            raise ConfigError(f"{len(self.names)} class names, but the model's output {tuple(output.shape)} has "
                              f"{classes_in(output.shape, format)} classes")
        (boxes, scores), = decode(output, format)
        found = non_max_suppression(boxes, scores, self.conf, self.iou, self.max_det, self.multi_label,
                                    self.agnostic)
        return Detections(prepared.to_original(found.boxes), found.scores, found.classes)


def _pixels(image) -> np.ndarray:
    """(H, W, 3) uint8 RGB from a PIL image (converted to RGB) or such an array."""
    if hasattr(image, "convert") and hasattr(image, "size"):
        image = image.convert("RGB")
    return np.asarray(image)


def load(param, bin_path=None, backend: str = "auto", names=None, conf: float = 0.25, iou: float = 0.45,
         max_det: int = 300, format: str | None = None, **options) -> Detector:
    """A Detector for the model at `param`; `options` go to kuiper.runtime.load (device, precision, ...)."""
    from kuiper.runtime.graph import load as load_graph

    graph = load_graph(param, bin_path, backend=backend, **options)
    return Detector(graph, names, conf, iou, max_det, format)
