"""Builders for small .pnnx.param/.pnnx.bin pairs written into a test's tmp_path, and fixtures that use them.

Not a conftest.py: a second module named conftest would shadow tests/conftest.py for `from conftest import`
in the other test folders. Import the fixtures by name.
"""

import warnings
import zipfile

import numpy as np
import pytest

# A valid little model: input -> Linear(3, 2) -> relu -> output. Tests break it one way at a time.
TINY_PARAM = """7767517
4 3
pnnx.Input               in0                      0 1 0 #0=(1,3)f32
nn.Linear                fc                       1 1 0 1 bias=True in_features=3 out_features=2 @bias=(2)f32 @weight=(2,3)f32 $input=0 #0=(1,3)f32 #1=(1,2)f32
F.relu                   relu                     1 1 1 2 $input=1 #1=(1,2)f32 #2=(1,2)f32
pnnx.Output              out                      1 0 2
"""
TINY_ARRAYS = {
    "fc.weight": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
    "fc.bias": np.array([0.5, -1.0], dtype=np.float32),
}
TINY_MEMBERS = {name: array.tobytes() for name, array in TINY_ARRAYS.items()}


class ModelFiles:
    """Writes param text and zip stores under one directory."""

    def __init__(self, root):
        self.root = root

    def param(self, text, name="m"):
        path = self.root / f"{name}.pnnx.param"
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        return path

    def bin(self, members, name="m", zip64=(), compressed=()):
        """A zip of `members` ({name: bytes}, order kept): stored, except names in `compressed` (deflated);
        names in `zip64` get zip64 headers although they are small."""
        path = self.root / f"{name}.pnnx.bin"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zipfile warns on the duplicate names some tests want
            with zipfile.ZipFile(path, "w") as archive:
                for member, data in members.items() if isinstance(members, dict) else members:
                    method = zipfile.ZIP_DEFLATED if member in compressed else zipfile.ZIP_STORED
                    info = zipfile.ZipInfo(member)
                    info.compress_type = method
                    with archive.open(info, "w", force_zip64=member in zip64) as f:
                        f.write(data)
        return path

    def raw(self, data, name="m", suffix=".pnnx.bin"):
        path = self.root / f"{name}{suffix}"
        path.write_bytes(data)
        return path


@pytest.fixture
def files(tmp_path):
    return ModelFiles(tmp_path)


@pytest.fixture
def tiny(files):
    """(param path, bin path) of the valid tiny model."""
    return files.param(TINY_PARAM), files.bin(TINY_MEMBERS)

