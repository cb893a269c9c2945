"""The PC2 writer against the format itself, read with plain struct/numpy."""

import errno
import os
import struct

import numpy as np
import pytest

from drape.bake import pc2


def test_header_layout_and_samples_match_the_format(tmp_path):
    path = str(tmp_path / "c.pc2")
    rng = np.random.default_rng(1)
    samples = rng.normal(size=(7, 5, 3)).astype(np.float32)
    w = pc2.PC2Writer(path, 5, start_frame=3, sample_rate=1.0)
    for s in samples:
        w.add(s.astype(np.float64))
    w.finish()
    assert not os.path.exists(path), "nothing at the final path before commit"
    w.commit()
    raw = open(path, "rb").read()
    # Independent decoding of the documented layout.
    assert raw[:12] == b"POINTCACHE2\0"
    version, points, start, rate, count = struct.unpack("<iiffi", raw[12:32])
    assert (version, points, start, rate, count) == (1, 5, 3.0, 1.0, 7)
    assert len(raw) == 32 + 7 * 5 * 3 * 4
    body = np.frombuffer(raw[32:], dtype="<f4").reshape(7, 5, 3)
    np.testing.assert_array_equal(body, samples)
    head, data = pc2.read(path)
    assert head["num_samples"] == 7
    np.testing.assert_array_equal(data, samples)
    np.testing.assert_array_equal(pc2.samples(path), samples)


def test_discard_leaves_an_existing_cache_untouched(tmp_path):
    path = str(tmp_path / "c.pc2")
    w = pc2.PC2Writer(path, 2, 1)
    w.add(np.ones((2, 3)))
    w.finish()
    w.commit()
    before = open(path, "rb").read()
    w2 = pc2.PC2Writer(path, 2, 1)
    w2.add(np.zeros((2, 3)))
    w2.discard()
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == ["c.pc2"]


def test_wrong_sample_shape_is_refused(tmp_path):
    w = pc2.PC2Writer(str(tmp_path / "c.pc2"), 4, 1)
    with pytest.raises(ValueError):
        w.add(np.zeros((3, 3)))
    w.discard()


def test_disk_full_raises_and_leaves_no_final_file(tmp_path, monkeypatch):
    path = str(tmp_path / "c.pc2")
    w = pc2.PC2Writer(path, 2, 1)

    def full(data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(w, "_write", full)
    with pytest.raises(OSError) as info:
        w.add(np.zeros((2, 3)))
    assert info.value.errno == errno.ENOSPC
    w.discard()
    assert os.listdir(tmp_path) == []
