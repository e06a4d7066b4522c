"""Results store: every evaluated layout as Parquet rows, written all-or-nothing.

Rows go to a hidden temporary file beside the target, one row group per chunk; only when
the search finishes is it renamed over the target (an atomic rename on one file system).
An error or Ctrl-C removes the temporary file, so a file the user saved before is never
replaced by half a result.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stepbudget.enums import CP_KIND_CODES, DP_KIND_CODES, RECOMPUTE_CODES, SCHEDULE_CODES
from stepbudget.inputs.files import partial_name
from stepbudget.inputs.scenario import ScenarioError

if TYPE_CHECKING:  # pyarrow is imported when a sink is made: only `search --out` needs it
    import pyarrow.parquet as pq

# coded columns are written as dictionary-encoded strings: readable in any Parquet reader
CODE_NAMES = {
    "schedule": [str(k) for k in SCHEDULE_CODES],
    "dp_kind": [str(k) for k in DP_KIND_CODES],
    "recompute": [str(k) for k in RECOMPUTE_CODES],
    "cp_kind": list(CP_KIND_CODES),
}
BOOLS = ("reshard_after_forward", "sequence_parallel", "fits")


class ParquetSink:
    """Context manager that appends column dicts and publishes the file on a clean exit."""

    def __init__(self, path: str | os.PathLike):
        import pyarrow.parquet  # noqa: F401 - fail here, before any work, if pyarrow is missing

        self.path = Path(path)
        self.tmp = partial_name(self.path)
        self._writer: pq.ParquetWriter | None = None  # opened by the first write, with its schema
        self.rows = 0

    def __enter__(self) -> "ParquetSink":
        return self

    def write(self, columns: dict[str, np.ndarray]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        arrays = {}
        for name, values in columns.items():
            if name in CODE_NAMES:
                arrays[name] = pa.DictionaryArray.from_arrays(
                    pa.array(values.astype(np.int32)), pa.array(CODE_NAMES[name])
                )
            elif name in BOOLS:
                arrays[name] = pa.array(values.astype(bool))
            else:
                arrays[name] = pa.array(values)
        table = pa.table(arrays)
        try:
            if self._writer is None:
                self._writer = pq.ParquetWriter(self.tmp, table.schema, compression="zstd")
            self._writer.write_table(table)
        except OSError as e:
            raise self._cannot(e) from None
        self.rows += table.num_rows

    def _cannot(self, e: OSError) -> ScenarioError:
        self._discard()
        return ScenarioError(f"out: cannot write {str(self.path)!r} ({e.strerror or e}); choose a writable path")

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
            if exc_type is None and self._writer is not None:
                os.replace(self.tmp, self.path)
        except OSError as e:
            raise self._cannot(e) from None
        finally:
            self._discard()

    def _discard(self) -> None:
        """Remove the temporary file; a failure to remove it never hides the error that ended the write."""
        with contextlib.suppress(OSError):
            self.tmp.unlink(missing_ok=True)
