"""Object detection around a YOLO graph: letterboxing, decoding, non-maximum suppression, drawing, mAP.

    import kuiper.detection as det
    detector = det.load("models/shapes_yolo/shapes_yolo.pnnx.param")
    found = detector.detect(pixels)             # Detections: boxes (xyxy, picture pixels), scores, classes
    det.draw(pixels, found, detector.names).save("out.png")

The modules, in the order a picture goes through them:
    letterbox.py   resize keeping the aspect ratio, pad with grey; boxes mapped back
    yolo.py        the output of an ultralytics model (YOLOv8 / YOLOv5u layout, or classic YOLOv5) decoded
    nms.py         class-wise non-maximum suppression, as ultralytics and torchvision do it
    detector.py    Detector and load(): the graph and the steps around it
    draw.py        boxes, names and scores drawn with Pillow
    metrics.py     average precision per class and mAP over labelled pictures
    dataset.py     label files in ultralytics' YOLO format
Only numpy is needed, and Pillow for resizing and drawing.
"""

from kuiper.detection.boxes import iou, xywh_to_xyxy
from kuiper.detection.detections import Detections
from kuiper.detection.detector import Detector, load
from kuiper.detection.draw import draw
from kuiper.detection.letterbox import Letterbox, letterbox
from kuiper.detection.metrics import Evaluation
from kuiper.detection.nms import batched_nms, nms, non_max_suppression
from kuiper.detection.yolo import decode, detect_format

__all__ = ["Detections", "Detector", "Evaluation", "Letterbox", "batched_nms", "decode", "detect_format", "draw",
           "iou", "letterbox", "load", "nms", "non_max_suppression", "xywh_to_xyxy"]
