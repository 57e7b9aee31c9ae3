"""The zoo's architectures: where each comes from, its family and the input it is exported at.

A name is a torchvision model ("resnet18"), or SOURCE:NAME for the other sources:

    timm:NAME            timm.create_model(NAME, pretrained=False, **keywords below)
    transformers:NAME    a transformers vision model built small from its config (random weights)
    ultralytics:NAME     an ultralytics YOLO built from NAME.yaml: the raw graph, boxes not decoded

`--models` also takes a source alone ("timm") for all of its models. Each family is represented by its smallest
variant; vision transformers get a small image (img_size, and window sizes that divide it) so that the whole
zoo exports and checks in well under an hour on two cores. Where a family has no small variant, its depth is
cut (said in the keywords).
"""

from __future__ import annotations

TORCHVISION = ["vit_b_16", "swin_t", "swin_v2_t", "maxvit_t", "convnext_tiny", "shufflenet_v2_x1_0",
               "efficientnet_b0", "efficientnet_v2_s", "regnet_y_400mf", "regnet_x_400mf", "mobilenet_v2",
               "mobilenet_v3_small", "mobilenet_v3_large", "mnasnet1_0", "resnet18", "resnet50",
               "resnext50_32x4d", "wide_resnet50_2", "densenet121", "vgg11_bn", "inception_v3", "googlenet",
               "squeezenet1_1", "alexnet", "fcn_resnet50", "deeplabv3_mobilenet_v3_large",
               "lraspp_mobilenet_v3_large"]
TORCHVISION_SIDES = {"inception_v3": 299}

