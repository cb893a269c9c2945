"""The PC2 point-cache format, written and read with numpy only (no bpy).

Layout (little endian), as Blender's Mesh Cache modifier and 3ds Max read it::

    char[12]  b"POINTCACHE2\\0"
    int32     file version (1)
    int32     number of points
    float32   start frame
    float32   sample rate (frames between samples; 1.0 = one sample per frame)
    int32     number of samples
    then      number of samples x number of points x float32 (x, y, z)

:class:`PC2Writer` streams one sample per call into a *temporary* file and
only moves it over the final path in :meth:`PC2Writer.commit`, so a cancelled
or failed bake never touches an earlier cache with the same name.
"""

import os
import struct

import numpy as np

MAGIC = b"POINTCACHE2\0"
VERSION = 1
HEADER = struct.Struct("<12siiffi")
HEADER_SIZE = HEADER.size  # 32 bytes
_COUNT_OFFSET = HEADER_SIZE - 4


def pack_header(num_points, start_frame, sample_rate, num_samples):
    return HEADER.pack(MAGIC, VERSION, int(num_points), float(start_frame), float(sample_rate), int(num_samples))


def read_header(path):
    """Returns dict(version, num_points, start_frame, sample_rate, num_samples)."""
    with open(path, "rb") as f:
        raw = f.read(HEADER_SIZE)
    if len(raw) != HEADER_SIZE:
        raise ValueError(f"{path}: too short for a PC2 header")
    magic, version, points, start, rate, samples = HEADER.unpack(raw)
    if magic != MAGIC:
        raise ValueError(f"{path}: not a PC2 file (magic {magic!r})")
    return dict(version=version, num_points=points, start_frame=start, sample_rate=rate, num_samples=samples)


def read(path):
    """Returns (header dict, samples as (num_samples, num_points, 3) float32)."""
    head = read_header(path)
    data = np.fromfile(path, dtype="<f4", offset=HEADER_SIZE)
    expected = head["num_samples"] * head["num_points"] * 3
    if data.size != expected:
        raise ValueError(f"{path}: {data.size} floats after the header, header says {expected}")
    return head, data.reshape(head["num_samples"], head["num_points"], 3)


def samples(path):
    """The samples of a complete file as a read-only memory map,
    (num_samples, num_points, 3) float32: nothing is loaded until read."""
    head = read_header(path)
    shape = (head["num_samples"], head["num_points"], 3)
    if os.path.getsize(path) != HEADER_SIZE + 12 * shape[0] * shape[1]:
        raise ValueError(f"{path}: size does not match its header")
    return np.memmap(path, dtype="<f4", mode="r", offset=HEADER_SIZE, shape=shape)


class PC2Writer:
    """Streams samples to ``<final>.tmp-<pid>``; :meth:`commit` renames it into place.

    The header's sample count is patched on :meth:`finish`, so a file that
    was cut short (crash, disk full) is never mistaken for a complete one:
    it is never renamed to the final name at all.
    """

    def __init__(self, final_path, num_points, start_frame, sample_rate=1.0):
        self.final_path = final_path
        self.tmp_path = f"{final_path}.tmp-{os.getpid()}"
        self.num_points = int(num_points)
        self.num_samples = 0
        self._file = open(self.tmp_path, "wb")
        try:
            self._write(pack_header(num_points, start_frame, sample_rate, 0))
        except BaseException:
            self.discard()
            raise

    def _write(self, data):
        self._file.write(data)

    def add(self, positions):
        """Appends one sample: (num_points, 3) positions (any float dtype)."""
        positions = np.ascontiguousarray(positions, dtype="<f4")
        if positions.shape != (self.num_points, 3):
            raise ValueError(f"sample of shape {positions.shape}, the cache holds ({self.num_points}, 3)")
        self._write(positions.data)
        self.num_samples += 1

    def finish(self):
        """Writes the sample count and flushes to disk; the file stays temporary."""
        self._file.seek(_COUNT_OFFSET)
        self._write(struct.pack("<i", self.num_samples))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def commit(self):
        """Atomically replaces the final file with the finished temporary one."""
        os.replace(self.tmp_path, self.final_path)

    def discard(self):
        """Drops the temporary file; the final path is left as it was."""
        try:
            if not self._file.closed:
                self._file.close()
        except OSError:
            pass
        try:
            os.unlink(self.tmp_path)
        except FileNotFoundError:
            pass
        except OSError as exc:  # e.g. still mapped on Windows: a stray temp file, not a failed bake
            print(f"Drape: could not remove the temporary file {self.tmp_path}: {exc}")
