"""The .pnnx.bin reader: a zip archive of uncompressed members, one per attribute, named `<op>.<key>`.

The file is memory-mapped once; the standard library's zipfile reads the central directory (it knows
zip64), and each member's data offset comes from its local file header. Members are handed out as
read-only numpy views of the map, so loading a model copies no weights. The views keep the map alive.
CRCs are not checked: that would read every byte, which is what the zero-copy design avoids.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import zipfile

import numpy as np

from kuiper.core.errors import PnnxFormatError
from kuiper.pnnx.dtypes import STORAGE

_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, fields we skip, name length, extra length
_LOCAL_SIGNATURE = b"PK\x03\x04"
_ENCRYPTED = 0x1
_UTF8_NAME = 0x800
# zipfile reports a damaged archive through more than BadZipFile (seeks past the ends, cut-off
# records, undecodable names); each of these means "not a zip we can read".
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, OverflowError,
               struct.error, NotImplementedError)


class BinFile:
    """A memory-mapped .pnnx.bin. `view(name, dtype, shape)` gives a member's bytes as an array."""

    def __init__(self, path):
        self.path = os.fspath(path)
        try:
            with open(self.path, "rb") as f:
                self._map = self._map_file(f)
                try:
                    with zipfile.ZipFile(f) as archive:
                        infos = archive.infolist()
                except _ZIP_ERRORS as e:
                    raise PnnxFormatError(f"{self.path}: not a readable zip archive ({e})") from None
        except OSError as e:
            raise PnnxFormatError(f"{self.path}: cannot open the weight file ({e.strerror})") from None
        self._members = {}
        for info in infos:
            if info.filename in self._members:
                raise self._error(info.filename, "appears twice in the archive")
            self._members[info.filename] = info

    def _map_file(self, f) -> mmap.mmap:
        if os.fstat(f.fileno()).st_size == 0:  # mmap refuses empty files
            raise PnnxFormatError(f"{self.path}: not a readable zip archive (the file is empty)")
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    def _error(self, name: str, what: str) -> PnnxFormatError:
        return PnnxFormatError(f"{self.path} [member {name}]: {what}")

    def names(self) -> list:
        """Member names in archive order."""
        return list(self._members)

    def __contains__(self, name: str) -> bool:
        return name in self._members

    def view(self, name: str, dtype: str, shape: tuple, declared_at: str = "") -> np.ndarray:
        """Member `name` as a read-only array of pnnx type `dtype` (storage dtype, see dtypes.STORAGE) and
        `shape`. The member must be stored uncompressed and hold exactly the bytes the shape needs; that is
        checked with Python ints before anything is allocated. `declared_at` is added to error messages."""
        where = f" (declared at {declared_at})" if declared_at else ""
        info = self._members.get(name)
        if info is None:
            raise self._error(name, f"missing from the archive{where}")
        if info.compress_type != zipfile.ZIP_STORED:
            raise self._error(name, f"is compressed (method {info.compress_type}); pnnx stores members uncompressed")
        if info.flag_bits & _ENCRYPTED:
            raise self._error(name, "is encrypted")
        storage = STORAGE.get(dtype)
        if storage is None:
            raise self._error(name, f"unknown element type {dtype!r}{where}")
        count = math.prod(shape)
        need = count * storage.itemsize
        if info.file_size != need or info.compress_size != need:
            raise self._error(
                name, f"holds {info.file_size} bytes but ({','.join(map(str, shape))}){dtype} needs {need}{where}")
        offset = self._data_offset(info)
        if offset + need > len(self._map):
            raise self._error(name, f"data runs past the end of the file at byte {len(self._map)} (truncated?)")
        return np.frombuffer(self._map, dtype=storage, count=count, offset=offset).reshape(shape)

    def _data_offset(self, info: zipfile.ZipInfo) -> int:
        """Where the member's bytes start: after its local header, whose name and extra field may differ
        in length from the central directory's copy."""
        start = info.header_offset  # zipfile corrects it by where the archive starts: it can go negative
        if not 0 <= start <= len(self._map) - _LOCAL_HEADER.size:
            raise self._error(info.filename, f"local header at byte {start} lies outside the file")
        signature, name_len, extra_len = _LOCAL_HEADER.unpack_from(self._map, start)
        name_start = start + _LOCAL_HEADER.size
        encoding = "utf-8" if info.flag_bits & _UTF8_NAME else "cp437"
        if signature != _LOCAL_SIGNATURE or self._map[name_start:name_start + name_len] != \
                info.orig_filename.encode(encoding):
            raise self._error(info.filename, f"no matching local header at byte {start}")
        return name_start + name_len + extra_len
