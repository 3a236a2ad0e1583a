"""The image files behind `clpatch denoise` (clpatch.io.images): reading and writing PNG, TIFF,
JPEG and .npy, the 16-bit colour PNG codec, added noise and PSNR."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from clpatch.io import images as imageio
from tests.helpers import DATA, load_image


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("suffix", [".png", ".tif", ".npy"])
def test_read_write_round_trip(tmp_path, channels, dtype, suffix):
    if suffix == ".tif" and dtype == np.uint16 and channels > 1:
        pytest.importorskip("tifffile")
    peak = np.iinfo(dtype).max
    rng = np.random.default_rng(channels)
    data = rng.integers(0, peak + 1, (13, 17, channels)).astype(dtype)
    data = data[..., 0] if channels == 1 else data
    path = tmp_path / f"image{suffix}"
    info = imageio.ImageInfo(8 * np.dtype(dtype).itemsize, imageio.MODES[channels],
                             data[..., -1] if channels in (2, 4) else None)
    colour = data[..., :3] if channels >= 3 else (data[..., 0] if channels == 2 else data)
    # Half-units and out-of-range values are rounded and clipped on the way out.
    shifted = colour.astype(np.float32) + 0.3
    shifted[0, 0] = -40
    shifted[0, 1] = peak + 40
    imageio.write_image(path, shifted, info)
    image, read_info = imageio.read_image(path)
    expected = colour.astype(np.float32)
    expected[0, 0], expected[0, 1] = 0, peak
    if suffix == ".npy" and channels in (2, 4):
        # a .npy array has no alpha: the written alpha comes back as a channel of data
        assert read_info.mode == f"{channels}-channel" and read_info.alpha is None
        assert image.dtype == np.float32 and image.shape == data.shape
        np.testing.assert_array_equal(image[..., :-1].reshape(expected.shape), expected)
        np.testing.assert_array_equal(image[..., -1], data[..., -1])
        return
    assert image.dtype == np.float32 and image.shape == colour.shape
    assert read_info.bit_depth == info.bit_depth and read_info.mode == info.mode
    np.testing.assert_array_equal(image, expected)
    if channels in (2, 4):
        np.testing.assert_array_equal(read_info.alpha, data[..., -1])
        assert read_info.alpha.dtype == dtype
    else:
        assert read_info.alpha is None


def test_npy_channels_are_all_data(tmp_path):
    """2 and 4 channels of a .npy array are filtered and written back like the others (no
    alpha), to .npy or float TIFF; image formats, which would take the last one for alpha,
    are refused."""
    data = np.random.default_rng(3).random((9, 11, 4)).astype(np.float32) * 255
    np.save(tmp_path / "four.npy", data)
    image, info = imageio.read_image(tmp_path / "four.npy")
    np.testing.assert_array_equal(image, data)
    assert (info.mode, info.channels, info.alpha, info.note) == ("4-channel", 4, None, None)
    imageio.write_image(tmp_path / "out.npy", image + 1, info)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), data + 1)
    for suffix in (".png", ".jpg", ".webp", ".bmp"):
        with pytest.raises(imageio.ImageFileError, match=r"a 4-channel \.npy array is written "
                                                         r"as \.npy only or as float32 \.tif"):
            imageio.write_image(tmp_path / f"out{suffix}", image, info)
    pytest.importorskip("tifffile")
    imageio.write_image(tmp_path / "out.tif", image + 1, info)
    again, tiff_info = imageio.read_image(tmp_path / "out.tif")
    np.testing.assert_array_equal(again, data + 1)
    assert (tiff_info.mode, tiff_info.bit_depth, tiff_info.format) == ("4-channel", None, "TIFF")
    with pytest.raises(imageio.ImageFileError, match=r"shape \(H, W, 4\)"):
        imageio.write_image(tmp_path / "bad.npy", image[..., :3], info)


@pytest.mark.parametrize("make,mode,note", [
    (lambda g, c: Image.fromarray(g).convert("P"), "L", "a palette image of grey levels"),
    (lambda g, c: Image.fromarray(c).convert("P"), "RGB", "a palette image: denoised as RGB"),
    (lambda g, c: Image.fromarray(g).convert("1"), "L", "a 1-bit image: denoised as 8-bit"),
    (lambda g, c: Image.fromarray(c).convert("CMYK"), "RGB", "a CMYK image"),
    (lambda g, c: Image.fromarray(g), "L", None),
])
def test_converted_files_say_so(tmp_path, make, mode, note):
    rng = np.random.default_rng(4)
    grey = rng.integers(0, 256, (12, 10)).astype(np.uint8)
    colour = rng.integers(0, 256, (12, 10, 3)).astype(np.uint8)
    path = tmp_path / ("image.tif" if note and "CMYK" in note else "image.png")
    make(grey, colour).save(path)
    image, info = imageio.read_image(path)
    assert info.mode == mode and image.shape == ((12, 10) if mode == "L" else (12, 10, 3))
    assert (info.note is None) if note is None else info.note.startswith(note)
    if note and "grey levels" in note:
        np.testing.assert_array_equal(image, grey)


@pytest.mark.parametrize("dtype", [np.float64, np.int16, np.int32])
def test_npy_of_other_dtypes_say_so(tmp_path, dtype):
    np.save(tmp_path / "a.npy", np.arange(20, dtype=dtype).reshape(4, 5))
    image, info = imageio.read_image(tmp_path / "a.npy")
    assert image.dtype == np.float32 and info.bit_depth is None
    assert info.note == f"{np.dtype(dtype)} values read as float32 (and written back as float32)"


def test_png_decoder_matches_pillow():
    """The 16-bit colour fallback decoder, checked on 8-bit files Pillow also reads (their rows
    use all five PNG filters)."""
    for name in ("astronaut", "camera", "coins"):
        data = (DATA / f"{name}.png").read_bytes()
        np.testing.assert_array_equal(imageio.decode_png(data), load_image(name, np.uint8))


def test_16bit_colour_png_is_readable_elsewhere(tmp_path):
    """Pillow reads clpatch's 16-bit RGB PNG (reduced to the high bytes), so the file is valid."""
    data = np.random.default_rng(2).integers(0, 65536, (9, 11, 3)).astype(np.uint16)
    path = tmp_path / "rgb16.png"
    imageio.write_image(path, data.astype(np.float32), imageio.ImageInfo(16, "RGB"))
    with Image.open(path) as reduced:
        np.testing.assert_array_equal(np.asarray(reduced), (data >> 8).astype(np.uint8))
    assert np.array_equal(imageio.read_array(path)[0], data)


