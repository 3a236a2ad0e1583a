"""WebP and BMP outputs, and floating-point TIFF read and written through tifffile
(clpatch.io.images, clpatch.io.video): exact round trips, the formats' limits, and the
error naming the `tiff` extra when tifffile is missing."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from PIL import Image

from clpatch.io import images as imageio
from clpatch.io.video import VideoWriter, read_video

TIFF_EXTRA = 'pip install "clpatch[tiff]"'


def uint8(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8)


def floats(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """float32 values no 8- or 16-bit file holds: negative, fractional, above 65535."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 1e5).astype(np.float32)


@pytest.fixture
def no_tifffile(monkeypatch):
    """`import tifffile` fails, as when the optional package is not installed."""
    monkeypatch.setitem(sys.modules, "tifffile", None)


# ---- WebP and BMP --------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_webp_is_lossless_and_exact(tmp_path, mode):
    data = uint8((13, 17, len(mode)), seed=1)
    colour = data[..., :3]
    alpha = data[..., 3].copy() if mode == "RGBA" else None
    if alpha is not None:
        alpha[:4] = 0  # the colour under fully transparent pixels is kept too (exact=True)
    info = imageio.ImageInfo(8, mode, alpha)
    path = tmp_path / "out.webp"
    imageio.write_image(path, colour.astype(np.float32) + 0.3, info)  # rounded on the way out
    image, read_info = imageio.read_image(path)
    assert (read_info.format, read_info.mode, read_info.bit_depth) == ("WEBP", mode, 8)
    np.testing.assert_array_equal(image, colour)
    if alpha is not None:
        np.testing.assert_array_equal(read_info.alpha, alpha)


def test_webp_stores_grayscale_as_rgb(tmp_path):
    grey = uint8((9, 11), seed=2)
    alpha = uint8((9, 11), seed=3)
    info = imageio.ImageInfo(8, "LA", alpha)
    assert info.describe("WEBP") == "8-bit LA WEBP (stored as RGBA)"
    imageio.write_image(tmp_path / "grey.webp", grey.astype(np.float32), info)
    image, read_info = imageio.read_image(tmp_path / "grey.webp")
    assert read_info.mode == "RGBA"
    np.testing.assert_array_equal(image, np.dstack([grey] * 3))
    np.testing.assert_array_equal(read_info.alpha, alpha)


@pytest.mark.parametrize("mode", ["L", "RGB"])
def test_bmp_round_trip(tmp_path, mode):
    data = uint8((10, 7) if mode == "L" else (10, 7, 3), seed=4)
    path = tmp_path / "out.BMP"
    imageio.write_image(path, data.astype(np.float32), imageio.ImageInfo(8, mode))
    image, read_info = imageio.read_image(path)
    assert (read_info.format, read_info.mode, read_info.bit_depth) == ("BMP", mode, 8)
    np.testing.assert_array_equal(image, data)


@pytest.mark.parametrize("suffix,name", [(".webp", "WebP"), (".bmp", "BMP"), (".jpg", "JPEG")])
def test_8bit_formats_refuse_16bit(tmp_path, suffix, name):
    path = tmp_path / f"deep{suffix}"
    info = imageio.ImageInfo(16, "L")
    message = rf"deep\{suffix}: {name} cannot store 16-bit images; write \.png or \.tif instead"
    with pytest.raises(imageio.ImageFileError, match=message):
        imageio.output_format(path, info)
    with pytest.raises(imageio.ImageFileError, match=message):
        imageio.write_image(path, np.zeros((4, 5), np.float32), info)
    assert not path.exists()


def test_bmp_refuses_alpha_and_webp_its_size_limit(tmp_path):
    with pytest.raises(imageio.ImageFileError, match=r"a\.bmp: BMP files .* keep no alpha "
                                                     r"channel; write \.png, \.tif or \.webp"):
        imageio.output_format(tmp_path / "a.bmp",
                              imageio.ImageInfo(8, "RGBA", np.zeros((2, 2), np.uint8)))
    side = imageio.WEBP_MAX_SIDE + 1
    with pytest.raises(imageio.ImageFileError, match=rf"wide\.webp: WebP images are at most "
                                                     rf"16383 pixels a side, this one is {side}x1"):
        imageio.write_image(tmp_path / "wide.webp", np.zeros((1, side), np.float32),
                            imageio.ImageInfo(8, "L"))
    with pytest.raises(imageio.ImageFileError, match=r"\.webp, \.bmp or \.npy"):
        imageio.output_format(tmp_path / "a.gif", imageio.ImageInfo(8, "L"))


def test_float_data_goes_to_8bit_formats_as_8bit(tmp_path):
    info = imageio.ImageInfo(None, "RGB", format="NPY")
    data = np.array([[[-5.0, 0.4, 254.6], [300.0, 7.0, 8.0]]], np.float32)
    for suffix in (".webp", ".bmp"):
        assert info.describe(imageio.output_format(tmp_path / f"a{suffix}", info)).startswith("8-bit")
        imageio.write_image(tmp_path / f"a{suffix}", data, info)
        image, read_info = imageio.read_image(tmp_path / f"a{suffix}")
        assert read_info.bit_depth == 8
        np.testing.assert_array_equal(image, [[[0, 0, 255], [255, 7, 8]]])


# ---- floating-point TIFF -------------------------------------------------------------------

@pytest.mark.parametrize("shape,mode", [((11, 13), "L"), ((11, 13, 3), "RGB"),
                                        ((11, 13, 4), "4-channel")])