CNN, MOBILE, HYBRID, VIT, MLP = "CNN", "mobile CNN", "hybrid", "ViT", "MLP"
# timm name: (family, kind, input side, create_model keywords)
TIMM = {
    "resnet18": ("ResNet", CNN, 128, {}),
    "seresnext26d_32x4d": ("ResNeXt + SE", CNN, 128, {}),
    "resnetv2_50x1_bit": ("ResNetV2 (BiT)", CNN, 128, {}),
    "ecaresnet26t": ("ECA-ResNet", CNN, 128, {}),
    "regnetx_002": ("RegNetX", CNN, 128, {}),
    "regnety_002": ("RegNetY", CNN, 128, {}),
    "res2net50_48w_2s": ("Res2Net", CNN, 128, {}),
    "resnest14d": ("ResNeSt", CNN, 128, {}),
    "skresnet18": ("SKNet", CNN, 128, {}),
    "cspresnet50": ("CSPNet", CNN, 128, {}),
    "darknet17": ("DarkNet", CNN, 128, {}),
    "densenet121": ("DenseNet", CNN, 128, {}),
    "dpn68": ("DPN", CNN, 128, {}),
    "dla46_c": ("DLA", CNN, 128, {}),
    "hrnet_w18_small": ("HRNet", CNN, 128, {}),
    "inception_v3": ("Inception", CNN, 160, {}),
    "xception41": ("Xception", CNN, 128, {}),
    "vgg11": ("VGG", CNN, 128, {}),
    "repvgg_a0": ("RepVGG", CNN, 128, {}),
    "ese_vovnet19b_dw": ("VoVNet", CNN, 128, {}),
    "hgnetv2_b0": ("HGNetV2", CNN, 128, {}),
    "tresnet_m": ("TResNet", CNN, 128, {}),
    "nf_regnet_b0": ("NFNet", CNN, 128, {}),
    "convnext_atto": ("ConvNeXt", CNN, 128, {}),
    "convnextv2_atto": ("ConvNeXt V2", CNN, 128, {}),
    "convmixer_768_32": ("ConvMixer", CNN, 112, {}),
    "starnet_s1": ("StarNet", CNN, 128, {}),
    "mambaout_femto": ("MambaOut", CNN, 128, {}),
    "efficientnet_b0": ("EfficientNet", MOBILE, 128, {}),
    "tf_efficientnetv2_b0": ("EfficientNetV2 (TF 'same' padding)", MOBILE, 128, {}),
    "mobilenetv2_050": ("MobileNetV2", MOBILE, 128, {}),
    "mobilenetv3_small_050": ("MobileNetV3", MOBILE, 128, {}),
    "mobilenetv4_conv_small": ("MobileNetV4", MOBILE, 128, {}),
    "mobilenetv4_hybrid_medium": ("MobileNetV4 hybrid", HYBRID, 128, {}),
    "lcnet_050": ("LCNet", MOBILE, 128, {}),
    "ghostnet_050": ("GhostNet", MOBILE, 128, {}),
    "mnasnet_small": ("MnasNet", MOBILE, 128, {}),
    "rexnet_100": ("ReXNet", MOBILE, 128, {}),
    "repvit_m1": ("RepViT", MOBILE, 128, {}),
    "fastvit_t8": ("FastViT", HYBRID, 128, {}),
    "efficientvit_b0": ("EfficientViT (MIT)", HYBRID, 128, {}),
    "efficientvit_m0": ("EfficientViT (MSRA)", HYBRID, 224, {}),
    "efficientformer_l1": ("EfficientFormer", HYBRID, 224, {}),
    "efficientformerv2_s0": ("EfficientFormerV2", HYBRID, 224, {}),
    "levit_128s": ("LeViT", HYBRID, 128, {"img_size": 128}),
    "mobilevit_xxs": ("MobileViT", HYBRID, 128, {}),
    "mobilevitv2_050": ("MobileViTV2", HYBRID, 128, {}),
    "edgenext_xx_small": ("EdgeNeXt", HYBRID, 128, {}),
    "coatnet_nano_rw_224": ("CoAtNet", HYBRID, 128, {"img_size": 128}),
    "maxvit_nano_rw_256": ("MaxViT", HYBRID, 128, {"img_size": 128}),
    "botnet26t_256": ("BoTNet", HYBRID, 128, {"img_size": 128}),
    "vit_tiny_r_s16_p8_224": ("ViT hybrid (ResNet stem)", HYBRID, 128, {"img_size": 128}),
    "poolformer_s12": ("PoolFormer", HYBRID, 128, {}),
    "poolformerv2_s12": ("PoolFormerV2", HYBRID, 128, {}),
    "caformer_s18": ("CAFormer", HYBRID, 128, {}),
    "tiny_vit_5m_224": ("TinyViT", HYBRID, 224, {}),
    "coat_lite_tiny": ("CoaT", HYBRID, 128, {"img_size": 128}),
    "visformer_tiny": ("Visformer", HYBRID, 128, {"img_size": 128}),
    "vit_tiny_patch16_224": ("ViT", VIT, 64, {"img_size": 64}),
    "deit_tiny_distilled_patch16_224": ("DeiT (distilled)", VIT, 64, {"img_size": 64}),
    "beit_base_patch16_224": ("BEiT", VIT, 64, {"img_size": 64, "depth": 4}),
    "eva02_tiny_patch14_224": ("EVA-02 (RoPE)", VIT, 112, {"img_size": 112}),
    "cait_xxs24_224": ("CaiT", VIT, 64, {"img_size": 64}),
    "xcit_nano_12_p16_224": ("XCiT", VIT, 64, {"img_size": 64}),
    "convit_tiny": ("ConViT", VIT, 64, {"img_size": 64}),
    "tnt_s_patch16_224": ("TNT", VIT, 64, {"img_size": 64}),
    "crossvit_tiny_240": ("CrossViT", VIT, 240, {}),
    "pit_ti_224": ("PiT", VIT, 128, {"img_size": 128}),
    "swin_tiny_patch4_window7_224": ("Swin", VIT, 128, {"img_size": 128, "window_size": 4}),
    "swinv2_tiny_window8_256": ("Swin V2", VIT, 128, {"img_size": 128, "window_size": 4}),
    "pvt_v2_b0": ("PVT v2", VIT, 128, {}),
    "twins_svt_small": ("Twins", VIT, 128, {}),
    "davit_tiny": ("DaViT", VIT, 128, {}),
    "focalnet_tiny_srf": ("FocalNet", VIT, 128, {}),
    "mvitv2_tiny": ("MViTv2", VIT, 128, {"img_size": 128}),
    "hiera_tiny_224": ("Hiera", VIT, 128, {"img_size": 128}),
    "mixer_s16_224": ("MLP-Mixer", MLP, 64, {"img_size": 64}),
    "resmlp_12_224": ("ResMLP", MLP, 64, {"img_size": 64}),
    "gmlp_ti16_224": ("gMLP", MLP, 64, {"img_size": 64}),
}

# transformers model_type: (input side, config keywords); every one gets num_labels=10 and small widths
_SMALL_VIT = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128,
              "image_size": 64, "patch_size": 16}
_SMALL_STAGES = {"hidden_sizes": [16, 32, 48, 64], "depths": [1, 1, 2, 1]}
TRANSFORMERS = {
    "vit": (64, _SMALL_VIT),
    # the auto classes offer two heads for DeiT and LeViT: `architectures` picks the distilled one
    "deit": (64, {**_SMALL_VIT, "architectures": ["DeiTForImageClassificationWithTeacher"]}),
    "beit": (64, {**_SMALL_VIT, "use_relative_position_bias": True}),
    "dinov2": (56, {**_SMALL_VIT, "image_size": 56, "patch_size": 14}),
    "swin": (64, {"image_size": 64, "patch_size": 4, "embed_dim": 24, "depths": [1, 1, 2, 1],
                  "num_heads": [1, 2, 3, 4], "window_size": 2}),
    "convnext": (64, _SMALL_STAGES),
    "convnextv2": (64, _SMALL_STAGES),
    "resnet": (64, {"embedding_size": 16, "hidden_sizes": [16, 32, 48, 64], "depths": [1, 1, 1, 1]}),
    "regnet": (64, {"embedding_size": 16, "hidden_sizes": [16, 32, 48, 64], "depths": [1, 1, 2, 1],
                    "groups_width": 8}),
    "mobilevit": (64, {"image_size": 64, "hidden_sizes": [32, 40, 48], "neck_hidden_sizes": [8, 8, 16, 16, 24,
                                                                                             32, 64]}),
    "segformer": (64, {"hidden_sizes": [16, 32, 48, 64], "decoder_hidden_size": 64, "depths": [1, 1, 1, 1]}),
    "poolformer": (64, {"hidden_sizes": [16, 32, 48, 64], "depths": [1, 1, 1, 1]}),
    "levit": (64, {"image_size": 64, "architectures": ["LevitForImageClassificationWithTeacher"]}),
    "efficientnet": (64, {"image_size": 64, "width_coefficient": 1.0, "depth_coefficient": 1.0,
                          "hidden_dim": 1280}),  # B0 (the defaults are B7's)
}
# semantic segmentation models: the rest are image classifiers
TRANSFORMERS_SEGMENTATION = {"segformer"}
ULTRALYTICS = {"yolov8n": 320, "yolov5nu": 320}

