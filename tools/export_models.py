"""Export the committed test models: PNNX graphs plus PyTorch reference inputs and outputs.

    python tools/export_models.py [--out models] [--only NAME ...]

Needs torch, torchvision and pnnx (the `export` extra), and transformers for the language models. On the
project's machines `pip install torch==2.13.0 pnnx` takes the CPU build of torch; torchvision 0.29.2 asks for
torch 2.15, whose only build there is the CUDA one, so the committed files were made with torch 2.13.0+cpu,
torchvision 0.29.2 installed with --no-deps, transformers 5.24.0 and pnnx 20261020
(kuiper.app.export.import_torchvision makes that torchvision importable without CUDA).

Every model is torch code defined here, or one of torchvision's or transformers' classes built small, built
from a fixed seed and exported in eval mode; its weights are random (the manifest says `"random_weights": true`).
For each model the tool writes into OUT/NAME/:

    NAME.pnnx.param, NAME.pnnx.bin    what pnnx wrote (its other outputs are dropped)
    CASE_inK.npy, CASE_outK.npy        inputs (float32, or int64 token ids) and torch's outputs (tuple outputs
                                       flattened)
    weights.npz                        torch's values of a few attributes pnnx stores untransformed,
                                       keyed "<pnnx operator name>.<attribute>"

and then OUT/manifest.json, which the tests read. A model that runs only with custom operators (pnnx
kept one of its modules whole) is listed under "custom_op_models" rather than "models", with the configs
that serve it, so that suites running every model with the built-in layers leave it out.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from kuiper.app.export import randomize, run_pnnx  # shared with `kuiper export`

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS_LIMIT = 100 * 1024  # bytes per weights.npz: reference values, not a second copy of the model


def he_init(model: nn.Module, mode: str = "fan_in") -> None:
    """He init for every convolution: torch's default shrinks activations about 3x per layer, which
    would leave the deeper references too small for a tolerance check to mean anything."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.kaiming_normal_(m.weight, mode=mode, nonlinearity="relu")


# ---------------------------------------------------------------------------------------------
# resnet18: torchvision's layout and module names, so the graph reads like the usual export.


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        widths = [64, 128, 256, 512]
        cin = 64
        for i, width in enumerate(widths):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, width, stride), BasicBlock(width, width, 1)))
            cin = width
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        he_init(self, mode="fan_out")  # as torchvision does
        randomize(self)  # from torch's global generator, seeded by build_model

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# ---------------------------------------------------------------------------------------------
# Small models: together they make pnnx emit every operator type the runtime is meant to cover.