def test_float32_tiff_round_trip_is_exact(tmp_path, shape, mode):
    tifffile = pytest.importorskip("tifffile")
    data = floats(shape, seed=5)
    src = tmp_path / "in.tif"
    tifffile.imwrite(src, data, photometric="rgb" if mode == "RGB" else "minisblack",
                     planarconfig="contig" if len(shape) == 3 else None)
    image, info = imageio.read_image(src)
    assert (info.bit_depth, info.mode, info.format, info.note) == (None, mode, "TIFF", None)
    assert info.alpha is None and info.describe() == f"float32 {mode} TIFF"
    assert image.dtype == np.float32
    np.testing.assert_array_equal(image, data)
    dst = tmp_path / "out.tiff"
    assert imageio.output_format(dst, info) == "TIFF"
    imageio.write_image(dst, image * 2, info)
    written = tifffile.imread(dst)
    assert written.dtype == np.float32
    np.testing.assert_array_equal(written, data * 2)
    again, again_info = imageio.read_image(dst)
    np.testing.assert_array_equal(again, data * 2)
    assert again_info.mode == mode
    assert imageio.read_array(dst)[0].dtype == np.float32  # `clpatch search` keeps floats


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_other_float_tiffs_are_read_as_float32(tmp_path, dtype):
    tifffile = pytest.importorskip("tifffile")
    data = (np.arange(30).reshape(5, 6) * 0.5 - 3).astype(dtype)
    tifffile.imwrite(tmp_path / "f.tif", data)
    image, info = imageio.read_image(tmp_path / "f.tif")
    assert image.dtype == np.float32 and info.bit_depth is None
    assert info.note == f"{np.dtype(dtype)} values read as float32 (and written back as float32)"
    np.testing.assert_array_equal(image, data.astype(np.float32))


def test_float_tiff_with_nan_is_refused(tmp_path):
    tifffile = pytest.importorskip("tifffile")
    data = np.zeros((4, 5), np.float32)
    data[1, 2] = np.nan
    tifffile.imwrite(tmp_path / "nan.tif", data)
    with pytest.raises(imageio.ImageFileError, match=r"nan\.tif: .*NaN or infinite"):
        imageio.read_image(tmp_path / "nan.tif")


def test_float_npy_is_written_as_float_tiff(tmp_path):
    tifffile = pytest.importorskip("tifffile")
    data = floats((6, 7, 3), seed=6)
    np.save(tmp_path / "a.npy", data)
    image, info = imageio.read_image(tmp_path / "a.npy")
    assert info.describe("TIFF") == "float32 RGB TIFF"
    imageio.write_image(tmp_path / "a.tif", image, info)
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "a.tif"), data)


def test_float_tiff_video_and_frame_directory(tmp_path):
    tifffile = pytest.importorskip("tifffile")
    video = floats((3, 8, 9), seed=7)
    with tifffile.TiffWriter(tmp_path / "stack.tif") as tif:
        for page in video:
            tif.write(page, photometric="minisblack", contiguous=False)
    frames, info = read_video(tmp_path / "stack.tif")
    assert (info.kind, info.frames, info.bit_depth) == ("tiff", 3, None)
    np.testing.assert_array_equal(frames, video)
    for target in ("out.tif", "frames"):
        with VideoWriter(tmp_path / target, info) as writer:
            for frame in frames:
                writer.write(frame)
        again, again_info = read_video(tmp_path / target)
        assert again_info.bit_depth is None
        np.testing.assert_array_equal(again, video)
    assert sorted(p.name for p in (tmp_path / "frames").iterdir())[0] == "frame_00000.tif"


def test_missing_tifffile_names_the_extra(tmp_path, no_tifffile):
    data = floats((5, 6), seed=8)
    Image.fromarray(data).save(tmp_path / "grey.tif")  # Pillow writes float32 gray (mode F)
    for read in (imageio.read_image, read_video):
        with pytest.raises(imageio.ImageFileError, match=r"grey\.tif: .*floating-point.* needs "
                                                         r"the optional tifffile package"
                           ) as error:
            read(tmp_path / "grey.tif")
        assert TIFF_EXTRA in str(error.value)
    info = imageio.ImageInfo(None, "L", format="NPY")
    with pytest.raises(imageio.ImageFileError, match=r"out\.tif: writing a floating-point TIFF "
                                                     r"needs the optional tifffile") as error:
        imageio.output_format(tmp_path / "out.tif", info)
    assert TIFF_EXTRA in str(error.value)
    with pytest.raises(imageio.ImageFileError, match=r"out\.tif: writing a floating-point TIFF"):
        imageio.write_image(tmp_path / "out.tif", data, info)
    assert not (tmp_path / "out.tif").exists()


def test_integer_tiffs_need_no_tifffile(tmp_path, no_tifffile):
    """8- and 16-bit grayscale and 8-bit RGB TIFF keep going through Pillow alone."""
    for data, info in [(uint8((5, 6)), imageio.ImageInfo(8, "L")),
                       (uint8((5, 6, 3)), imageio.ImageInfo(8, "RGB")),
                       (uint8((5, 6)).astype(np.uint16) * 257, imageio.ImageInfo(16, "L"))]:
        imageio.write_image(tmp_path / "int.tif", data.astype(np.float32), info)
        image, read_info = imageio.read_image(tmp_path / "int.tif")
        assert (read_info.bit_depth, read_info.mode) == (info.bit_depth, info.mode)
        np.testing.assert_array_equal(image, data)
        (tmp_path / "int.tif").unlink()