SOURCES = {"torchvision": TORCHVISION, "timm": [f"timm:{n}" for n in TIMM],
           "transformers": [f"transformers:{n}" for n in TRANSFORMERS],
           "ultralytics": [f"ultralytics:{n}" for n in ULTRALYTICS]}


def names(selection: str | None) -> list:
    """The models `--models` names: comma-separated names and sources (default: torchvision's)."""
    if not selection:
        return list(TORCHVISION)
    return [name for part in selection.split(",") for name in SOURCES.get(part, [part])]


def source(name: str) -> tuple:
    """(source, name within it)."""
    kind, _, inner = name.rpartition(":")
    return kind or "torchvision", inner


def folder(name: str) -> str:
    """The cache folder's and the files' name: a Python identifier, as pnnx makes of its file names
    (torchvision's names stay as they are)."""
    return name.replace(":", "_")


def family(name: str) -> str:
    kind, inner = source(name)
    if kind == "timm":
        return TIMM[inner][0]
    return {"torchvision": "torchvision", "transformers": f"transformers {inner}", "ultralytics": "YOLO"}[kind]


def kind_of(name: str) -> str:
    """CNN, mobile CNN, hybrid, ViT or MLP for timm's models; the source for the others."""
    kind, inner = source(name)
    return TIMM[inner][1] if kind == "timm" else kind


def input_shape(name: str) -> tuple:
    kind, inner = source(name)
    side = {"timm": lambda: TIMM[inner][2], "transformers": lambda: TRANSFORMERS[inner][0],
            "ultralytics": lambda: ULTRALYTICS[inner],
            "torchvision": lambda: TORCHVISION_SIDES.get(inner, 224)}[kind]()
    return (1, 3, side, side)


def build(name: str):
    """The torch module (random weights from torch's global generator, which the caller seeds), in eval mode."""
    kind, inner = source(name)
    if kind == "torchvision":
        from kuiper.app import export as kx

        return kx.build_module(f"torchvision:{inner}")
    if kind == "timm":
        import timm

        return timm.create_model(inner, pretrained=False, **TIMM[inner][3]).eval()
    if kind == "transformers":
        return _transformers(inner).eval()
    return _ultralytics(inner).eval()


def _first_output(module):
    """The module, returning only the first tensor of what it returns (logits; YOLO's raw predictions)."""
    import torch

    class FirstOutput(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            out = self.inner(x)
            if hasattr(out, "to_tuple"):  # a transformers output dataclass
                out = out.to_tuple()
            while isinstance(out, (tuple, list)):
                out = out[0]
            return out

    return FirstOutput(module)


def _transformers(model_type: str):
    import transformers

    side, keywords = TRANSFORMERS[model_type]
    config = transformers.AutoConfig.for_model(model_type, num_labels=10, **keywords)
    automatic = (transformers.AutoModelForSemanticSegmentation if model_type in TRANSFORMERS_SEGMENTATION
                 else transformers.AutoModelForImageClassification)
    return _first_output(automatic.from_config(config))


def _ultralytics(name: str):
    from ultralytics.nn.tasks import DetectionModel

    model = DetectionModel(f"{name}.yaml", verbose=False)
    return _first_output(model)

# what pnnx writes wrongly for a model (found by reading its graph), with the pnnx version it was seen in
PNNX_WRONG = {
    "timm:mobilevitv2_050": "pnnx 20261020 writes the F.fold that puts the patches back (after a reshape to "
                            "(B, C*P, N)) as nn.PixelShuffle on the (B, C, P, N) tensor, the reshape dropped: "
                            "the shapes it records are right, the operation is not, and its own Python script of "
                            "the graph fails the same way (\"expected input[1, 16, 8, 128] to have 64 channels\")",
    "transformers:mobilevit": "pnnx 20261020 writes the reshape of the unfolded patches to (B, C, N, P) as "
                              "Tensor.reshape shape=(1,32,16,4,4), one size too many, while it records the "
                              "output as (1,32,16,4); its own Python script of the graph fails the same way "
                              "(\"shape '[1, 32, 16, 4, 4]' is invalid for input of size 2048\")",
}
