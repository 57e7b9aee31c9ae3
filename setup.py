"""Packaging beyond setup.cfg: the embedded ResNet-18 ships inside the package, so that `kuiper run` works
from a plain (non-editable) install. models/ stays where the tests, lessons and export tool expect it: the
package kuiper.models is mapped onto it, and only the default model and its batch-1 case are carried. The
ImageNet class names (kuiper/data/) ship too: `kuiper run` names the classes of a 1000-class output."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["kuiper", "kuiper.*"]), "kuiper.models", "kuiper.cl"],
    package_dir={"kuiper.models": "models", "kuiper.cl": "cl"},
    package_data={"kuiper": ["data/imagenet_classes.txt"],
                  "kuiper.cl": ["*.cl", "*.h"],
                  "kuiper.models": ["manifest.json", "resnet18/resnet18.pnnx.param", "resnet18/resnet18.pnnx.bin",
                                    "resnet18/b1_in0.npy", "resnet18/b1_out0.npy"]},
)
