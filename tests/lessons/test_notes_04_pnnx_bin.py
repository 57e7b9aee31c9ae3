"""The claims of lesson 4: the .bin zip store, read zero-copy, checked against an independent header parser."""

import mmap
import struct
import zipfile

import numpy as np
import pytest

from kuiper import PnnxFormatError, pnnx
from kuiper.pnnx import BinFile
from lesson_tools import MODELS, RESNET, check_shell_commands, manifest

LOCAL = struct.Struct("<4sHHHHHIIIHH")  # the 30 fixed bytes of a zip local file header


def mapped(path):
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def data_offsets(path):
    """{member: offset of its data}, by walking the local headers from the start of the file."""
    raw = mapped(path)
    with zipfile.ZipFile(path) as z:
        sizes = {i.filename: i.file_size for i in z.infolist()}
    offsets, at = {}, 0
    while raw[at:at + 4] == b"PK\x03\x04":
        fields = LOCAL.unpack_from(raw, at)
        name_len, extra_len = fields[9], fields[10]
        name = raw[at + 30:at + 30 + name_len].decode()
        offsets[name] = at + 30 + name_len + extra_len
        at = offsets[name] + sizes[name]
    return offsets, raw


@pytest.mark.parametrize("name", ["resnet18", "conv_zoo", "pool_zoo"])
def test_every_attribute_view_is_the_bytes_at_its_local_header(name):
    entry = manifest()["models"][name]
    param, bin_path = MODELS / entry["param"], MODELS / entry["bin"]
    offsets, raw = data_offsets(bin_path)
    graph = pnnx.load(param, bin_path)
    declared = [(op, attr) for op in graph.operators for attr in op.attrs.values()]
    assert len(declared) == len(offsets)
    for op, attr in declared:
        member = f"{op.name}.{attr.name}"
        count = int(np.prod(attr.shape))
        expected = np.frombuffer(raw, dtype="<f4", count=count, offset=offsets[member]).reshape(attr.shape)
        assert attr.dtype == "f32"
        np.testing.assert_array_equal(attr.numpy(), expected)
        assert not attr.data.flags.writeable and not attr.data.flags.owndata


def test_members_are_stored_and_pnnx_writes_zip64_local_headers():
    bin_path = RESNET.with_suffix(".bin")
    with zipfile.ZipFile(bin_path) as z:
        infos = z.infolist()
    assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
    raw = mapped(bin_path)
    for info in infos:
        fields = LOCAL.unpack_from(raw, info.header_offset)
        assert fields[7] == fields[8] == 0xFFFFFFFF  # the sizes live in the zip64 extra field
        extra_id, _, size, compressed = struct.unpack_from("<HHQQ", raw, info.header_offset + 30 + fields[9])
        assert (extra_id, size, compressed) == (1, info.file_size, info.file_size)


def test_views_of_one_member_share_memory_and_weights_are_pytorchs_bits():
    store = BinFile(RESNET.with_suffix(".bin"))
    a = store.view("fc.weight", "f32", (1000, 512))
    b = store.view("fc.weight", "f32", (1000, 512))
    assert np.shares_memory(a, b)
    saved = np.load(MODELS / "resnet18" / "weights.npz")["fc.bias"]
    np.testing.assert_array_equal(store.view("fc.bias", "f32", (1000,)), saved)
    # all 11,684,712 parameters are float32 and fill the file but for its headers
    total = sum(np.prod(op.attrs[k].shape) for op in pnnx.load(RESNET).operators for k in op.attrs)
    assert total == 11_684_712
    assert 0 < RESNET.with_suffix(".bin").stat().st_size - 4 * total < 10_000


def test_bf16_and_c32_widen_to_the_right_values(tmp_path):
    (tmp_path / "m.pnnx.param").write_text(
        "7767517\n3 2\n"
        "pnnx.Attribute a 0 1 x @data=(2,2)bf16 #x=(2,2)f32\n"
        "pnnx.Attribute b 0 1 y @data=(3)c32 #y=(3)c64\n"
        "pnnx.Output o 2 0 x y\n")
    values = np.array([[0.1, -7.25], [65504.0, 1e-20]], dtype=np.float32)
    bits = (values.view(np.uint32) >> 16).astype("<u2")
    complex_values = np.array([1 - 0.5j, 0.25 + 2j, -3 + 0j], dtype=np.complex64)
    pairs = np.empty(3, dtype=[("real", "<f2"), ("imag", "<f2")])
    pairs["real"], pairs["imag"] = complex_values.real, complex_values.imag
    with zipfile.ZipFile(tmp_path / "m.pnnx.bin", "w") as z:
        z.writestr("a.data", bits.tobytes())
        z.writestr("b.data", pairs.tobytes())
    graph = pnnx.load(tmp_path / "m.pnnx.param")
    widened = graph.operators[0].attrs["data"].numpy()
    # reference: clear the low 16 bits of each float32
    expected = (values.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    np.testing.assert_array_equal(widened, expected)
    assert np.all(np.abs(widened - values) <= np.abs(values) * 2.0 ** -7)  # 7 mantissa bits kept
    np.testing.assert_array_equal(graph.operators[1].attrs["data"].numpy(), complex_values)


def test_a_compressed_member_is_refused(tmp_path):
    path = tmp_path / "c.pnnx.bin"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("op.weight", np.zeros(4, np.float32).tobytes())
    with pytest.raises(PnnxFormatError, match="compressed"):
        BinFile(path).view("op.weight", "f32", (4,))


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(4, capsys)