class ConvZoo(nn.Module):
    """Input 2x3x15x17: every Conv2d / ConvTranspose2d parameter the runtime must honour."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(3)  # on the graph input: nothing before it to fold into
        self.stride2 = nn.Conv2d(3, 5, 3, stride=2, padding=1)  # odd 15x17 -> 8x9
        self.dilated = nn.Conv2d(5, 7, 3, padding=2, dilation=2, bias=False)
        self.depthwise = nn.Conv2d(7, 7, 3, padding=1, groups=7)
        self.pointwise = nn.Conv2d(7, 6, 1)
        self.grouped = nn.Conv2d(6, 9, (3, 2), stride=(1, 2), padding=(1, 0), groups=3)  # 8x9 -> 8x4
        # an even kernel width under "same" pads one more column on the right than on the left
        self.same = nn.Conv2d(9, 5, (3, 4), padding="same", dilation=(1, 2))
        self.up = nn.ConvTranspose2d(5, 6, 3, stride=2, padding=1, output_padding=1)  # 8x4 -> 16x8
        self.up_grouped = nn.ConvTranspose2d(
            6, 9, (3, 2), stride=(2, 3), padding=(2, 1), output_padding=(1, 2), groups=3, dilation=(2, 1), bias=False
        )
        he_init(self)
        randomize(self)  # from torch's global generator, seeded by build_model

    def forward(self, x):
        x = F.relu(self.stride2(self.bn(x)))
        x = F.relu(self.dilated(x))
        x = F.relu(self.depthwise(x))
        x = F.relu(self.grouped(self.pointwise(x)))
        x = F.relu(self.up(self.same(x)))
        return self.up_grouped(x)


class ActZoo(nn.Module):
    """Input 2x7x5x9 (scaled by 3, to reach every clamp and saturation): one output per activation."""

    def __init__(self):
        super().__init__()
        self.mix = nn.Conv2d(7, 7, 1)
        self.relu = nn.ReLU()
        self.relu6 = nn.ReLU6()
        self.hardtanh = nn.Hardtanh(-0.5, 0.75)
        self.leaky = nn.LeakyReLU(0.15)
        self.sigmoid = nn.Sigmoid()
        self.silu = nn.SiLU()
        self.hardsigmoid = nn.Hardsigmoid()
        self.hardswish = nn.Hardswish()
        self.tanh = nn.Tanh()
        self.gelu = nn.GELU()
        self.gelu_tanh = nn.GELU(approximate="tanh")
        self.softmax = nn.Softmax(dim=1)
        he_init(self)

    def forward(self, x):
        y = self.mix(x)
        return (
            self.relu(y),
            self.relu6(y),
            self.hardtanh(y),
            self.leaky(y),
            self.sigmoid(y),
            self.silu(y),
            self.hardsigmoid(y),
            self.hardswish(y),
            self.tanh(y),
            self.gelu(y),
            self.gelu_tanh(y),
            self.softmax(y),
            F.softmax(y, dim=-1),
        )


class PoolZoo(nn.Module):
    """Input 2x5x13x11: pooling edge cases (ceil_mode windows, padding divisors, adaptive bins)."""

    def __init__(self):
        super().__init__()
        # width 11: the ceil_mode window that would start in the right padding is dropped (5 -> 4)
        self.max_ceil = nn.MaxPool2d(3, stride=3, padding=1, ceil_mode=True)
        self.max_dilated = nn.MaxPool2d((2, 3), stride=(1, 2), dilation=(2, 1))
        self.avg_ceil = nn.AvgPool2d(3, stride=3, padding=1, ceil_mode=True, count_include_pad=False)
        # width 11: the last ceil_mode window hangs past the input; its divisor counts 1 column, not 2
        self.avg_ceil_pad = nn.AvgPool2d((3, 2), stride=2, padding=(1, 0), ceil_mode=True)
        self.avg_divisor = nn.AvgPool2d(2, stride=2, divisor_override=3)
        self.adaptive_avg = nn.AdaptiveAvgPool2d((3, 4))
        self.adaptive_max = nn.AdaptiveMaxPool2d((5, 3))
        self.offset = nn.Conv2d(5, 5, 1)  # gives the model weights and mixed-sign inputs to the pools

    def forward(self, x):
        x = self.offset(x)
        return (
            self.max_ceil(x),
            self.max_dilated(x),
            self.avg_ceil(x),
            self.avg_ceil_pad(x),
            self.avg_divisor(x),
            self.adaptive_avg(x),
            self.adaptive_max(x),
        )


class ResizeZoo(nn.Module):
    """Input 2x5x7x9: nearest and bilinear resizing by scale factor and by size."""

    def __init__(self):
        super().__init__()
        self.mix = nn.Conv2d(5, 5, 1)
        self.nearest2 = nn.Upsample(scale_factor=2, mode="nearest")
        # torch maps output to input with 1/scale_factor, not in/out, when the factor is given
        self.nearest_frac = nn.Upsample(scale_factor=1.5, mode="nearest")
        self.nearest_size = nn.Upsample(size=(10, 20), mode="nearest")
        self.bilinear_corners = nn.Upsample(size=(12, 5), mode="bilinear", align_corners=True)
        self.bilinear_frac = nn.Upsample(scale_factor=(1.5, 2.5), mode="bilinear", align_corners=False)

    def forward(self, x):
        x = self.mix(x)
        return (
            self.nearest2(x),
            self.nearest_frac(x),
            self.nearest_size(x),
            self.bilinear_corners(x),
            self.bilinear_frac(x),
            # only recompute_scale_factor=True keeps the F.interpolate spelling; the mapping is then in/out
            F.interpolate(x, scale_factor=1.7, mode="bilinear", align_corners=False, recompute_scale_factor=True),
            F.interpolate(x, scale_factor=(2.0, 0.5), mode="nearest", recompute_scale_factor=True),
        )


class ShapeZoo(nn.Module):
    """Input 2x6x5x7: layout operators, reductions and Linear on 2-D and 3-D inputs."""

    def __init__(self):
        super().__init__()
        self.tokens_fc = nn.Linear(6, 4)
        self.flat_fc = nn.Linear(6 * 5 * 7, 5)
        self.flatten = nn.Flatten()

    def forward(self, x):
        n = x.size(0)
        tokens = x.permute(0, 2, 3, 1).reshape(n, 35, 6)
        tokens = torch.transpose(self.tokens_fc(tokens), 1, 2)  # (n, 4, 35)
        a, b, c = torch.split(x, [1, 3, 2], dim=1)
        channels = torch.cat([c, a, b], dim=1)
        top, mid, bottom = torch.chunk(x, 3, dim=2)  # rows 2, 2, 1
        rows = torch.cat([bottom, top, mid], dim=2)
        left, _, right = torch.split(x, 3, dim=3)  # columns 3, 3, 1
        cols = torch.cat([right, left], dim=3)
        return (
            tokens,
            self.flat_fc(torch.flatten(channels, 1)),
            self.flatten(rows),
            cols.view(n, 6, 20),
            torch.mean(x, dim=(2, 3)),
            torch.mean(x, dim=-1, keepdim=True),
            torch.sum(x, dim=1, keepdim=True),
            torch.sum(x, dim=(1, 3)),
        )


class ExprTwoInputs(nn.Module):
    """Inputs 2x5x7x9 and 2x1x7x9 (broadcast): pnnx.Expression, pnnx.Attribute and a tuple output."""

    def __init__(self):
        super().__init__()
        self.offset = nn.Parameter(torch.randn(1, 5, 1, 9))

    def forward(self, x, y):
        a = x + y * 2.5 - 1
        b = -a / (y.abs() + 1)
        c = torch.pow(b, 2) + torch.sqrt(y.abs() + 0.5) + torch.rsqrt(x * x + 1)
        d = torch.exp(-x.abs()) + torch.log(y * y + 1)
        e = torch.max(c, d) - torch.min(a, b) + self.offset
        return e, a * 3


class ConvBnSiLU(nn.Module):
    """YOLO's Conv block; pnnx folds the BatchNorm into the convolution."""

    def __init__(self, cin: int, cout: int, k: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class UNetTiny(nn.Module):
    """Fully convolutional, valid at any H and W divisible by 4; two heads at two scales."""

    def __init__(self):
        super().__init__()
        self.stem = ConvBnSiLU(3, 8, 3)
        self.pool1 = nn.MaxPool2d(2)
        self.down1 = ConvBnSiLU(8, 12, 3)
        self.pool2 = nn.MaxPool2d(2)
        self.down2 = ConvBnSiLU(12, 16, 3)
        self.mid = ConvBnSiLU(8, 8, 3)
        self.up_nearest = nn.Upsample(scale_factor=2, mode="nearest")
        self.fuse1 = ConvBnSiLU(16 + 12, 12, 1)
        self.bn_add = nn.BatchNorm2d(12)  # after an add: pnnx cannot fold it
        self.up_bilinear = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.fuse2 = ConvBnSiLU(12 + 8, 8, 3)
        self.head_full = nn.Conv2d(8, 4, 1)
        self.head_low = nn.Conv2d(16, 6, 1)
        he_init(self)
        randomize(self)  # from torch's global generator, seeded by build_model

    def forward(self, x):
        s = self.stem(x)
        d1 = self.down1(self.pool1(s))
        d2 = self.down2(self.pool2(d1))
        keep, work = torch.chunk(d2, 2, dim=1)
        d2 = torch.cat([keep, self.mid(work)], dim=1)
        u1 = self.fuse1(torch.cat([self.up_nearest(d2), d1], dim=1))
        u1 = self.bn_add(u1 + d1)
        u2 = self.fuse2(torch.cat([self.up_bilinear(u1), s], dim=1))
        return self.head_full(u2), self.head_low(d2)


class ReshapeBatch(nn.Module):
    """Input Nx6x8x10: views whose leading dim pnnx writes as the literal export batch (2)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(6, 12, 1)  # 3 anchors x 4 values, as in a YOLO head
        self.sigmoid = nn.Sigmoid()
        self.fc = nn.Linear(6 * 8 * 10, 5)

    def forward(self, x):
        n, _, h, w = x.shape
        p = self.conv(x).view(n, 3, 4, h, w).permute(0, 1, 3, 4, 2)
        boxes = self.sigmoid(p).reshape(n, -1, 4)
        return boxes, self.fc(x.view(n, -1))


class ChannelScale(nn.Module):
    """x * scale[c] + shift[c]. Exported with pnnx's moduleop option it stays one operator, of type
    `ChannelScale`, with the weights @scale and @shift: examples/custom_ops/channel_scale serves it."""

    def __init__(self, channels: int):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(channels) + 0.5)
        self.shift = nn.Parameter(torch.randn(channels) * 0.5)

    def forward(self, x):
        per_channel = (1, -1, 1, 1)
        return x * self.scale.view(per_channel) + self.shift.view(per_channel)


class CustomScale(nn.Module):
    """Input 2x5x7x9: a module no built-in layer serves, then a Hardtanh a custom operator can override."""

    def __init__(self):
        super().__init__()
        self.channel_scale = ChannelScale(5)
        self.hardtanh = nn.Hardtanh(-0.5, 0.75)

    def forward(self, x):
        y = self.channel_scale(x)
        return y, self.hardtanh(y)


# ---------------------------------------------------------------------------------------------
# Transformers and the newer CNNs: torchvision's own classes, built small, so that pnnx writes the graphs
# the real models give (LayerNorm, MultiheadAttention, roll, slice, ...). kuiper.app.export.randomize gives
# their norms, layer scales and zero-initialised heads values that show errors.


def torchvision_models():
    from kuiper.app.export import import_torchvision

    return import_torchvision().models


def small(module: nn.Module) -> nn.Module:
    randomize(module)  # from torch's generator, seeded in build_model
    return module


def vit_tiny() -> nn.Module:
    """Input 1x3x32x32: 16 patches of 8x8 and a class token, two encoder blocks of 2 heads."""
    return small(torchvision_models().VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                        hidden_dim=32, mlp_dim=64, num_classes=10))


def swin_tiny() -> nn.Module:
    """Input 2x3x32x32: Swin with 4x4 windows shifted by 2 on an 8x8 grid, then patch merging."""
    return small(torchvision_models().SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2],
                                                      num_heads=[2, 4], window_size=[4, 4], num_classes=10))


def swin_v2_tiny() -> nn.Module:
    """Input 1x3x36x36: Swin V2 blocks (cosine attention, log-spaced position bias) on a 9x9 grid, which
    its 4x4 windows pad to 12x12.

    Without the qkv bias: Swin V2 zeroes the bias's middle third in place on a clone, which pnnx traces as a
    new tensor of that third alone, so the graph it writes has lost the rest of the bias (the zoo's swin_v2_t
    fails on it: benchmarks/zoo.py)."""
    from functools import partial

    models = torchvision_models()  # first: it makes torchvision importable
    swin = models.swin_transformer
    block = partial(swin.SwinTransformerBlockV2, attn_layer=partial(swin.ShiftedWindowAttentionV2, qkv_bias=False))
    return small(models.SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4], num_classes=10,
        block=block, downsample_layer=swin.PatchMergingV2))


def convnext_tiny() -> nn.Module:
    """Input 2x3x32x32: two ConvNeXt stages (depthwise 7x7, LayerNorm over channels, layer scale)."""
    models = torchvision_models()
    config = models.convnext.CNBlockConfig
    return small(models.ConvNeXt([config(16, 32, 2), config(32, None, 1)], num_classes=10))


def shufflenet_tiny() -> nn.Module:
    """Input 2x3x64x64: ShuffleNetV2's channel split, shuffle and concatenation."""
    return small(torchvision_models().ShuffleNetV2([2, 1, 1], [8, 16, 32, 64, 128], num_classes=10))


class AttentionZoo(nn.Module):
    """Inputs x 2x5x8, a float mask 4x5x5 (batch x heads), memory 2x7x6: multi-head attention as a module
    (self-attention with the mask, cross-attention with kdim = vdim = 6) and as
    F.scaled_dot_product_attention (with the mask, and causal), and a LayerNorm over two dims."""

    def __init__(self):
        super().__init__()
        self.self_attention = nn.MultiheadAttention(8, 2, batch_first=True)
        self.cross_attention = nn.MultiheadAttention(8, 2, kdim=6, vdim=6, batch_first=True)
        self.qkv = nn.Linear(8, 24)
        self.norm = nn.LayerNorm([5, 8], elementwise_affine=False)

    def forward(self, x, mask, memory):
        a = self.self_attention(x, x, x, attn_mask=mask, need_weights=False)[0]
        b = self.cross_attention(x, memory, memory, need_weights=False)[0]
        q, k, v = self.qkv(x).reshape(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
        c = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.reshape(2, 2, 5, 5))
        d = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return a, b, c, d, self.norm(x)


class TimmOps(nn.Module):
    """Input 2x6x5x7: the operators timm's models need besides the CNN and attention zoos', each written as
    timm writes it: a padding module pnnx keeps (BiT's stem), ECA's Conv1d along the channels, ConvNeXt V2's
    global response norm (torch.addcmul), multi-query attention (MobileNetV4: one key head for four query
    heads), EfficientViT's split of the last column (x[..., :-1], x[..., -1:]), BatchNorm1d on (N, C, L) and
    on (N, C) (LeViT, RepViT), LeViT's reshape_as, TNT's nn.Unfold, Hiera's torch.amax, transformers'
    Swin pooler (nn.AdaptiveAvgPool1d) and TResNet's reflect-padded blur (Conv2d padding_mode=reflect)."""

    def __init__(self):
        super().__init__()
        self.pad = nn.Sequential(nn.ConstantPad2d((1, 2, 0, 1), -0.5))
        self.conv = nn.Conv2d(6, 8, 3, padding=1)
        self.eca = nn.Conv1d(1, 1, 5, padding=2, bias=False)
        self.grn_weight = nn.Parameter(torch.rand(1, 8, 1, 1) + 0.5)
        self.grn_bias = nn.Parameter(0.1 * torch.randn(1, 8, 1, 1))
        self.query = nn.Conv2d(8, 16, 1)
        self.key = nn.Conv2d(8, 4, 1)
        self.value = nn.Conv2d(8, 4, 1)
        self.bn_tokens = nn.BatchNorm1d(3)
        self.bn_features = nn.BatchNorm1d(16)  # before the Linear: pnnx folds one after it into the Linear
        self.fc = nn.Linear(16, 12)
        self.unfold = nn.Unfold(kernel_size=(2, 3), stride=(2, 3))
        self.pool = nn.AdaptiveAvgPool1d(3)
        self.blur = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False, padding_mode="reflect")
        he_init(self)
        randomize(self)  # from torch's global generator, seeded by build_model

    def forward(self, x):
        x = self.conv(self.pad(x))                                   # (2, 8, 6, 10)
        b, c, h, w = x.shape
        gate = self.eca(x.mean((2, 3)).view(b, 1, c)).sigmoid()
        x = x * gate.view(b, c, 1, 1)
        norm = x.norm(p=2, dim=(2, 3), keepdim=True)
        x = x + torch.addcmul(self.grn_bias, self.grn_weight, x * (norm / (norm.mean(dim=1, keepdim=True) + 1e-6)))
        q = self.query(x).reshape(b, 4, 4, h * w).transpose(-1, -2)  # (2, 4 heads, 60, 4)
        k = self.key(x).reshape(b, 4, h * w).transpose(1, 2).unsqueeze(1)
        v = self.value(x).reshape(b, 4, h * w).transpose(1, 2).unsqueeze(1)
        t = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, h * w, 16)
        body, last = t[..., :-1], t[..., -1:]
        t = torch.cat([body * last.sigmoid(), last], dim=-1)         # (2, 60, 16)
        tokens = self.bn_tokens(t.reshape(b, 3, -1)).reshape_as(t)
        features = self.fc(self.bn_features(tokens.mean(1)))          # BatchNorm1d on (2, 16)
        patches = self.unfold(x)                                      # (2, 8 * 6, 3 * 3)
        pooled = self.pool(patches.amax(dim=1, keepdim=True) + patches.amin(dim=2).unsqueeze(1).mean(2, True))
        return tokens, features, pooled, self.blur(x)


