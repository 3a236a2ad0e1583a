"""Images too large for memory, read and written chunk by chunk: TIFF (BigTIFF included) and
Zarr, through tifffile, zarr and dask (the "dask" extra).

`open_chunked(path, chunks)` gives a lazy Dask array (H, W) or (H, W, C) of the file's dtype,
chunked `chunks` × `chunks` in space: a TIFF is read through tifffile's Zarr view of its
first image (only the strips or tiles a chunk covers are read), a Zarr array directly.
`write_chunked` writes the result band of chunk rows by band, computing each band only
when the previous one is written: a Zarr array of the input's dtype and chunks, or a tiled
BigTIFF. Integer outputs are rounded and clipped to their dtype's range, as the in-memory
command writes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ImageFileError

__all__ = ["CHUNKED_SUFFIXES", "open_chunked", "tiff_tile", "write_chunked"]

#: File kinds read and written by chunks.
CHUNKED_SUFFIXES = (".tif", ".tiff", ".zarr")
DASK_EXTRA_HINT = 'install the dask extra: pip install "clpatch[dask]"'


def _require(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        raise ImageFileError(f"reading and writing by chunks needs {name}; {DASK_EXTRA_HINT}") from None


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in CHUNKED_SUFFIXES:
        raise ImageFileError(f"{path}: images are read and written by chunks as TIFF (.tif, "
                             f".tiff) or Zarr (.zarr), not {suffix or 'files without a suffix'}")
    return suffix


def open_chunked(path: str | Path, chunks: int) -> Any:
    """The image at `path` as a Dask array chunked chunks × chunks (see the module doc)."""
    path = Path(path)
    _suffix(path)
    da = _require("dask").array
    zarr = _require("zarr")
    if not path.exists():
        raise ImageFileError(f"{path}: no such file or directory")
    if path.suffix.lower() == ".zarr":
        try:
            array = zarr.open_array(str(path), mode="r")
        except Exception as error:          # zarr raises several kinds
            raise ImageFileError(f"{path}: not a Zarr array ({error})") from None
    else:
        tifffile = _require("tifffile")
        try:
            store = tifffile.imread(str(path), aszarr=True)
            array = zarr.open(store, mode="r")
        except Exception as error:
            raise ImageFileError(f"{path}: cannot be read as a TIFF image ({error})") from None
        if hasattr(array, "keys"):          # a pyramid: its full-resolution level
            array = array[sorted(array.keys())[0]]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (1, 3)):
        raise ImageFileError(f"{path}: images read by chunks must be (H, W) or (H, W, 3), "
                             f"got shape {array.shape}")
    x = da.from_array(array, chunks=(chunks, chunks) + (-1,) * (array.ndim - 2))
    return x[..., 0] if array.ndim == 3 and array.shape[2] == 1 else x


def tiff_tile(chunks: int) -> int:
    """The TIFF tile side for bands of `chunks` rows: the largest of 512 … 16 dividing it."""
    for side in (512, 256, 128, 64, 32, 16):
        if chunks % side == 0:
            return side
    raise ImageFileError(f"writing a TIFF by chunks needs --chunks to be a multiple of 16, got {chunks}")


def write_chunked(path: str | Path, shape: tuple[int, ...], dtype: Any, chunks: int,
                  bands: Iterable[np.ndarray]) -> None:
    """Write an (H, W[, 3]) image of `dtype` from `bands` (float32 bands of `chunks` rows, in
    order, the last one shorter), each pulled only when the previous one is written: a Zarr
    array chunked like the input, or a tiled BigTIFF (tiles of `tiff_tile(chunks)`)."""
    path, shape, dtype = Path(path), tuple(shape), np.dtype(dtype)
    if _suffix(path) == ".zarr":
        zarr = _require("zarr")
        array = zarr.open_array(str(path), mode="w", shape=shape, dtype=dtype,
                                chunks=(chunks, chunks) + shape[2:])
        row = 0
        for band in bands:
            array[row:row + band.shape[0]] = _cast(band, dtype)
            row += band.shape[0]
        return
    tifffile = _require("tifffile")
    tile = tiff_tile(chunks)
    with tifffile.TiffWriter(str(path), bigtiff=True) as tiff:
        tiff.write(_tiles(bands, shape[1], tile, dtype), shape=shape, dtype=dtype,
                   tile=(tile, tile), photometric="rgb" if len(shape) == 3 else "minisblack",
                   compression=None, metadata=None)


def _cast(band: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float32 results as `dtype` holds them (rounded and clipped for integers)."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        band = np.clip(np.rint(band), info.min, info.max)
    return band.astype(dtype)


def _tiles(bands: Iterable[np.ndarray], cols: int, side: int, dtype: np.dtype) -> Iterator[np.ndarray]:
    """The TIFF's tiles in row-major order, edge tiles zero-padded, pulling bands as needed."""
    for band in bands:
        band = _cast(band, dtype)
        for y in range(0, band.shape[0], side):
            for x in range(0, cols, side):
                tile = band[y:y + side, x:x + side]
                if tile.shape[:2] != (side, side):
                    padded = np.zeros((side, side) + tile.shape[2:], dtype)
                    padded[:tile.shape[0], :tile.shape[1]] = tile
                    tile = padded
                yield tile
