"""How the NNF cuts a large `a` into bands of rows that fit the device, with the same field
as one pass.

b's side (its image, reduced points and k-d tree) is built once and must fit; a's side
(its image, reduced points, candidate lists and matches) grows with a's rows, so a is
searched band by band. A query's field depends on rows beyond its own only through the
propagation (down from the band-start row of its block of BAND rows: rows 0, BAND, 2·BAND,
… are searched exactly) and the checkerboard passes (each half-pass of the refinement and
the polish reads the four neighbours: one row per half-pass). A band therefore computes
rows [s, e) whose start s is a multiple of BAND at least `halo` rows above the rows it
keeps, [a0, a1), and whose end e lies `halo` rows below them (or at the image's edges):
rows kept are then computed exactly as one pass over the whole image computes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.errors import DeviceResourceError


@dataclass(frozen=True)
class NnfBand:
    """Rows [s, e) of a's patch grid searched, rows [a0, a1) of them kept."""

    s: int
    e: int
    a0: int
    a1: int


def band_capacity(rows_kept: int, halo: int, align: int) -> int:
    """Rows a band computes at most when it keeps `rows_kept`."""
    return rows_kept + 2 * halo + align - 1


def plan_bands(rows: int, rows_kept: int, halo: int, align: int) -> list[NnfBand]:
    """Bands over a's `rows` patch-grid rows keeping `rows_kept` each (one band when that
    covers them); see the module doc."""
    if rows_kept >= rows:
        return [NnfBand(0, rows, 0, rows)]
    bands = []
    for a0 in range(0, rows, rows_kept):
        a1 = min(rows, a0 + rows_kept)
        s = max(0, (a0 - halo) // align * align)
        bands.append(NnfBand(s, min(rows, a1 + halo), a0, a1))
    return bands


def rows_per_band(rows: int, *, fixed_bytes: int, fixed_largest: int, row_bytes: int,
                  row_largest: int, largest: int, total: int, halo: int, align: int,
                  what: str) -> int:
    """The most rows a band can keep: b's side takes `fixed_bytes` of `total` (its largest
    buffer `fixed_largest` of `largest`), every row a band computes `row_bytes` (its
    largest buffer grows by `row_largest` a row). `rows` when the whole image fits;
    DeviceResourceError naming `what` (b's side) when not even a band of `align` rows fits."""
    if fixed_bytes > total or fixed_largest > largest:
        raise DeviceResourceError(
            f"{what} needs {fixed_bytes} bytes on the device ({fixed_largest} in one buffer), "
            f"more than this device allows ({total}, {largest} in one buffer): the NNF "
            "cuts a into bands but holds b whole")
    if rows * row_bytes + fixed_bytes <= total and rows * row_largest <= largest:
        return rows
    fit = min((total - fixed_bytes) // max(row_bytes, 1), largest // max(row_largest, 1))
    kept = fit - (2 * halo + align - 1)
    if kept < 1:
        raise DeviceResourceError(
            f"not even a band of a's rows fits beside {what} on this device ({fit} rows "
            f"would, a band needs {2 * halo + align} to keep one)")
    return min(kept, rows)