# ---------------------------------------------------------------------------------------------
# Language models: transformers' own classes, built small, with eager attention and no cache, traced at a
# fixed sequence length on int64 token ids. Each sits in a wrapper because pnnx traces positional tensor
# arguments and tensor results only; the wrapper passes return_dict=False at the call, since transformers
# 5.24's GPT2LMHeadModel fails with it in the config (its inner model then returns a tuple that the head
# reads as an output object).
#
# GPT-2 ties its output projection (lm_head) to the token embedding; pnnx 20261020 writes such a module with
# the shared table as an extra input operand besides its own @weight, which its own Python script cannot run
# either: kuiper/runtime/tied.py checks and drops that operand.


def transformers_module():
    from kuiper.app.export import import_torchvision

    import_torchvision()  # transformers imports torchvision when it is installed
    import transformers

    return transformers


def random_biases(model: nn.Module, std: float = 0.1) -> None:
    """transformers zero every bias at init: give them values (from torch's global generator), so that a layer
    that dropped or misplaced its bias shows, and pnnx cannot merge equal biases into one constant."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") and not bool(p.any()):
                p.normal_(0.0, std)


class CausalLMLogits(nn.Module):
    """input_ids (b, n) int64 -> logits (b, n, vocab)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids, return_dict=False)[0]


