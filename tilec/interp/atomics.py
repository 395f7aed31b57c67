"""Atomic adds in the interpreters, rounded as the GPU rounds them.

A GPU's ``atomicAdd`` on a 16-bit float (``__half``, ``__nv_bfloat16``) rounds the sum to the element's type after
each add, so many adds into one element lose what a single rounding at the end would keep (2048 + 1 in float16 is
2048 again). The interpreters add in that order too: the k-th add into every element at once, for k = 0, 1, ...,
each summed in float64 (exact for two 16-bit values) and rounded once to the element's type."""

from __future__ import annotations

import numpy as np

from tilec import dtypes as dt


def add_at(arr: np.ndarray, index: tuple[np.ndarray, ...], values: np.ndarray) -> None:
    """``arr[index] += values`` with repeated indices accumulated (like ``np.add.at``), an element of a float type
    narrower than 32 bits rounded after each add (in the order of ``values``)."""
    if arr.ndim == 0:  # a scalar: every value adds into its one element
        arr, index = arr.reshape(1), (np.zeros(values.size, np.int64),)
    if not (arr.dtype.itemsize < 4 and arr.dtype.kind in "fV"):
        np.add.at(arr, index, values.astype(arr.dtype))
        return
    flat = np.ravel_multi_index(index, arr.shape)
    if not flat.size:
        return
    order = np.argsort(flat, kind="stable")
    sorted_ = flat[order]
    first = np.flatnonzero(np.r_[True, sorted_[1:] != sorted_[:-1]])  # where each element's run of adds starts
    rank = np.empty_like(order)
    rank[order] = np.arange(flat.size) - np.repeat(first, np.diff(np.r_[first, flat.size]))
    v = values.astype(np.float64)
    for k in range(int(rank.max()) + 1):  # the k-th add into each element: one rounding per add
        sel = rank == k
        at = tuple(i[sel] for i in index)
        total = arr[at].astype(np.float64) + v[sel]
        arr[at] = (dt.float32_to_odd(total) if arr.dtype.kind == "V" else total).astype(arr.dtype)
