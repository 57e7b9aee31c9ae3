"""Packaging beyond setup.cfg: what the commands read at run time ships inside the package, so that they work
from a plain (non-editable) install. models/ and cl/ stay where the tests, lessons and tools expect them: the
packages kuiper.models and kuiper.cl are mapped onto them (kuiper/core/shipped.py finds either copy). Of the
models only the defaults are carried: `kuiper run`'s ResNet-18 with its batch-1 case and `kuiper generate`'s
language model. The ImageNet class names (kuiper/data/) ship too: `kuiper run` names a 1000-class output's."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["kuiper", "kuiper.*"]), "kuiper.models", "kuiper.cl"],
    package_dir={"kuiper.models": "models", "kuiper.cl": "cl"},
    package_data={"kuiper": ["data/imagenet_classes.txt"],
                  "kuiper.cl": ["*.cl", "*.h"],
                  "kuiper.models": ["manifest.json", "resnet18/resnet18.pnnx.param", "resnet18/resnet18.pnnx.bin",
                                    "resnet18/b1_in0.npy", "resnet18/b1_out0.npy", "shakespeare/*.json",
                                    "shakespeare/model.safetensors"]},
)