class EncoderWithPaddingMask(nn.Module):
    """input_ids, token_type_ids, attention_mask (b, n) int64 -> last hidden state (b, n, hidden) and the pooled
    first token (b, hidden).

    The padding mask (1 keeps a token, 0 pads it) becomes the additive (b, 1, n, n) bias here, as transformers'
    eager_mask builds it (as bool, broadcast over the queries, then where(keep, 0, finfo.min)), and goes to the
    model as a ready 4-d mask. transformers 5.24 gathers it with index tensors, padding_mask[batch_idx, kv_idx],
    which pnnx 20261020 writes as `Tensor.index expr=[[0,1],[0]]`: the indices' shapes and the key positions
    lost, so neither kuiper nor pnnx's own Python script could run that graph. Indexing with None keeps it a
    reshape."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, token_type_ids, attention_mask):
        b, n = input_ids.shape
        keep = attention_mask.to(torch.bool)[:, None, None, :].expand(b, 1, n, n)
        bias = torch.where(keep, torch.zeros(()), torch.finfo(torch.float32).min)
        hidden, pooled = self.model(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=bias,
                                    return_dict=False)
        return hidden, pooled


def gpt2_tiny() -> nn.Module:
    """Input (2, 12) token ids: GPT-2 with 2 blocks of 2 heads over 32 features, 160 tokens, 32 positions."""
    transformers = transformers_module()
    config = transformers.GPT2Config(vocab_size=160, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                     initializer_range=0.1, bos_token_id=0, eos_token_id=0, use_cache=False,
                                     attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(config)
    randomize(model)  # its LayerNorms
    random_biases(model)
    return CausalLMLogits(model)


def bert_tiny() -> nn.Module:
    """Inputs (2, 10) token ids, token types and padding mask: BERT with 2 layers of 3 heads over 48 features,
    160 tokens, 2 token types, 32 positions, and its pooler."""
    transformers = transformers_module()
    config = transformers.BertConfig(vocab_size=160, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
                                     intermediate_size=96, max_position_embeddings=32, type_vocab_size=2,
                                     initializer_range=0.1, attn_implementation="eager", use_cache=False)
    model = transformers.BertModel(config)
    randomize(model)
    random_biases(model)
    return EncoderWithPaddingMask(model)


def token_ids(vocab: int):
    """Inputs for a model of token ids alone: uniform ids in [0, vocab)."""

    def make(g: torch.Generator, shapes: tuple) -> list:
        return [torch.randint(0, vocab, shape, generator=g) for shape in shapes]

    return make


def bert_inputs(g: torch.Generator, shapes: tuple) -> list:
    """Token ids in [0, 160); token type 0 for the first half of each row and 1 for the rest (a sentence pair);
    a padding mask keeping the whole first row and padding the last 3 tokens of the others."""
    ids = torch.randint(0, 160, shapes[0], generator=g)
    n = shapes[0][1]
    types = (torch.arange(n) >= n // 2).long().expand(shapes[1]).contiguous()
    mask = torch.ones(shapes[2], dtype=torch.long)
    mask[1:, n - 3:] = 0
    return [ids, types, mask]


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One exported model. The first case's shapes are the ones pnnx traces at."""

    build: type
    description: str
    cases: tuple  # ((case name, (input shape, ...)), ...)
    # ("<pnnx operator name>.<attribute>", ...): pnnx names an operator by its torch module path,
    # except a convolution it folded a BatchNorm into (convbn2d_N), whose weights changed anyway
    weights: tuple
    input_scale: float = 1.0
    module_operators: tuple = ()  # module classes pnnx keeps whole (its moduleop option)
    custom_ops: tuple = ()        # the configs that serve them, from the repository root
    # (generator, shapes) -> input tensors, for inputs other than float32 noise (token ids); None: noise
    inputs: object = None


