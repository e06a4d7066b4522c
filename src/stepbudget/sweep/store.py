"""Results store: every evaluated layout as Parquet rows, written all-or-nothing.

Rows go to a hidden temporary file beside the target, one row group per chunk; only when
the search finishes is it renamed over the target (an atomic rename on one file system).
An error or Ctrl-C removes the temporary file, so a file the user saved before is never
replaced by half a result.

A chunk is encoded and compressed on a writer thread while the search evaluates the next
one (pyarrow releases the GIL), one chunk in flight at most; a write's error surfaces at the
next write or at the end.
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import Future, ThreadPoolExecutor
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
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parquet")
        self._pending: Future | None = None
        self.rows = 0

    def __enter__(self) -> "ParquetSink":
        return self

    def write(self, columns: dict[str, np.ndarray]) -> None:
        """Queue one chunk's rows; returns once the previous chunk is written, so one is in flight at most."""
        table = _table(columns)
        self._wait()
        self._pending = self._thread.submit(self._write, table)
        self.rows += table.num_rows

    def _write(self, table) -> None:  # on the writer thread
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._writer is None:
            # the layout columns take a handful of values each: dictionary-encoded; a metric has about as many
            # values as rows, so a dictionary tried on it would be built and thrown away
            few = [f.name for f in table.schema if not pa.types.is_floating(f.type)]
            self._writer = pq.ParquetWriter(self.tmp, table.schema, compression="zstd", use_dictionary=few)
        self._writer.write_table(table)

    def _wait(self) -> None:
        """Finish the chunk in flight; its OSError as the ScenarioError that names the path."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            pending.result()
        except OSError as e:
            raise self._cannot(e) from None

    def _cannot(self, e: OSError) -> ScenarioError:
        self._discard()
        return ScenarioError(f"out: cannot write {str(self.path)!r} ({e.strerror or e}); choose a writable path")

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self._wait()
            else:  # the search failed: let the chunk in flight end, keep the first error
                with contextlib.suppress(Exception):
                    self._wait()
            self._thread.shutdown()
            if self._writer is not None:
                self._writer.close()
            if exc_type is None and self._writer is not None:
                os.replace(self.tmp, self.path)
        except OSError as e:
            raise self._cannot(e) from None
        finally:
            self._thread.shutdown()
            self._discard()

    def _discard(self) -> None:
        """Remove the temporary file; a failure to remove it never hides the error that ended the write."""
        with contextlib.suppress(OSError):
            self.tmp.unlink(missing_ok=True)


def _table(columns: dict[str, np.ndarray]):
    """One chunk as an Arrow table: coded knobs as dictionary-encoded names, 0/1 columns as booleans."""
    import pyarrow as pa

    arrays = {}
    for name, values in columns.items():
        if name in CODE_NAMES:
            arrays[name] = pa.DictionaryArray.from_arrays(pa.array(values.astype(np.int32)), pa.array(CODE_NAMES[name]))
        elif name in BOOLS:
            arrays[name] = pa.array(values.astype(bool))
        else:
            arrays[name] = pa.array(values)
    return pa.table(arrays)
