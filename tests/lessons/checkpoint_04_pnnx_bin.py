"""Checkpoint of lesson 4: exercises/lesson_04.py finds a member's data in the zip and widens bfloat16,
held to kuiper's BinFile and Attribute."""

import zipfile

import numpy as np
import pytest

from kuiper.pnnx.bin import BinFile
from kuiper.pnnx.records import Attribute
from lesson_tools import MODELS, exercise

ex = exercise(4)
BINS = [MODELS / "resnet18" / "resnet18.pnnx.bin", MODELS / "conv_zoo" / "conv_zoo.pnnx.bin",
        MODELS / "vit_tiny" / "vit_tiny.pnnx.bin"]


@pytest.mark.parametrize("path", BINS, ids=lambda p: p.parent.name)
def test_data_offset_of_every_member(path):
    binfile = BinFile(path)
    raw = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        infos = {info.filename: info for info in archive.infolist()}
    for name in binfile.names():
        offset = ex.data_offset(path, name)
        assert offset == binfile._data_offset(infos[name]), name
        view = binfile.view(name, "u8", (infos[name].file_size,))
        assert raw[offset:offset + infos[name].file_size] == view.tobytes(), name


def test_bf16_widens_like_kuipers_attribute():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2 ** 16, size=4096, dtype=np.uint16)
    got = np.asarray(ex.bf16_to_float32(bits))
    expected = Attribute("w", "bf16", bits.shape, bits).numpy()
    assert got.dtype == np.float32 and got.shape == bits.shape
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))  # bit for bit, NaNs too


def test_bf16_of_known_values():
    values = np.array([1.5, -2.0, 3.140625, 0.0, -0.0, 2.0 ** -130], np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(ex.bf16_to_float32(bits), values)