SPECS = {
    "resnet18": Spec(
        ResNet18,
        "ResNet-18 (BasicBlock [2,2,2,2], 1000 classes), random weights and BatchNorm statistics; "
        "exported at 1x3x224x224, run at batch 1, 3 and 8. The embedded default model.",
        (("b1", ((1, 3, 224, 224),)), ("b3", ((3, 3, 224, 224),)), ("b8", ((8, 3, 224, 224),))),
        ("fc.bias",),
    ),
    "conv_zoo": Spec(
        ConvZoo,
        "BatchNorm on the input, then Conv2d with stride 2 on an odd size, dilation, depthwise, groups, "
        "1x1, no bias, padding='same' with an even kernel; ConvTranspose2d with output_padding, groups, "
        "dilation.",
        (("b2", ((2, 3, 15, 17),)),),
        ("bn.running_mean", "bn.running_var", "bn.weight", "bn.bias", "stride2.weight", "same.weight",
         "up.weight", "up_grouped.weight"),
    ),
    "act_zoo": Spec(
        ActZoo,
        "A 1x1 conv, then each activation as its own output: ReLU, ReLU6, Hardtanh(-0.5,0.75), "
        "LeakyReLU, Sigmoid, SiLU, Hardsigmoid, Hardswish, Tanh, GELU (erf and tanh), Softmax dim=1, "
        "F.softmax dim=-1.",
        (("b2", ((2, 7, 5, 9),)),),
        ("mix.weight", "mix.bias"),
        input_scale=3.0,
    ),
    "pool_zoo": Spec(
        PoolZoo,
        "MaxPool2d and AvgPool2d with ceil_mode, padding, dilation, count_include_pad=False and "
        "divisor_override; adaptive avg/max pooling to sizes that do not divide 13x11.",
        (("b2", ((2, 5, 13, 11),)),),
        ("offset.weight", "offset.bias"),
    ),
    "resize_zoo": Spec(
        ResizeZoo,
        "nn.Upsample nearest (x2, x1.5, to a size) and bilinear (align_corners True to a size, False by "
        "(1.5,2.5)); F.interpolate with recompute_scale_factor=True, bilinear x1.7 and nearest (2,0.5).",
        (("b2", ((2, 5, 7, 9),)),),
        ("mix.weight", "mix.bias"),
    ),
    "shape_zoo": Spec(
        ShapeZoo,
        "permute, reshape/view, transpose, split (sizes and a list), chunk, cat, flatten (torch and "
        "nn), mean and sum over dims with and without keepdim, Linear on 3-D and 2-D inputs.",
        (("b2", ((2, 6, 5, 7),)),),
        ("tokens_fc.weight", "tokens_fc.bias", "flat_fc.weight", "flat_fc.bias"),
    ),
    "expr_two_inputs": Spec(
        ExprTwoInputs,
        "Two inputs (the second broadcast over channels), arithmetic folded into pnnx.Expression "
        "(add sub mul div neg pow sqrt rsqrt abs exp log max min, literals), a constant "
        "pnnx.Attribute, a tuple output.",
        (("b2", ((2, 5, 7, 9), (2, 1, 7, 9))),),
        ("offset.data",),
    ),
    "unet_tiny": Spec(
        UNetTiny,
        "Small UNet/YOLO-like net: Conv+BN(folded)+SiLU, MaxPool, chunk, cat, nearest and bilinear "
        "upsampling, a BatchNorm after an add, two heads; exported at 2x3x32x48, also run at 1x3x64x40.",
        (("b2", ((2, 3, 32, 48),)), ("b1_64x40", ((1, 3, 64, 40),))),
        ("bn_add.running_mean", "bn_add.running_var", "bn_add.weight", "bn_add.bias", "head_full.weight",
         "head_low.weight", "head_low.bias"),
    ),
    "reshape_batch": Spec(
        ReshapeBatch,
        "YOLO-head style view to 5-D, permute, reshape, and a flatten-by-view into Linear; pnnx writes "
        "the export batch (2) into the shapes; also run at batch 4.",
        (("b2", ((2, 6, 8, 10),)), ("b4", ((4, 6, 8, 10),))),
        ("conv.weight", "conv.bias", "fc.bias"),
    ),
    "vit_tiny": Spec(
        vit_tiny,
        "torchvision's VisionTransformer, small: 8x8 patches of 32x32, a class token, 2 blocks of 2-head "
        "nn.MultiheadAttention, LayerNorm, GELU MLPs, the class token's row selected for the head. pnnx folds "
        "the class token's expand to the export batch, so it runs at batch 1.",
        (("b1", ((1, 3, 32, 32),)),),
        ("heads.head.weight",),
    ),
    "swin_tiny": Spec(
        swin_tiny,
        "torchvision's SwinTransformer, small: shifted 4x4 windows (torch.roll, attention masks as "
        "pnnx.Attribute), patch merging by strided Tensor.slice, LayerNorm. Exported at batch 2: pnnx writes "
        "the masks for the export batch.",
        (("b2", ((2, 3, 32, 32),)),),
        ("head.weight",),
    ),
    "swin_v2_tiny": Spec(
        swin_v2_tiny,
        "torchvision's Swin V2 blocks, small, without the qkv bias (pnnx loses it): cosine attention "
        "(torch.norm, aten::clamp_min, matmul), F.linear, torch.unbind, F.pad of a 9x9 grid to 12x12.",
        (("b1", ((1, 3, 36, 36),)),),
        ("head.weight",),
    ),
    "convnext_tiny": Spec(
        convnext_tiny,
        "torchvision's ConvNeXt, small: depthwise 7x7, permute to channels-last, LayerNorm, Linear MLP, "
        "layer scale (random, not 1e-6), at batch 2 and 1.",
        (("b2", ((2, 3, 32, 32),)), ("b1", ((1, 3, 32, 32),))),
        ("classifier.2.weight",),
    ),
    "shufflenet_tiny": Spec(
        shufflenet_tiny,
        "torchvision's ShuffleNetV2, small: chunk, nn.ChannelShuffle, cat, depthwise 3x3, at batch 2 and 1.",
        (("b2", ((2, 3, 64, 64),)), ("b1", ((1, 3, 64, 64),))),
        ("fc.weight",),
    ),
    "attention_zoo": Spec(
        AttentionZoo,
        "nn.MultiheadAttention with a float mask input (batch x heads), cross-attention with kdim=vdim=6, "
        "F.scaled_dot_product_attention with a mask and causal, LayerNorm over (5, 8) without affine; batch 2.",
        (("b2", ((2, 5, 8), (4, 5, 5), (2, 7, 6))),),
        ("self_attention.in_proj_weight", "cross_attention.q_proj_weight"),
    ),
    "timm_ops": Spec(
        TimmOps,
        "The operators timm's families add: nn.ConstantPad2d kept whole, ECA's Conv1d along the channels, "
        "ConvNeXt V2's response norm (torch.addcmul with a constant value), multi-query attention (one key "
        "head broadcast over four query heads), a split of the last column (tensor_split indices=(-1)), "
        "BatchNorm1d on (N, C, L) and on (N, C), Tensor.reshape_as, nn.Unfold, torch.amax and torch.amin, "
        "nn.AdaptiveAvgPool1d, Conv2d padding_mode=reflect; at batch 2.",
        (("b2", ((2, 6, 5, 7),)),),
        ("eca.weight", "bn_features.running_var"),
    ),
    "custom_scale": Spec(
        CustomScale,
        "A user module kept whole by pnnx (moduleop): ChannelScale, x * @scale[c] + @shift[c], then "
        "Hardtanh(-0.5,0.75); runs with the custom operator examples/custom_ops/channel_scale; also run "
        "at 1x5x4x6.",
        (("b2", ((2, 5, 7, 9),)), ("b1_4x6", ((1, 5, 4, 6),))),
        ("channel_scale.scale", "channel_scale.shift"),
        module_operators=("ChannelScale",),
        custom_ops=("examples/custom_ops/channel_scale/channel_scale.toml",),
    ),
    "gpt2_tiny": Spec(
        gpt2_tiny,
        "transformers' GPT2LMHeadModel, small (2 blocks, 2 heads, 32 features, 160 tokens), eager attention, no "
        "cache, random biases: int64 token ids in, logits out, batch 2 of 12 tokens. pnnx folds the positions "
        "and the causal mask into constants, writes Conv1D as torch.addmm and gelu_new as an expression around "
        "F.tanh, and gives the tied lm_head the embedding table as an extra input (kuiper/runtime/tied.py).",
        (("b2", ((2, 12),)),),
        ("model.lm_head.weight", "model.transformer.h.0.ln_1.weight", "model.transformer.ln_f.bias"),
        inputs=token_ids(160),
    ),
    "bert_tiny": Spec(
        bert_tiny,
        "transformers' BertModel, small (2 layers, 3 heads, 48 features, 160 tokens), eager attention: int64 "
        "token ids, token types and a padding mask in; the mask as bool, expanded, torch.where to an additive "
        "bias; pnnx fuses the attention into nn.MultiheadAttention; the last hidden state and the pooled first "
        "token (Tensor.select, Tanh) out; batch 2 of 10 tokens, the second padded by 3.",
        (("b2", ((2, 10), (2, 10), (2, 10))),),
        ("model.embeddings.word_embeddings.weight", "model.pooler.dense.weight"),
        inputs=bert_inputs,
    ),
}


