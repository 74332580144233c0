"""`RowSource`: a checkpoint tensor too large to hold whole beside the
model, which `checkpoint.assign_value` reads a block of rows at a time."""

import numpy as np


class RowSource:
    """A large checkpoint tensor that `assign_value` reads a block of rows
    at a time, never whole: `read(start, stop)` gives rows `[start, stop)`
    as an array of `shape[1:]` rows (e.g. a quantized GGUF embedding
    table, dequantized piece by piece). `astype` casts each block as it
    is read; slicing reads rows."""

    def __init__(self, shape, dtype, read):
        self.shape, self.dtype, self._read = tuple(shape), np.dtype(dtype), read
        self.ndim = len(self.shape)
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize

    def astype(self, dtype, copy=True):
        return RowSource(self.shape, dtype, self._read)

    def __getitem__(self, rows):
        start, stop, _ = rows.indices(self.shape[0])
        return np.asarray(self._read(start, stop)).astype(self.dtype, copy=False)

    def __array__(self, dtype=None, copy=None):  # whole, where one is asked for
        return self[:].astype(dtype or self.dtype, copy=False)