def test_add_noise_and_psnr():
    image = np.full((50, 60), 100, np.float32)
    a = imageio.add_noise(image, 10, seed=4)
    assert a.dtype == np.float32 and np.array_equal(a, imageio.add_noise(image, 10, seed=4))
    assert not np.array_equal(a, imageio.add_noise(image, 10, seed=5))
    assert abs(float(np.std(a - image)) - 10) < 0.5
    assert imageio.psnr(image, image, 255) == float("inf")
    assert imageio.psnr(image + 1, image, 255) == pytest.approx(20 * np.log10(255))
    with pytest.raises(ValueError, match="sigma must be > 0"):
        imageio.add_noise(image, 0, seed=1)


def test_read_image_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.png: no such file"):
        imageio.read_image(tmp_path / "missing.png")
    with pytest.raises(ValueError, match="not a file"):
        imageio.read_image(tmp_path)
    npy = tmp_path / "five.npy"
    np.save(npy, np.zeros((4, 5, 5)))
    with pytest.raises(ValueError, match=r"five.npy: shape \(4, 5, 5\) is not an image"):
        imageio.read_image(npy)
    frames = tmp_path / "stack.tif"
    pages = [Image.fromarray(np.full((6, 7), k, np.uint8)) for k in range(3)]
    pages[0].save(frames, save_all=True, append_images=pages[1:])
    with pytest.raises(ValueError, match="stack.tif: has 3 frames"):
        imageio.read_image(frames)
    assert imageio.read_array(frames)[0].shape == (3, 6, 7)