def torch_value(model: nn.Module, key: str) -> torch.Tensor:
    """The torch tensor behind a weights key; pnnx.Attribute's `data` is the parameter itself."""
    path, attr = key.rsplit(".", 1)
    return model.get_parameter(path) if attr == "data" else getattr(model.get_submodule(path), attr)


def case_inputs(name: str, case: str, spec: Spec, shapes: tuple) -> list:
    """Seeded by the model and case names, so each case gets its own, reproducible values."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{name}/{case}".encode()))
    if spec.inputs is not None:
        return spec.inputs(g, shapes)
    return [torch.randn(shape, generator=g) * spec.input_scale for shape in shapes]


def operator_types(param: Path) -> list:
    lines = param.read_text().splitlines()[2:]  # magic, then the operator/operand counts
    return sorted({line.split()[0] for line in lines if line.strip()})


def check_output(name: str, case: str, k: int, out: np.ndarray) -> None:
    where = f"{name}/{case} output {k}"
    if not np.all(np.isfinite(out)):
        raise SystemExit(f"{where}: not finite")
    if out.size > 1 and float(out.std()) == 0.0:
        raise SystemExit(f"{where}: constant {out.flat[0]}")
    if float(np.abs(out).max()) > 1e4:
        raise SystemExit(f"{where}: max |value| {np.abs(out).max():.3g}, activations out of range")


def check_weights(name: str, bin_path: Path, weights: dict) -> None:
    """Each saved value must be byte-for-byte what pnnx stored, or pnnx transformed it."""
    with zipfile.ZipFile(bin_path) as z:
        stored = set(z.namelist())
        for key, value in weights.items():
            if key not in stored:
                raise SystemExit(f"{name}: {key} is not in {bin_path.name}")
            data = np.frombuffer(z.read(key), dtype=np.float32)
            if not np.array_equal(data, value.ravel()):
                raise SystemExit(f"{name}: pnnx stored {key} differently from torch")


def build_model(name: str) -> nn.Module:
    """The torch model exactly as exported (same seed, same construction): benchmarks import this."""
    torch.manual_seed(0)
    return SPECS[name].build().eval()


def export_one(name: str, spec: Spec, out_dir: Path) -> dict:
    model = build_model(name)
    cases = [(case, case_inputs(name, case, spec, shapes)) for case, shapes in spec.cases]

    model_dir = out_dir / name
    shutil.rmtree(model_dir, ignore_errors=True)  # drop files of cases that no longer exist
    model_dir.mkdir(parents=True)

    with tempfile.TemporaryDirectory() as tmp:
        run_pnnx(model, [t.numpy() for t in cases[0][1]], Path(tmp), name, model_dir / "pnnx.log",
                 spec.module_operators)
        # pnnx also writes the traced .pt, ncnn files, onnx and python scripts: keep only the graph
        for suffix in (".pnnx.param", ".pnnx.bin"):
            shutil.move(str(Path(tmp) / f"{name}{suffix}"), model_dir / f"{name}{suffix}")

    entry_cases = []
    with torch.no_grad():
        for case, inputs in cases:
            result = model(*inputs)
            outputs = list(result) if isinstance(result, tuple) else [result]
            entry = {"name": case, "inputs": [], "outputs": []}
            for kind, tensors in (("in", inputs), ("out", outputs)):
                for k, t in enumerate(tensors):
                    array = t.numpy()  # token ids stay int64
                    array = np.ascontiguousarray(array, dtype=np.float32 if array.dtype.kind == "f" else None)
                    if kind == "out":
                        check_output(name, case, k, array)
                    np.save(model_dir / f"{case}_{kind}{k}.npy", array)
                    entry[f"{kind}puts"].append(f"{name}/{case}_{kind}{k}.npy")
            entry_cases.append(entry)

    weights = {key: torch_value(model, key).detach().numpy().astype(np.float32) for key in spec.weights}
    check_weights(name, model_dir / f"{name}.pnnx.bin", weights)
    np.savez(model_dir / "weights.npz", **weights)
    size = (model_dir / "weights.npz").stat().st_size
    if size > WEIGHTS_LIMIT:
        raise SystemExit(f"{name}: weights.npz is {size} bytes, over {WEIGHTS_LIMIT}")

    entry = {
        "param": f"{name}/{name}.pnnx.param",
        "bin": f"{name}/{name}.pnnx.bin",
        "description": spec.description,
        "operator_types": operator_types(model_dir / f"{name}.pnnx.param"),
        "cases": entry_cases,
        "weights": f"{name}/weights.npz",
        # every model here is built from a seed, never trained: `kuiper run` says so when given an image
        "random_weights": True,
    }
    if spec.custom_ops:  # relative to the manifest, as every other path in it
        entry["custom_ops"] = [os.path.relpath(ROOT / config, out_dir) for config in spec.custom_ops]
    return entry


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "models", help="output folder (default: models/)")
    parser.add_argument("--only", nargs="+", choices=list(SPECS), metavar="NAME", help="export only these models")
    args = parser.parse_args(argv)

    out_dir = args.out.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = out_dir / "manifest.json"
    # with --only, the other models' entries stay as they were; models another tool made stay always
    previous, others = {}, {}
    if manifest_path.exists():
        old = json.loads(manifest_path.read_text())
        others = {name: entry for name, entry in old["models"].items() if "generator" in entry}
        if args.only:
            previous = {**old["models"], **old.get("custom_op_models", {})}

    entries = {}
    for name in args.only or SPECS:
        print(f"exporting {name}", flush=True)
        entries[name] = export_one(name, SPECS[name], out_dir)

    import pnnx

    manifest = {
        "generator": "tools/export_models.py",
        "pnnx_version": pnnx.__version__,
        "torch_version": torch.__version__,
    }
    try:  # the language models' classes
        manifest["transformers_version"] = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        pass
    for section, custom in (("models", False), ("custom_op_models", True)):
        manifest[section] = {name: entries.get(name) or previous[name] for name, spec in SPECS.items()
                             if bool(spec.custom_ops) == custom and (name in entries or name in previous)}
    manifest["models"].update(others)
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {manifest_path}")


if __name__ == "__main__":
    main()
